// GGUF -> Model: hyper-parameters from "{arch}.*" keys, tensors by llama.cpp names.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "model/gguf/gguf.h"
#include "model/model.h"

namespace kvs::detail {

namespace {
TensorView find_tensor(const GgufFile& g, const std::string& name, bool required) {
  if (const TensorView* t = g.tensor(name)) return *t;
  if (required) fail("{}: missing tensor '{}'", g.path(), name);
  TensorView empty;
  empty.name = name;
  return empty;
}
// GGUF stores llama3 RoPE scaling only as per-frequency divisors f_i. With
// s = (orig / wavelen - low) / (high - low), the divisor in the smooth band is 1 / f = (1 - s) /
// factor + s, so s is linear in 1 / wavelen: s = a / wavelen - b with a = orig / (high - low) and
// b = low / (high - low). Any low fits the same a, b; we take low = 1 (what Llama 3.x uses).
// Returns false (leaving the scaling unknown) if the divisors are not of that form.
bool fit_llama3_scaling(HParams& hp, const float* f, int half) {
  double factor = 1;
  for (int i = 0; i < half; ++i) factor = std::max(factor, static_cast<double>(f[i]));
  if (factor <= 1.0) return false;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0;
  for (int i = 0; i < half; ++i) {
    if (f[i] <= 1.0 + 1e-6 || f[i] >= factor * (1 - 1e-6)) continue;
    const double inv = std::pow(static_cast<double>(hp.rope_theta), -2.0 * i / hp.rope_dim);
    const double x = inv / (2.0 * 3.14159265358979323846);  // 1 / wavelen
    const double y = (1.0 / f[i] - 1.0 / factor) / (1.0 - 1.0 / factor);
    sx += x, sy += y, sxx += x * x, sxy += x * y, ++n;
  }
  if (n < 2) return false;
  const double a = (n * sxy - sx * sy) / (n * sxx - sx * sx), b = -(sy - a * sx) / n;
  if (!(a > 0 && b > 0)) return false;
  HParams t = hp;
  t.rope_scaling = {"llama3", static_cast<float>(factor), 1.0f, static_cast<float>(1.0 + 1.0 / b),
                    static_cast<int>(std::lround(a / b))};
  const std::vector<float> want = rope_inv_freq(t);
  for (int i = 0; i < half; ++i) {
    const double got = std::pow(static_cast<double>(hp.rope_theta), -2.0 * i / hp.rope_dim) / f[i];
    if (std::fabs(got - want[static_cast<size_t>(i)]) > 1e-4 * got) return false;
  }
  hp.rope_scaling = t.rope_scaling;
  return true;
}

}  // namespace

void load_gguf(Model& m, const std::string& path) {
  m.gguf_file = GgufFile::open(path);
  const GgufFile& g = *m.gguf_file;
  m.format = "gguf";
  HParams& hp = m.hp;
  const std::string arch = g.get_str("general.architecture");
  hp.arch_name = arch;
  if (arch == "llama") {
    hp.arch = Arch::Llama;
    hp.rope_style = kernels::RopeStyle::Interleaved;  // Q/K stored permuted by the converter
  } else if (arch == "qwen2") {
    hp.arch = Arch::Qwen2;
    hp.rope_style = kernels::RopeStyle::RotateHalf;
    hp.qkv_bias = true;
  } else if (arch == "qwen3") {
    // llama.cpp's qwen3: rotate-half (NEOX) RoPE, Q/K stored unpermuted, no biases,
    // blk.N.attn_q_norm / attn_k_norm [head_dim] applied per head before RoPE.
    hp.arch = Arch::Qwen3;
    hp.rope_style = kernels::RopeStyle::RotateHalf;
    hp.qk_norm = true;
  } else if (arch == "phi3") {
    // llama.cpp's phi3 (Phi-3, Phi-3.5, Phi-4): NEOX RoPE, fused attn_qkv and ffn_up (gate | up).
    hp.arch = Arch::Phi3;
    hp.rope_style = kernels::RopeStyle::RotateHalf;
  } else if (arch == "gemma2") {
    // llama.cpp's gemma2 (llm_build_gemma2): NEOX RoPE, norms stored as 1 + w by the converter.
    hp.arch = Arch::Gemma2;
    hp.rope_style = kernels::RopeStyle::RotateHalf;
    hp.gemma_block = true;
    hp.swa_period = 2;  // "(il % 2) layers use SWA": even layers local
  } else if (arch == "gemma3") {
    // llama.cpp's gemma3 (build_gemma3_iswa): Gemma 2's block without soft-capping, per-head
    // attn_q_norm / attn_k_norm (stored as 1 + w, as every Gemma norm) before RoPE, five local
    // layers for each global one, local layers rotated with base 10,000 and no scaling.
    hp.arch = Arch::Gemma3;
    hp.rope_style = kernels::RopeStyle::RotateHalf;
    hp.gemma_block = true;
    hp.qk_norm = true;
    hp.swa_period = 6;  // llama.cpp: set_swa_pattern(6), layer il global iff (il + 1) % 6 == 0
  } else {
    fail("{}: unsupported architecture '{}' (general.architecture); supported: llama, qwen2, qwen3, phi3, gemma2, "
         "gemma3",
         path, arch);
  }
  m.name = g.get_str_opt("general.name").value_or(arch);
  auto key = [&](const char* k) { return arch + "." + k; };
  hp.n_embd = static_cast<int>(g.get_int(key("embedding_length")));
  hp.n_layer = static_cast<int>(g.get_int(key("block_count")));
  hp.n_head = static_cast<int>(g.get_int(key("attention.head_count")));
  hp.n_head_kv = static_cast<int>(g.get_int_opt(key("attention.head_count_kv")).value_or(hp.n_head));
  hp.n_ff = static_cast<int>(g.get_int(key("feed_forward_length")));
  hp.n_ctx_train = static_cast<int>(g.get_int_opt(key("context_length")).value_or(2048));
  if (hp.n_head <= 0) fail("{}: {} must be positive", path, key("attention.head_count"));
  hp.head_dim = static_cast<int>(g.get_int_opt(key("attention.key_length")).value_or(hp.n_embd / hp.n_head));
  if (auto vl = g.get_int_opt(key("attention.value_length")); vl && *vl != hp.head_dim)
    fail("{}: {} = {} differs from the key length {} (not supported)", path, key("attention.value_length"), *vl,
         hp.head_dim);
  hp.rope_dim = static_cast<int>(g.get_int_opt(key("rope.dimension_count")).value_or(hp.head_dim));
  hp.rms_eps = static_cast<float>(g.get_float_opt(key("attention.layer_norm_rms_epsilon")).value_or(1e-5));
  hp.rope_theta = static_cast<float>(g.get_float_opt(key("rope.freq_base")).value_or(10000.0));
  if (auto st = g.get_str_opt(key("rope.scaling.type")); st && *st != "none") {
    if (*st != "linear") fail("{}: rope scaling type '{}' is not supported (supported: none, linear)", path, *st);
    hp.rope_scaling.type = "linear";
    hp.rope_scaling.factor = static_cast<float>(g.get_float(key("rope.scaling.factor")));
  }

  if (hp.arch == Arch::Phi3) {
    // llama.cpp (llama-model.cpp, LLM_ARCH_PHI3) sets the sliding window from the shape, as the GGUF
    // carries none: Phi-3-mini/medium-4k 2,047; mini-128k 262,144; medium-128k 131,072.
    if ((hp.n_layer == 32 || hp.n_layer == 40) && hp.n_ctx_train == 4096)
      hp.n_swa = 2047;
    else if (hp.n_layer == 32 && hp.n_head_kv == 32 && hp.n_ctx_train == 131072)
      hp.n_swa = 262144;
    else if (hp.n_layer == 40 && hp.n_ctx_train == 131072)
      hp.n_swa = 131072;
    // ... unless the file says (phi3.attention.sliding_window, as llama.cpp reads it; 0 for Phi-4).
    if (auto sw = g.get_int_opt(key("attention.sliding_window"))) {
      if (*sw < 0 || *sw > (1 << 24)) fail("{}: {} = {} out of range", path, key("attention.sliding_window"), *sw);
      hp.n_swa = static_cast<int>(*sw);
    } else if (hp.n_swa == 0) {
      fail("{}: {} is missing and the shape is none of the Phi-3 models llama.cpp knows a window for", path,
           key("attention.sliding_window"));
    }
    // llama.cpp's phi3 graph: without a fused attn_qkv, separate Q/K/V with biases (bq, bk, bv).
    if (!g.tensor("blk.0.attn_qkv.weight") && g.tensor("blk.0.attn_q.bias")) hp.qkv_bias = true;
    if (g.tensor("rope_factors_long.weight") || g.tensor("blk.0.rope_factors_long.weight"))
      fail("{}: this Phi-3 file uses LongRoPE (rope_factors_long/short, the 128k models), which is not supported", path);
  }

  if (hp.gemma_block) {
    // llama.cpp's gemma2 defaults the window to 4,096 and the soft-caps to 50 (attention) and 30
    // (final) where the file is silent; its gemma3 requires the window and reads no soft-capping
    // (0 here unless the file carries the keys: kvshrink writes them for a config that sets them).
    const bool g2 = hp.arch == Arch::Gemma2;
    auto num = [&](const char* k, double def, double lo, double hi) {
      const double v = g.get_float_opt(key(k)).value_or(def);
      if (!(v >= lo && v <= hi)) fail("{}: {} = {} out of range ({}..{})", path, key(k), v, lo, hi);
      return v;
    };
    hp.n_swa = static_cast<int>(g2 ? g.get_int_opt(key("attention.sliding_window")).value_or(4096)
                                   : g.get_int(key("attention.sliding_window")));
    if (hp.n_swa <= 0 || hp.n_swa > (1 << 24))
      fail("{}: {} = {} out of range", path, key("attention.sliding_window"), hp.n_swa);
    hp.attn_softcap = static_cast<float>(num("attn_logit_softcapping", g2 ? 50.0 : 0.0, 0.0, 1e6));
    hp.final_softcap = static_cast<float>(num("final_logit_softcapping", g2 ? 30.0 : 0.0, 0.0, 1e6));
    // The GGUF carries no query_pre_attn_scalar: llama.cpp scales queries by 1/sqrt(head_dim), and
    // by 1/sqrt(n_embd / n_head) for the 27B models (Gemma 2: 46 layers, query_pre_attn_scalar 144 =
    // 4,608 / 32; Gemma 3: 62 layers, 168 = 5,376 / 32), as Google's gemma_pytorch does.
    const int qpas = hp.n_layer == (g2 ? 46 : 62) ? hp.n_embd / hp.n_head : hp.head_dim;
    hp.query_scale = 1.0f / std::sqrt(static_cast<float>(qpas));
  }

  if (hp.arch == Arch::Gemma3) {
    // The local layers' RoPE base is 10,000 unless the file carries gemma3.rope.freq_base_swa
    // (later llama.cpp converters write it); the global layers' base and linear scaling are the
    // rope.freq_base / rope.scaling keys read above.
    if (auto pat = g.get_int_opt(key("attention.sliding_window_pattern"))) {
      if (*pat < 1 || *pat > 1024) fail("{}: {} = {} out of range", path, key("attention.sliding_window_pattern"), *pat);
      hp.swa_period = static_cast<int>(*pat);
    }
    const double base_swa = g.get_float_opt(key("rope.freq_base_swa")).value_or(10000.0);
    if (!(base_swa > 0 && base_swa < 1e12)) fail("{}: {} = {} out of range", path, key("rope.freq_base_swa"), base_swa);
    hp.rope_theta_swa = static_cast<float>(base_swa);
  }

  m.tok_embd = find_tensor(g, "token_embd.weight", true);
  hp.n_vocab = static_cast<int>(m.tok_embd.rows());
  if (auto nv = g.get_int_opt(key("vocab_size")); nv && *nv != hp.n_vocab)
    fail("{}: {} = {} but token_embd.weight has {} rows", path, key("vocab_size"), *nv, hp.n_vocab);
  m.output_norm = find_tensor(g, "output_norm.weight", true);
  m.output = find_tensor(g, "output.weight", false);
  hp.tied_embeddings = !m.output.valid();

  for (int i = 0; i < hp.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerWeights l;
    l.attn_norm = find_tensor(g, p + "attn_norm.weight", true);
    if (hp.arch == Arch::Phi3 && g.tensor(p + "attn_qkv.weight")) {
      l.wqkv = find_tensor(g, p + "attn_qkv.weight", true);  // split into row views by finish_model
    } else {
      l.wq = find_tensor(g, p + "attn_q.weight", true);
      l.wk = find_tensor(g, p + "attn_k.weight", true);
      l.wv = find_tensor(g, p + "attn_v.weight", true);
    }
    l.wo = find_tensor(g, p + "attn_output.weight", true);
    l.bq = find_tensor(g, p + "attn_q.bias", hp.qkv_bias);
    l.bk = find_tensor(g, p + "attn_k.bias", hp.qkv_bias);
    l.bv = find_tensor(g, p + "attn_v.bias", hp.qkv_bias);
    if (hp.qk_norm) {
      l.q_norm = find_tensor(g, p + "attn_q_norm.weight", true);
      l.k_norm = find_tensor(g, p + "attn_k_norm.weight", true);
    }
    l.ffn_norm = find_tensor(g, p + "ffn_norm.weight", true);
    if (hp.gemma_block) {
      l.post_attn_norm = find_tensor(g, p + "post_attention_norm.weight", true);
      l.post_ffn_norm = find_tensor(g, p + "post_ffw_norm.weight", true);
    }
    if (hp.arch == Arch::Phi3) {
      l.ffn_gate_up = find_tensor(g, p + "ffn_up.weight", true);  // [2 n_ff] rows: gate, then up
    } else {
      l.ffn_gate = find_tensor(g, p + "ffn_gate.weight", true);
      l.ffn_up = find_tensor(g, p + "ffn_up.weight", true);
    }
    l.ffn_down = find_tensor(g, p + "ffn_down.weight", true);
    m.layers.push_back(std::move(l));
  }

  // Llama 3.1+ GGUFs carry the llama3 rope scaling as per-frequency divisors.
  if (const TensorView* rf = g.tensor("rope_freqs.weight")) {
    const int half = hp.rope_dim / 2;
    if (rf->type != DType::F32 || rf->n_elements() != half)
      fail("{}: tensor 'rope_freqs.weight' has type {} shape {}, expected f32 [{}]", path, dtype_name(rf->type),
           shape_str(*rf), half);
    for (int i = 0; i < half; ++i)
      if (!(std::isfinite(rf->f32()[i]) && rf->f32()[i] > 0))
        fail("{}: tensor 'rope_freqs.weight' element {} is {}, expected a finite divisor > 0", path, i, rf->f32()[i]);
    hp.rope_scaling.type = "llama3";
    m.rope_freqs.assign(rf->f32(), rf->f32() + half);
    m.rope_inv_freq.resize(static_cast<size_t>(half));
    for (int i = 0; i < half; ++i)
      m.rope_inv_freq[i] = static_cast<float>(1.0 / std::pow(static_cast<double>(hp.rope_theta), 2.0 * i / hp.rope_dim) /
                                              rf->f32()[i]);
    // Recover the llama3 parameters (for export to a HF config); the table above stays the truth.
    if (!fit_llama3_scaling(hp, rf->f32(), half)) hp.rope_scaling.type = "table";
  }

  m.tokenizer = Tokenizer::create(vocab_from_gguf(g));
  if (m.tokenizer->n_vocab() > hp.n_vocab)
    fail("{}: tokenizer has {} tokens but the embedding has only {} rows", path, m.tokenizer->n_vocab(), hp.n_vocab);
  finish_model(m, path);
}

}  // namespace kvs::detail
