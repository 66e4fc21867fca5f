#include "model/model.h"

#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <numbers>

#include "core/error.h"
#include "core/hash.h"
#include "core/fp16.h"
#include "core/mapped_file.h"
#include "core/paths.h"
#include "kernels/ops.h"
#include "kernels/packed_weights.h"
#include "model/gguf/gguf.h"
#include "model/weight_check.h"

namespace kvs {

Model::~Model() {
  for (const Packed& p : packed) kernels::unregister_packed(p.key);
}

std::unique_ptr<Model> Model::load(const std::string& path) {
  namespace fs = std::filesystem;
  auto m = std::make_unique<Model>();
  m->path = path;
  std::error_code ec;
  if (!fs::exists(path, ec)) fail("{}: no such file or directory", path);
  // A model is a regular GGUF file or a HF directory; a FIFO or device is refused before it is
  // opened (opening a FIFO would block forever).
  require_regular_if_present(path, "a model (GGUF file or Hugging Face directory)", /*dir_ok=*/true);
  if (fs::is_directory(path, ec)) {
    detail::load_hf(*m, path);
  } else if (fs::path(path).filename() == "config.json") {
    detail::load_hf(*m, fs::path(path).parent_path().string());
  } else {
    detail::load_gguf(*m, path);
  }
  return m;
}

TensorView Model::own_f32(const std::string& nm, std::vector<float> data, std::array<int64_t, 4> ne, int n_dims) {
  owned_.push_back(std::move(data));
  TensorView t;
  t.name = nm;
  t.type = DType::F32;
  t.n_dims = n_dims;
  t.ne = ne;
  t.data = owned_.back().data();
  t.nbytes = owned_.back().size() * sizeof(float);
  return t;
}

namespace {

void for_each_weight(const Model& m, const auto& fn) {
  fn(m.tok_embd);
  fn(m.output_norm);
  if (m.output.data != m.tok_embd.data) fn(m.output);
  for (const auto& l : m.layers) {
    // Fused tensors (Phi-3) count once: their row views are skipped.
    const bool fqkv = l.wqkv.valid(), fgu = l.ffn_gate_up.valid();
    for (const TensorView* t : {&l.attn_norm, &l.wqkv, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.q_norm,
                                &l.k_norm, &l.ffn_norm, &l.post_attn_norm, &l.post_ffn_norm, &l.ffn_gate_up, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) {
      if (!t->valid()) continue;
      if (fqkv && (t == &l.wq || t == &l.wk || t == &l.wv)) continue;
      if (fgu && (t == &l.ffn_gate || t == &l.ffn_up)) continue;
      fn(*t);
    }
  }
}


// Checks a weight's type is usable and its shape is [rows][cols] (GGML ne = {cols, rows}).
void check_matrix(const TensorView& t, int64_t rows, int64_t cols, const std::string& src) {
  if (!t.valid()) fail("{}: missing tensor '{}' (expected shape [{}, {}])", src, t.name, cols, rows);
  if (!kernels::dtype_computable(t.type))
    fail("{}: tensor '{}': {}", src, t.name, kernels::cannot_compute_message(t.type));
  if (t.ne[0] != cols || t.rows() != rows || t.ne[2] != 1 || t.ne[3] != 1)
    fail("{}: tensor '{}' has shape {}, expected [{}, {}]", src, t.name, shape_str(t), cols, rows);
}

// Rows [r0, r0 + n) of a matrix as a view of its bytes (rows are contiguous whole blocks in every type).
TensorView row_slice(const TensorView& t, int64_t r0, int64_t n, const std::string& name) {
  TensorView v = t;
  v.name = name;
  v.ne[1] = n;
  v.data = t.row(r0);
  v.nbytes = static_cast<size_t>(n) * t.row_bytes();
  return v;
}

// Vectors (norm weights, biases) are converted to owned f32 if stored in another type.
TensorView vector_f32(Model& m, const TensorView& t, int64_t n, const std::string& src) {
  if (!t.valid()) fail("{}: missing tensor '{}' (expected [{}])", src, t.name, n);
  if (t.n_elements() != n || t.ne[0] != n)
    fail("{}: tensor '{}' has shape {}, expected [{}]", src, t.name, shape_str(t), n);
  if (t.type == DType::F32) return t;
  if (!kernels::dtype_computable(t.type))
    fail("{}: tensor '{}': {}", src, t.name, kernels::cannot_compute_message(t.type));
  std::vector<float> v(static_cast<size_t>(n));
  kernels::dequantize_row(t.type, t.data, v.data(), n);
  return m.own_f32(t.name, std::move(v), {n, 1, 1, 1}, 1);
}

// A norm weight as the forward uses it: Gemma's HF checkpoints store w and compute x * (1 + w)
// (transformers' Gemma2RMSNorm); llama.cpp's converter stores 1 + w in the GGUF, and the forward
// multiplies by the stored vector. `add` = 1 brings an HF Gemma weight to the GGUF convention.
TensorView norm_f32(Model& m, const TensorView& t, int64_t n, const std::string& src, float add) {
  TensorView v = vector_f32(m, t, n, src);
  if (add == 0.0f) return v;
  std::vector<float> w(v.f32(), v.f32() + n);
  for (float& x : w) x += add;
  return m.own_f32(t.name, std::move(w), {n, 1, 1, 1}, 1);
}

}  // namespace

std::vector<float> detail::rope_inv_freq(const HParams& hp) {
  const int half = hp.rope_dim / 2;
  std::vector<float> f(static_cast<size_t>(half));
  const auto& rs = hp.rope_scaling;
  for (int i = 0; i < half; ++i) {
    double inv = 1.0 / std::pow(static_cast<double>(hp.rope_theta), (2.0 * i) / hp.rope_dim);
    if (rs.type == "linear") {
      inv /= rs.factor;
    } else if (rs.type == "llama3") {
      // HF transformers _compute_llama3_parameters.
      const double low_wavelen = rs.original_max_pos / rs.low_freq_factor;
      const double high_wavelen = rs.original_max_pos / rs.high_freq_factor;
      const double wavelen = 2.0 * std::numbers::pi / inv;
      if (wavelen > low_wavelen) {
        inv /= rs.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (rs.original_max_pos / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        inv = (1.0 - smooth) * inv / rs.factor + smooth * inv;
      }
    }
    f[static_cast<size_t>(i)] = static_cast<float>(inv);
  }
  return f;
}

void detail::finish_model(Model& m, const std::string& src) {
  const HParams& hp = m.hp;
  hp.validate(src);
  const int64_t E = hp.n_embd, Q = int64_t{hp.n_head} * hp.head_dim, KV = int64_t{hp.n_head_kv} * hp.head_dim;
  check_matrix(m.tok_embd, hp.n_vocab, E, src);
  const float norm_add = hp.gemma_block && m.format == "hf" ? 1.0f : 0.0f;
  m.output_norm = norm_f32(m, m.output_norm, E, src, norm_add);
  if (!m.output.valid()) {
    m.output = m.tok_embd;
    m.hp.tied_embeddings = true;
  }
  check_matrix(m.output, hp.n_vocab, E, src);
  if (static_cast<int>(m.layers.size()) != hp.n_layer)
    fail("{}: found {} layers of weights, expected {}", src, m.layers.size(), hp.n_layer);
  for (auto& l : m.layers) {
    l.attn_norm = norm_f32(m, l.attn_norm, E, src, norm_add);
    if (l.wqkv.valid()) {  // Phi-3: [Q | K | V] rows
      check_matrix(l.wqkv, Q + 2 * KV, E, src);
      l.wq = row_slice(l.wqkv, 0, Q, l.wqkv.name + "[q]");
      l.wk = row_slice(l.wqkv, Q, KV, l.wqkv.name + "[k]");
      l.wv = row_slice(l.wqkv, Q + KV, KV, l.wqkv.name + "[v]");
    }
    if (l.ffn_gate_up.valid()) {  // Phi-3: [gate | up] rows, silu on the gate (llama.cpp LLM_FFN_SWIGLU, HF chunk(2))
      check_matrix(l.ffn_gate_up, 2 * int64_t{hp.n_ff}, E, src);
      l.ffn_gate = row_slice(l.ffn_gate_up, 0, hp.n_ff, l.ffn_gate_up.name + "[gate]");
      l.ffn_up = row_slice(l.ffn_gate_up, hp.n_ff, hp.n_ff, l.ffn_gate_up.name + "[up]");
    }
    check_matrix(l.wq, Q, E, src);
    check_matrix(l.wk, KV, E, src);
    check_matrix(l.wv, KV, E, src);
    check_matrix(l.wo, E, Q, src);
    if (hp.qkv_bias) {
      l.bq = vector_f32(m, l.bq, Q, src);
      l.bk = vector_f32(m, l.bk, KV, src);
      l.bv = vector_f32(m, l.bv, KV, src);
    }
    if (hp.qk_norm) {  // Gemma 3's q_norm / k_norm are Gemma norms too (1 + w)
      l.q_norm = norm_f32(m, l.q_norm, hp.head_dim, src, norm_add);
      l.k_norm = norm_f32(m, l.k_norm, hp.head_dim, src, norm_add);
    }
    l.ffn_norm = norm_f32(m, l.ffn_norm, E, src, norm_add);
    if (hp.gemma_block) {
      l.post_attn_norm = norm_f32(m, l.post_attn_norm, E, src, norm_add);
      l.post_ffn_norm = norm_f32(m, l.post_ffn_norm, E, src, norm_add);
    }
    check_matrix(l.ffn_gate, hp.n_ff, E, src);
    check_matrix(l.ffn_up, hp.n_ff, E, src);
    check_matrix(l.ffn_down, E, hp.n_ff, src);
  }
  if (m.rope_inv_freq.empty()) m.rope_inv_freq = rope_inv_freq(m.hp);
  if (hp.rope_theta_swa > 0) {  // Gemma 3's local layers: their own base, no scaling (rotary_emb_local)
    HParams local = hp;
    local.rope_theta = hp.rope_theta_swa;
    local.rope_scaling = RopeScaling{};
    m.rope_inv_freq_swa = rope_inv_freq(local);
  }

  // Every value finite (NaN / Inf scales would turn every logit into NaN, silently).
  for_each_weight(m, [&](const TensorView& t) { check_weights_finite(t, src); });

  uint64_t h = kFnv1aInit;
  const std::string s = m.hp.summary();
  h = fnv1a(h, s.data(), s.size());
  for_each_weight(m, [&](const TensorView& t) {
    h = fnv1a(h, t.name.data(), t.name.size());
    h = fnv1a(h, &t.type, sizeof(t.type));
    h = fnv1a(h, t.ne.data(), sizeof(t.ne));
    const size_t k = std::min<size_t>(t.nbytes, 4096);
    h = fnv1a(h, t.data, k);
    h = fnv1a(h, static_cast<const uint8_t*>(t.data) + (t.nbytes - k), k);
  });
  m.fingerprint = h;
  repack_weights(m);  // after the fingerprint, which identifies the file's bytes
}

size_t Model::weight_bytes() const {
  size_t n = 0;
  for_each_weight(*this, [&](const TensorView& t) { n += t.nbytes; });
  return n;
}

size_t Model::resident_bytes() const {
  size_t n = 0;
  // A repacked tensor counts as its packed copy (anonymous memory, all resident); its file pages
  // are no longer read by the matmul (mincore would still see them in the page cache).
  auto is_packed = [&](const void* d) {
    for (const Packed& p : packed)
      if (p.key == d) return true;
    return false;
  };
  for_each_weight(*this, [&](const TensorView& t) {
    if (!is_packed(t.data)) n += kvs::resident_bytes(t.data, t.nbytes);
  });
  for (const Packed& p : packed) n += p.bytes;
  return n;
}

}  // namespace kvs
