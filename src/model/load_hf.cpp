// Hugging Face directory -> Model: config.json for hyper-parameters, *.safetensors for weights
// (HF layout: rotate-half RoPE, so Q/K need no permutation), tokenizer.json / tokenizer.model.
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/mapped_file.h"
#include "core/paths.h"
#include "model/hf/safetensors_model.h"
#include "model/model.h"

namespace kvs::detail {

namespace {

using json = nlohmann::json;

// The plausibility limits HParams::validate applies (hparams.cpp), checked here first so the
// message names the config.json field.
constexpr int64_t kMaxEmbd = 65536, kMaxFf = 1 << 20, kMaxLayers = 1024, kMaxHeads = 1024, kMaxHeadDim = 1024,
                  kMaxVocab = 1 << 24, kMaxCtxTrain = 1 << 24;

struct Config {
  const json& j;
  const std::string& file;

  const json* get(const char* key) const {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
  }
  int64_t int_req(const char* key) const {
    const json* v = get(key);
    if (!v) fail("{}: missing '{}' (integer)", file, key);
    if (!v->is_number_integer()) fail("{}: '{}' must be an integer, got {}", file, key, v->dump());
    return v->get<int64_t>();
  }
  int64_t int_opt(const char* key, int64_t def) const { return get(key) ? int_req(key) : def; }
  // An integer that must lie in lo..hi (checked before narrowing to int: 2^32 + 1 must not
  // become 1).
  int int_in(const char* key, int64_t lo, int64_t hi) const { return in_range(key, int_req(key), lo, hi); }
  int int_opt_in(const char* key, int64_t def, int64_t lo, int64_t hi) const {
    return get(key) ? in_range(key, int_req(key), lo, hi) : static_cast<int>(def);
  }
  int in_range(const char* key, int64_t v, int64_t lo, int64_t hi) const {
    if (v < lo || v > hi) fail("{}: '{}' must be an integer in {}..{}, got {}", file, key, lo, hi, v);
    return static_cast<int>(v);
  }
  double num_opt(const char* key, double def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_number()) fail("{}: '{}' must be a number, got {}", file, key, v->dump());
    return v->get<double>();
  }
  // A finite number in (lo, hi] (lo excluded: every such field must be positive).
  double num_opt_in(const char* key, double def, double lo, double hi) const {
    const double x = num_opt(key, def);
    if (!std::isfinite(x) || !(x > lo) || !(x <= hi))
      fail("{}: '{}' must be a finite number in ({}, {}], got {}", file, key, lo, hi, x);
    return x;
  }
  bool bool_opt(const char* key, bool def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_boolean()) fail("{}: '{}' must be true or false, got {}", file, key, v->dump());
    return v->get<bool>();
  }
  std::string str_opt(const char* key, const std::string& def) const {
    const json* v = get(key);
    if (!v) return def;
    if (!v->is_string()) fail("{}: '{}' must be a string, got {}", file, key, v->dump());
    return v->get<std::string>();
  }
};

// True if config.json sets `key` to false explicitly.
bool j_has_false(const std::string& cfg_path, const char* key) {
  try {
    const json j = json::parse(read_file(cfg_path));
    return j.is_object() && j.contains(key) && j[key].is_boolean() && !j[key].get<bool>();
  } catch (const json::exception&) {
    return false;
  }
}

// Every file a HF directory load may read (config, tokenizer, weights, index) must be a regular
// file: a FIFO named tokenizer.json would otherwise block the load forever.
void check_hf_dir_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& p = it->path();
    const std::string ext = p.extension().string();
    if (ext == ".json" || ext == ".safetensors" || ext == ".model" || ext == ".txt")
      require_regular_if_present(p.string(), "a model file");
  }
  if (ec) fail("{}: cannot list the model directory: {}", dir, ec.message());
}

}  // namespace

HParams hparams_from_hf_config(const std::string& cfg_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(cfg_path, ec)) fail("{}: no such file", cfg_path);
  require_regular_file(cfg_path, "config.json");
  json j;
  try {
    j = json::parse(read_file(cfg_path));
  } catch (const json::exception& e) {  // parse_error, and out_of_range for numbers like 1e400
    fail("{}: invalid JSON: {}", cfg_path, e.what());
  }
  if (!j.is_object()) fail("{}: expected a JSON object", cfg_path);
  Config c{j, cfg_path};
  HParams hp;
  std::string arch = c.str_opt("model_type", "");
  if (const json* a = c.get("architectures"); a && a->is_array() && !a->empty() && (*a)[0].is_string()) {
    const std::string an = (*a)[0].get<std::string>();
    if (an == "LlamaForCausalLM" || an == "MistralForCausalLM") arch = arch.empty() ? "llama" : arch;
    if (an == "Qwen2ForCausalLM") arch = "qwen2";
    if (an == "Qwen3ForCausalLM") arch = "qwen3";
    if (an == "Phi3ForCausalLM") arch = "phi3";
    if (an == "Gemma2ForCausalLM") arch = "gemma2";
    if (an == "Gemma3ForCausalLM") arch = "gemma3_text";
    if (an == "Gemma3ForConditionalGeneration")
      fail("{}: Gemma3ForConditionalGeneration (the multimodal Gemma 3) is not supported; the text-only "
           "Gemma3ForCausalLM (model_type gemma3_text, e.g. gemma-3-1b-it) is",
           cfg_path);
  }
  if (arch == "llama" || arch == "mistral") {
    hp.arch = Arch::Llama;
    hp.arch_name = arch;
    if (c.bool_opt("attention_bias", false))
      fail("{}: attention_bias = true is not supported for {} models", cfg_path, arch);
  } else if (arch == "qwen2") {
    hp.arch = Arch::Qwen2;
    hp.arch_name = "qwen2";
    hp.qkv_bias = true;
  } else if (arch == "qwen3") {
    // transformers' Qwen3Attention: q_norm / k_norm (Qwen3RMSNorm over head_dim) on each head's
    // projection, before RoPE; attention_bias false in every released Qwen3.
    hp.arch = Arch::Qwen3;
    hp.arch_name = "qwen3";
    hp.qk_norm = true;
    if (c.bool_opt("attention_bias", false))
      fail("{}: attention_bias = true is not supported for qwen3 models", cfg_path);
    if (c.bool_opt("use_sliding_window", false))
      fail("{}: use_sliding_window = true is not supported for qwen3 models (Qwen3's sliding-window layers are not implemented)", cfg_path);
  } else if (arch == "phi3") {
    // transformers' Phi3: fused qkv_proj and gate_up_proj (gate first), rotate-half RoPE, a sliding
    // window (config.sliding_window; the mini-4k model's 2,047) on every layer.
    hp.arch = Arch::Phi3;
    hp.arch_name = "phi3";
    if (const json* sw = c.get("sliding_window")) {
      if (!sw->is_number_integer() || sw->get<int64_t>() < 0 || sw->get<int64_t>() > kMaxCtxTrain)
        fail("{}: 'sliding_window' must be null or an integer in 0..{}, got {}", cfg_path, kMaxCtxTrain, sw->dump());
      hp.n_swa = static_cast<int>(sw->get<int64_t>());
    }
  } else if (arch == "gemma2") {
    // transformers' Gemma2 (modeling_gemma2.py): embeddings times sqrt(hidden_size), RMSNorm as
    // x * (1 + w) (the +1 is added at load: model.cpp norm_f32), post-attention and post-FFN norms,
    // GeGLU with tanh GELU, attention scale query_pre_attn_scalar^-1/2, logit soft-capping, sliding
    // window on the even layers (Gemma2DecoderLayer.is_sliding = not layer_idx % 2).
    hp.arch = Arch::Gemma2;
    hp.arch_name = "gemma2";
    hp.gemma_block = true;
    hp.swa_period = 2;
    if (c.bool_opt("attention_bias", false)) fail("{}: attention_bias = true is not supported for gemma2 models", cfg_path);
    hp.n_swa = c.int_opt_in("sliding_window", 4096, 1, kMaxCtxTrain);
    auto cap = [&](const char* k, double def) {
      const json* v = c.get(k);
      if (v && v->is_null()) return 0.0f;  // null: no soft-capping
      return static_cast<float>(c.num_opt_in(k, def, 0.0, 1e6));
    };
    hp.attn_softcap = cap("attn_logit_softcapping", 50.0);
    hp.final_softcap = cap("final_logit_softcapping", 30.0);
  } else if (arch == "gemma3_text") {
    // transformers' Gemma3 text model (modeling_gemma3.py, Gemma3ForCausalLM): Gemma 2's block
    // (embedding scale, four norms, GeGLU) with q_norm / k_norm (Gemma3RMSNorm, 1 + w, over
    // head_dim) before RoPE, no soft-capping by default, a sliding window on all layers but each
    // sliding_window_pattern-th (is_sliding = (layer_idx + 1) % pattern != 0), and two rotary
    // tables: rotary_emb (rope_theta with rope_scaling) for the global layers, rotary_emb_local
    // (rope_local_base_freq, unscaled) for the local ones.
    hp.arch = Arch::Gemma3;
    hp.arch_name = "gemma3";
    hp.gemma_block = true;
    hp.qk_norm = true;
    if (c.bool_opt("attention_bias", false)) fail("{}: attention_bias = true is not supported for gemma3 models", cfg_path);
    hp.n_swa = c.int_opt_in("sliding_window", 4096, 1, kMaxCtxTrain);
    hp.swa_period = c.int_opt_in("sliding_window_pattern", 6, 1, 1024);
    hp.rope_theta_swa = static_cast<float>(c.num_opt_in("rope_local_base_freq", 10000.0, 1e-6, 1e12));
    auto cap = [&](const char* k) {
      const json* v = c.get(k);
      if (!v || v->is_null()) return 0.0f;  // Gemma3TextConfig's defaults: None
      return static_cast<float>(c.num_opt_in(k, 0.0, 0.0, 1e6));
    };
    hp.attn_softcap = cap("attn_logit_softcapping");
    hp.final_softcap = cap("final_logit_softcapping");
  } else if (arch == "gemma3") {
    fail("{}: model_type 'gemma3' is the multimodal Gemma 3, which is not supported; the text-only "
         "Gemma3ForCausalLM (model_type gemma3_text) is",
         cfg_path);
  } else {
    fail("{}: unsupported model_type '{}' (supported: llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text)", cfg_path,
         arch);
  }
  // Newer transformers spell the local/global pattern out per layer (Gemma 2 and 3): it must be
  // the periodic one the model type implies.
  if (const json* lt = c.get("layer_types"); hp.gemma_block && lt && !lt->is_null()) {
    if (!lt->is_array()) fail("{}: 'layer_types' must be a list", cfg_path);
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& t = (*lt)[i];
      const bool local = t.is_string() && t.get<std::string>() == "sliding_attention";
      const bool global = t.is_string() && t.get<std::string>() == "full_attention";
      const bool want_local = (i + 1) % static_cast<size_t>(hp.swa_period) != 0;
      if ((!local && !global) || local != want_local)
        fail("{}: layer_types[{}] = {}: only the {} pattern (full_attention on every {}-th layer, "
             "sliding_attention elsewhere) is supported",
             cfg_path, i, t.dump(), hp.arch_name, hp.swa_period);
    }
  }
  if (c.bool_opt("mlp_bias", false)) fail("{}: mlp_bias = true is not supported", cfg_path);
  if (hp.gemma_block) {
    // Gemma 2 configs name it hidden_activation (hidden_act in older ones); both mean the GeGLU gate.
    const std::string act = c.str_opt("hidden_activation", c.str_opt("hidden_act", "gelu_pytorch_tanh"));
    if (act != "gelu_pytorch_tanh" && act != "gelu")
      fail("{}: hidden_activation '{}' is not supported for {} (expected gelu_pytorch_tanh)", cfg_path, act, hp.arch_name);
  } else {
    const std::string act = c.str_opt("hidden_act", "silu");
    if (act != "silu") fail("{}: hidden_act '{}' is not supported (expected silu)", cfg_path, act);
  }
  hp.rope_style = kernels::RopeStyle::RotateHalf;
  // Shape fields: positive and within HParams::validate's plausibility limits, each refused here
  // with its config.json name (a negative or wrapped value never reaches the model).
  hp.n_embd = c.int_in("hidden_size", 1, kMaxEmbd);
  hp.n_ff = c.int_in("intermediate_size", 1, kMaxFf);
  hp.n_layer = c.int_in("num_hidden_layers", 1, kMaxLayers);
  hp.n_head = c.int_in("num_attention_heads", 1, kMaxHeads);
  hp.n_head_kv = c.int_opt_in("num_key_value_heads", hp.n_head, 1, kMaxHeads);
  hp.head_dim = c.int_opt_in("head_dim", hp.n_embd / hp.n_head, 1, kMaxHeadDim);
  hp.rope_dim = static_cast<int>(hp.head_dim * c.num_opt_in("partial_rotary_factor", 1.0, 0.0, 1.0));
  hp.n_vocab = c.int_in("vocab_size", 1, kMaxVocab);
  hp.n_ctx_train = c.int_opt_in("max_position_embeddings", 2048, 1, kMaxCtxTrain);
  hp.rms_eps = static_cast<float>(c.num_opt_in("rms_norm_eps", 1e-6, 0.0, 1.0));
  hp.rope_theta = static_cast<float>(c.num_opt_in("rope_theta", 10000.0, 0.0, 1e12));
  hp.tied_embeddings = c.bool_opt("tie_word_embeddings", hp.gemma_block);  // Gemma 2/3 configs' default: tied
  if (hp.gemma_block) {
    const double qpas = c.num_opt_in("query_pre_attn_scalar", hp.head_dim, 1e-6, 1e9);
    hp.query_scale = static_cast<float>(1.0 / std::sqrt(qpas));
  }
  // RoPE scaling: rope_scaling (transformers 4.x), or rope_parameters (transformers 5: the same
  // fields plus rope_theta, per layer type for Gemma 3 — "full_attention" / "sliding_attention").
  auto read_scaling = [&](const json& rs, const char* where) {
    if (!rs.is_object()) fail("{}: '{}' must be an object or null", cfg_path, where);
    Config r{rs, cfg_path};
    std::string type = r.str_opt("rope_type", r.str_opt("type", "default"));
    if (type == "llama3") {
      hp.rope_scaling.type = "llama3";
      hp.rope_scaling.factor = static_cast<float>(r.num_opt_in("factor", 8.0, 0.0, 1e6));
      hp.rope_scaling.low_freq_factor = static_cast<float>(r.num_opt_in("low_freq_factor", 1.0, 0.0, 1e6));
      hp.rope_scaling.high_freq_factor = static_cast<float>(r.num_opt_in("high_freq_factor", 4.0, 0.0, 1e6));
      hp.rope_scaling.original_max_pos =
          r.int_opt_in("original_max_position_embeddings", 8192, 1, kMaxCtxTrain);
      if (!(hp.rope_scaling.high_freq_factor > hp.rope_scaling.low_freq_factor))
        fail("{}: {} high_freq_factor must exceed low_freq_factor", cfg_path, where);
    } else if (type == "linear") {
      hp.rope_scaling.type = "linear";
      hp.rope_scaling.factor = static_cast<float>(r.num_opt_in("factor", 1.0, 0.0, 1e6));
    } else if (type == "longrope" || type == "su") {
      fail("{}: {} type '{}' (LongRoPE, the 128k Phi-3 models) is not supported", cfg_path, where, type);
    } else if (type != "default") {
      fail("{}: {} type '{}' is not supported (supported: llama3, linear)", cfg_path, where, type);
    }
    if (r.get("rope_theta")) hp.rope_theta = static_cast<float>(r.num_opt_in("rope_theta", 10000.0, 1e-6, 1e12));
  };
  if (const json* rp = c.get("rope_parameters")) {
    if (!rp->is_object()) fail("{}: 'rope_parameters' must be an object or null", cfg_path);
    const json* full = rp->contains("full_attention") ? &(*rp)["full_attention"] : nullptr;
    read_scaling(full ? *full : *rp, full ? "rope_parameters.full_attention" : "rope_parameters");
    if (const json* sl = rp->contains("sliding_attention") ? &(*rp)["sliding_attention"] : nullptr) {
      if (hp.rope_theta_swa <= 0)
        fail("{}: rope_parameters.sliding_attention is given but this {} model has one RoPE table", cfg_path,
             hp.arch_name);
      Config r{*sl, cfg_path};
      if (r.str_opt("rope_type", "default") != "default")
        fail("{}: rope_parameters.sliding_attention.rope_type must be \"default\" (the local layers are unscaled)",
             cfg_path);
      hp.rope_theta_swa = static_cast<float>(r.num_opt_in("rope_theta", hp.rope_theta_swa, 1e-6, 1e12));
    }
  } else if (const json* rs = c.get("rope_scaling")) {
    read_scaling(*rs, "rope_scaling");
  }

  hp.validate(cfg_path);
  return hp;
}

void load_hf(Model& m, const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  std::error_code ec;
  if (!fs::exists(cfg_path, ec)) fail("{}: not a model: no config.json in this directory (and not a GGUF file)", dir);
  check_hf_dir_files(dir);
  m.format = "hf";
  m.name = fs::path(dir).filename().string();
  if (m.name.empty()) m.name = fs::path(dir).parent_path().filename().string();
  m.hp = hparams_from_hf_config(cfg_path);
  HParams& hp = m.hp;

  auto st = SafetensorsModel::open(dir);
  auto get = [&](const std::string& name, bool required) {
    if (st->has(name)) return st->tensor(name);
    if (required) fail("{}: missing tensor '{}'", st->source(), name);
    TensorView t;
    t.name = name;
    return t;
  };
  m.tok_embd = get("model.embed_tokens.weight", true);
  m.output_norm = get("model.norm.weight", true);
  // An explicit tie_word_embeddings = false needs lm_head.weight; without the key, a missing
  // lm_head means the embeddings are tied (as in many exported small models).
  const bool explicit_untied = j_has_false(cfg_path, "tie_word_embeddings");
  m.output = hp.tied_embeddings ? TensorView{} : get("lm_head.weight", explicit_untied);
  for (int i = 0; i < hp.n_layer; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerWeights l;
    l.attn_norm = get(p + "input_layernorm.weight", true);
    if (hp.arch == Arch::Phi3) {
      l.wqkv = get(p + "self_attn.qkv_proj.weight", true);
    } else {
      l.wq = get(p + "self_attn.q_proj.weight", true);
      l.wk = get(p + "self_attn.k_proj.weight", true);
      l.wv = get(p + "self_attn.v_proj.weight", true);
    }
    l.wo = get(p + "self_attn.o_proj.weight", true);
    l.bq = get(p + "self_attn.q_proj.bias", hp.qkv_bias);
    l.bk = get(p + "self_attn.k_proj.bias", hp.qkv_bias);
    l.bv = get(p + "self_attn.v_proj.bias", hp.qkv_bias);
    if (hp.qk_norm) {
      l.q_norm = get(p + "self_attn.q_norm.weight", true);
      l.k_norm = get(p + "self_attn.k_norm.weight", true);
    }
    if (hp.gemma_block) {  // Gemma 2 names: post_attention_layernorm is the attention output's norm
      l.post_attn_norm = get(p + "post_attention_layernorm.weight", true);
      l.ffn_norm = get(p + "pre_feedforward_layernorm.weight", true);
      l.post_ffn_norm = get(p + "post_feedforward_layernorm.weight", true);
    } else {
      l.ffn_norm = get(p + "post_attention_layernorm.weight", true);
    }
    if (hp.arch == Arch::Phi3) {
      l.ffn_gate_up = get(p + "mlp.gate_up_proj.weight", true);
    } else {
      l.ffn_gate = get(p + "mlp.gate_proj.weight", true);
      l.ffn_up = get(p + "mlp.up_proj.weight", true);
    }
    l.ffn_down = get(p + "mlp.down_proj.weight", true);
    m.layers.push_back(std::move(l));
  }
  m.keep_alive.push_back(std::shared_ptr<const void>(st.release(), [](const void* p) {
    delete static_cast<const SafetensorsModel*>(p);
  }));

  m.tokenizer = Tokenizer::create(vocab_from_hf_dir(dir));
  if (m.tokenizer->n_vocab() > hp.n_vocab)
    fail("{}: tokenizer has {} tokens but vocab_size is {}", dir, m.tokenizer->n_vocab(), hp.n_vocab);
  finish_model(m, cfg_path);
}

}  // namespace kvs::detail
