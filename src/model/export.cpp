#include "model/export.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>

#include "core/atomic_output.h"
#include "core/error.h"
#include "kernels/ops.h"
#include "model/gguf/gguf_writer.h"
#include "model/hf/safetensors_writer.h"
#include "model/model.h"
#include "model/tokenizer/hf_export.h"

namespace kvs {

std::vector<uint8_t> permute_qk_rows(const TensorView& t, int n_heads, bool to_interleaved) {
  const int64_t rows = t.rows();
  KVS_ASSERT(rows % n_heads == 0);
  const int64_t D = rows / n_heads, half = D / 2;
  KVS_ASSERT(D % 2 == 0);
  const size_t rb = t.row_bytes();
  std::vector<uint8_t> out(static_cast<size_t>(rows) * rb);
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t i = 0; i < half; ++i) {
      for (int64_t p = 0; p < 2; ++p) {
        const int64_t hf_row = h * D + p * half + i;    // rotate-half layout
        const int64_t gg_row = h * D + 2 * i + p;       // interleaved layout
        const int64_t src = to_interleaved ? hf_row : gg_row;
        const int64_t dst = to_interleaved ? gg_row : hf_row;
        std::memcpy(out.data() + static_cast<size_t>(dst) * rb, t.row(src), rb);
      }
    }
  }
  return out;
}

DType storage_type_for(DType want, int64_t cols) {
  if (cols % dtype_info(want).block_size == 0) return want;
  if (cols % 32 == 0) return DType::Q8_0;
  return DType::F16;
}

void write_hparams_gguf(GgufWriter& w, const HParams& hp, const std::string& name) {
  const std::string a = gguf_arch_name(hp.arch);
  w.set_str("general.architecture", a);
  w.set_str("general.name", name);
  w.set_u32(a + ".context_length", static_cast<uint32_t>(hp.n_ctx_train));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(hp.n_embd));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(hp.n_layer));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(hp.n_ff));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(hp.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(hp.n_head_kv));
  if (hp.head_dim != hp.n_embd / hp.n_head) {
    w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(hp.head_dim));
    w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(hp.head_dim));
  }
  w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(hp.rope_dim));
  w.set_f32(a + ".rope.freq_base", hp.rope_theta);
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", hp.rms_eps);
  w.set_u32(a + ".vocab_size", static_cast<uint32_t>(hp.n_vocab));
  if (hp.arch == Arch::Phi3 || hp.gemma_block)
    w.set_u32(a + ".attention.sliding_window", static_cast<uint32_t>(hp.n_swa));
  if (hp.arch == Arch::Gemma2) {
    w.set_f32(a + ".attn_logit_softcapping", hp.attn_softcap);
    w.set_f32(a + ".final_logit_softcapping", hp.final_softcap);
  }
  if (hp.arch == Arch::Gemma3) {
    // llama.cpp's gemma3 loader hardcodes the 5:1 pattern and the local base 10,000 and reads no
    // soft-capping; these keys (read back by load_gguf.cpp, ignored by llama.cpp) carry a model
    // that departs from those values, and are omitted where it does not.
    if (hp.rope_theta_swa != 10000.0f) w.set_f32(a + ".rope.freq_base_swa", hp.rope_theta_swa);
    if (hp.swa_period != 6) w.set_u32(a + ".attention.sliding_window_pattern", static_cast<uint32_t>(hp.swa_period));
    if (hp.attn_softcap > 0) w.set_f32(a + ".attn_logit_softcapping", hp.attn_softcap);
    if (hp.final_softcap > 0) w.set_f32(a + ".final_logit_softcapping", hp.final_softcap);
  }
  if (hp.rope_scaling.type == "linear") {
    w.set_str(a + ".rope.scaling.type", "linear");
    w.set_f32(a + ".rope.scaling.factor", hp.rope_scaling.factor);
  }
}

void add_rope_freqs_gguf(GgufWriter& w, const HParams& hp, const std::vector<float>& scaled,
                         const std::vector<float>& divisors) {
  if (hp.rope_scaling.type != "llama3" && hp.rope_scaling.type != "table") return;
  if (!divisors.empty()) {
    KVS_ASSERT(divisors.size() == scaled.size());
    w.add_tensor("rope_freqs.weight", DType::F32, {static_cast<int64_t>(divisors.size())}, divisors.data(),
                 divisors.size() * sizeof(float));
    return;
  }
  HParams plain = hp;
  plain.rope_scaling = RopeScaling{};
  const std::vector<float> base = detail::rope_inv_freq(plain);
  KVS_ASSERT(base.size() == scaled.size());
  std::vector<float> f(base.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = base[i] / scaled[i];
  w.add_tensor("rope_freqs.weight", DType::F32, {static_cast<int64_t>(f.size())}, f.data(), f.size() * sizeof(float));
}

namespace {

// Converts a weight to `type` (dequantise + quantise) unless it already is that type.
std::vector<uint8_t> convert_rows(const TensorView& t, DType type) {
  const int64_t rows = t.rows(), cols = t.cols();
  const size_t rb = dtype_row_bytes(type, cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows) * rb);
  if (type == t.type) {
    std::memcpy(out.data(), t.data, out.size());
    return out;
  }
  std::vector<float> tmp(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    kernels::dequantize_row(t.type, t.row(r), tmp.data(), cols);
    kernels::quantize_row(type, tmp.data(), out.data() + static_cast<size_t>(r) * rb, cols);
  }
  return out;
}

// A view over `bytes` with t's shape and the given type.
TensorView view_of(const TensorView& t, DType type, const std::vector<uint8_t>& bytes) {
  TensorView v = t;
  v.type = type;
  v.data = bytes.data();
  v.nbytes = bytes.size();
  return v;
}

struct NamedWeight {
  std::string gguf, hf;
  const TensorView* t;
  bool matrix;  // quantisable 2-D weight (else a vector kept f32)
  int qk_heads; // > 0: Q/K projection with that many heads (RoPE layout permutation)
  float hf_add = 0;  // added to every value written to a HF checkpoint (Gemma's norms: stored as w, used as 1 + w)
};

std::vector<NamedWeight> weight_list(const Model& m) {
  std::vector<NamedWeight> w;
  const float na = m.hp.gemma_block ? -1.0f : 0.0f;  // norms: GGUF / in memory 1 + w, HF w (model.cpp norm_f32)
  w.push_back({"token_embd.weight", "model.embed_tokens.weight", &m.tok_embd, true, 0});
  for (int i = 0; i < m.hp.n_layer; ++i) {
    const auto& l = m.layers[static_cast<size_t>(i)];
    const std::string g = "blk." + std::to_string(i) + ".", h = "model.layers." + std::to_string(i) + ".";
    w.push_back({g + "attn_norm.weight", h + "input_layernorm.weight", &l.attn_norm, false, 0, na});
    if (l.wqkv.valid()) {  // Phi-3: written fused as read (rotate-half: no Q/K row permutation)
      w.push_back({g + "attn_qkv.weight", h + "self_attn.qkv_proj.weight", &l.wqkv, true, 0});
    } else {
      w.push_back({g + "attn_q.weight", h + "self_attn.q_proj.weight", &l.wq, true, m.hp.n_head});
      w.push_back({g + "attn_k.weight", h + "self_attn.k_proj.weight", &l.wk, true, m.hp.n_head_kv});
      w.push_back({g + "attn_v.weight", h + "self_attn.v_proj.weight", &l.wv, true, 0});
    }
    if (l.bq.valid()) {
      w.push_back({g + "attn_q.bias", h + "self_attn.q_proj.bias", &l.bq, false, 0});
      w.push_back({g + "attn_k.bias", h + "self_attn.k_proj.bias", &l.bk, false, 0});
      w.push_back({g + "attn_v.bias", h + "self_attn.v_proj.bias", &l.bv, false, 0});
    }
    if (l.q_norm.valid()) {
      w.push_back({g + "attn_q_norm.weight", h + "self_attn.q_norm.weight", &l.q_norm, false, 0, na});
      w.push_back({g + "attn_k_norm.weight", h + "self_attn.k_norm.weight", &l.k_norm, false, 0, na});
    }
    w.push_back({g + "attn_output.weight", h + "self_attn.o_proj.weight", &l.wo, true, 0});
    if (m.hp.gemma_block) {
      w.push_back({g + "post_attention_norm.weight", h + "post_attention_layernorm.weight", &l.post_attn_norm, false, 0, na});
      w.push_back({g + "ffn_norm.weight", h + "pre_feedforward_layernorm.weight", &l.ffn_norm, false, 0, na});
    } else {
      w.push_back({g + "ffn_norm.weight", h + "post_attention_layernorm.weight", &l.ffn_norm, false, 0});
    }
    if (l.ffn_gate_up.valid()) {
      w.push_back({g + "ffn_up.weight", h + "mlp.gate_up_proj.weight", &l.ffn_gate_up, true, 0});
    } else {
      w.push_back({g + "ffn_gate.weight", h + "mlp.gate_proj.weight", &l.ffn_gate, true, 0});
      w.push_back({g + "ffn_up.weight", h + "mlp.up_proj.weight", &l.ffn_up, true, 0});
    }
    w.push_back({g + "ffn_down.weight", h + "mlp.down_proj.weight", &l.ffn_down, true, 0});
    if (m.hp.gemma_block)
      w.push_back({g + "post_ffw_norm.weight", h + "post_feedforward_layernorm.weight", &l.post_ffn_norm, false, 0, na});
  }
  w.push_back({"output_norm.weight", "model.norm.weight", &m.output_norm, false, 0, na});
  if (!m.hp.tied_embeddings) w.push_back({"output.weight", "lm_head.weight", &m.output, true, 0});
  return w;
}

std::vector<int64_t> ne_of(const TensorView& t) { return std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims); }

}  // namespace

namespace {

// Writes the GGUF with each 2-D weight in type_of(name, weight) (all chosen before any is converted).
template <typename TypeOf>
void write_gguf(const Model& m, const std::string& path, TypeOf type_of) {
  std::vector<DType> types;
  const std::vector<NamedWeight> ws = weight_list(m);
  for (const NamedWeight& nw : ws) types.push_back(nw.matrix ? type_of(nw.gguf, *nw.t) : DType::F32);
  for (DType t : types)
    if (!kernels::dtype_computable(t)) fail("cannot write weights as {}", dtype_name(t));
  check_output_file(path, "GGUF output");  // before the weights are converted
  GgufWriter w;
  write_hparams_gguf(w, m.hp, m.name);
  write_vocab_gguf(w, m.tokenizer->spec());
  // GGUF llama expects interleaved-pair Q/K rows.
  const bool permute = m.hp.arch == Arch::Llama && m.hp.rope_style == kernels::RopeStyle::RotateHalf;
  add_rope_freqs_gguf(w, m.hp, m.rope_inv_freq, m.rope_freqs);
  for (size_t i = 0; i < ws.size(); ++i) {
    const NamedWeight& nw = ws[i];
    const TensorView& t = *nw.t;
    if (!nw.matrix) {
      std::vector<uint8_t> b = convert_rows(t, DType::F32);
      w.add_tensor(nw.gguf, DType::F32, ne_of(t), std::move(b));
      continue;
    }
    const DType st = types[i];
    std::vector<uint8_t> b = convert_rows(t, st);
    if (permute && nw.qk_heads > 0) b = permute_qk_rows(view_of(t, st, b), nw.qk_heads, true);
    w.add_tensor(nw.gguf, st, ne_of(t), std::move(b));
  }
  w.write(path);
}

}  // namespace

void export_gguf(const Model& m, const std::string& path, DType type) {
  if (!kernels::dtype_computable(type)) fail("cannot write weights as {}", dtype_name(type));
  write_gguf(m, path, [&](const std::string&, const TensorView& t) { return storage_type_for(type, t.cols()); });
}

void export_gguf(const Model& m, const std::string& path, const QuantPreset& preset) {
  const QuantMixModel mm = quant_mix_model(m.hp);
  write_gguf(m, path, [&](const std::string& name, const TensorView& t) { return quant_mix_type(preset, mm, name, t.cols()); });
}

std::string sentencepiece_model_proto(const VocabSpec& v) {
  std::string out;
  auto varint = [](std::string& s, uint64_t x) {
    while (x >= 0x80) {
      s.push_back(static_cast<char>((x & 0x7f) | 0x80));
      x >>= 7;
    }
    s.push_back(static_cast<char>(x));
  };
  auto tag = [&](std::string& s, int field, int wire) { varint(s, static_cast<uint64_t>(field) << 3 | wire); };
  auto bytes_field = [&](std::string& s, int field, const std::string& b) {
    tag(s, field, 2);
    varint(s, b.size());
    s += b;
  };
  auto int_field = [&](std::string& s, int field, int64_t x) {
    tag(s, field, 0);
    varint(s, static_cast<uint64_t>(x));
  };
  bool byte_fallback = false;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    std::string p;
    bytes_field(p, 1, v.tokens[i]);
    tag(p, 2, 5);
    const float sc = i < v.scores.size() ? v.scores[i] : 0.0f;
    char fb[4];
    std::memcpy(fb, &sc, 4);
    p.append(fb, 4);
    const int32_t ty = i < v.types.size() ? v.types[i] : 1;
    if (ty == static_cast<int32_t>(TokenType::Byte)) byte_fallback = true;
    int_field(p, 3, ty);
    bytes_field(out, 1, p);
  }
  std::string trainer;
  int_field(trainer, 3, v.unigram ? 1 : 2);  // model_type = UNIGRAM or BPE
  int_field(trainer, 4, static_cast<int64_t>(v.tokens.size()));
  int_field(trainer, 35, byte_fallback ? 1 : 0);
  int_field(trainer, 40, v.unk);
  int_field(trainer, 41, v.bos);
  int_field(trainer, 42, v.eos);
  int_field(trainer, 43, v.pad);
  bytes_field(out, 2, trainer);
  std::string norm;
  bytes_field(norm, 1, "identity");
  int_field(norm, 3, spm_adds_space_prefix(v) ? 1 : 0);
  int_field(norm, 4, v.remove_extra_whitespaces ? 1 : 0);
  int_field(norm, 5, 1);  // escape_whitespaces
  bytes_field(out, 3, norm);
  return out;
}

void export_hf(const Model& m, const std::string& dir, DType type, const std::string& tokenizer_json_src) {
  using json = nlohmann::json;
  StDType st;
  if (type != DType::F32 && type != DType::F16 && type != DType::BF16)
    fail("HF export supports f32, f16 and bf16 weights, not {}", dtype_name(type));
  st_dtype_from_dtype(type, &st);
  const HParams& hp = m.hp;
  if (hp.rope_scaling.type == "table")
    fail("{}: this model's RoPE frequencies (rope_freqs.weight) are not llama3-shaped; config.json cannot express them",
         dir);
  // Everything goes to a staging folder beside `dir`, swapped in only when all files are written
  // and the tokenizer checked: a failure leaves the previous folder (or none) and no temporary.
  AtomicDir out(dir, "config.json");
  const bool unpermute = hp.arch == Arch::Llama && hp.rope_style == kernels::RopeStyle::Interleaved;

  std::vector<std::vector<uint8_t>> storage;
  storage.reserve(8 * static_cast<size_t>(hp.n_layer) + 8);
  std::vector<SafetensorsTensorIn> ts;
  for (const NamedWeight& nw : weight_list(m)) {
    const TensorView& t = *nw.t;
    const DType want = nw.matrix ? type : DType::F32;
    storage.push_back(convert_rows(t, want));
    if (nw.hf_add != 0.0f) {  // f32 vectors (norms)
      KVS_ASSERT(want == DType::F32);
      float* f = reinterpret_cast<float*>(storage.back().data());
      for (size_t i = 0; i < storage.back().size() / sizeof(float); ++i) f[i] += nw.hf_add;
    }
    if (unpermute && nw.qk_heads > 0) storage.back() = permute_qk_rows(view_of(t, want, storage.back()), nw.qk_heads, false);
    SafetensorsTensorIn in = safetensors_input(view_of(t, want, storage.back()));
    in.name = nw.hf;
    ts.push_back(std::move(in));
  }
  write_safetensors(out.path("model.safetensors"), ts, {{"format", "pt"}});
  storage.clear();

  const VocabSpec& v = m.tokenizer->spec();
  auto id_or_null = [](int32_t id) { return id >= 0 ? json(id) : json(nullptr); };
  json eos = id_or_null(v.eos);
  if (v.eos >= 0 && v.eot >= 0 && v.eot != v.eos) eos = json::array({v.eos, v.eot});  // both end generation
  json cfg = {
      {"architectures", {hf_architecture(hp.arch)}},
      {"model_type", hf_model_type(hp.arch)},
      {"hidden_size", hp.n_embd},
      {"intermediate_size", hp.n_ff},
      {"num_hidden_layers", hp.n_layer},
      {"num_attention_heads", hp.n_head},
      {"num_key_value_heads", hp.n_head_kv},
      {"head_dim", hp.head_dim},
      {"hidden_act", "silu"},
      {"max_position_embeddings", hp.n_ctx_train},
      {"rms_norm_eps", hp.rms_eps},
      {"rope_theta", hp.rope_theta},
      {"vocab_size", hp.n_vocab},
      {"tie_word_embeddings", hp.tied_embeddings},
      {"torch_dtype", type == DType::F32 ? "float32" : type == DType::F16 ? "float16" : "bfloat16"},
      {"bos_token_id", id_or_null(v.bos)},  // null when the model has none (HF's convention)
      {"eos_token_id", eos},
      {"pad_token_id", id_or_null(v.pad)},
  };
  if (hp.arch == Arch::Qwen3) cfg["attention_bias"] = false;
  if (hp.gemma_block) {
    cfg["hidden_activation"] = "gelu_pytorch_tanh";
    cfg["hidden_act"] = "gelu_pytorch_tanh";
    cfg["attention_bias"] = false;
    cfg["sliding_window"] = hp.n_swa;
    cfg["attn_logit_softcapping"] = hp.attn_softcap > 0 ? json(hp.attn_softcap) : json(nullptr);
    cfg["final_logit_softcapping"] = hp.final_softcap > 0 ? json(hp.final_softcap) : json(nullptr);
    // query_pre_attn_scalar = scale^-2, rounded back to the integer every Gemma 2 config holds.
    const double qpas = 1.0 / (static_cast<double>(hp.attn_scale()) * hp.attn_scale());
    cfg["query_pre_attn_scalar"] = std::abs(qpas - std::round(qpas)) < 1e-3 * qpas ? json(std::lround(qpas)) : json(qpas);
  }
  if (hp.arch == Arch::Gemma3) {  // Gemma3TextConfig's names
    cfg["sliding_window_pattern"] = hp.swa_period;
    cfg["rope_local_base_freq"] = hp.rope_theta_swa;
  }
  if (hp.gemma_block) {  // the pattern spelled out per layer, as newer transformers write it
    json types = json::array();
    for (int il = 0; il < hp.n_layer; ++il) types.push_back(hp.layer_slides(il) ? "sliding_attention" : "full_attention");
    cfg["layer_types"] = types;
  }
  if (hp.arch == Arch::Phi3) {
    cfg["sliding_window"] = hp.n_swa > 0 ? json(hp.n_swa) : json(nullptr);
    cfg["original_max_position_embeddings"] = hp.n_ctx_train;
  }
  if (hp.rope_scaling.type == "llama3")
    cfg["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", hp.rope_scaling.factor},
                           {"low_freq_factor", hp.rope_scaling.low_freq_factor},
                           {"high_freq_factor", hp.rope_scaling.high_freq_factor},
                           {"original_max_position_embeddings", hp.rope_scaling.original_max_pos}};
  else if (hp.rope_scaling.type == "linear")
    cfg["rope_scaling"] = {{"rope_type", "linear"}, {"factor", hp.rope_scaling.factor}};
  out.write_file("config.json", cfg.dump(2) + "\n");
  write_hf_tokenizer_files(out, v, tokenizer_json_src);
  out.commit();
}

}  // namespace kvs
