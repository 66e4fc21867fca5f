#include "model/hparams.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace kvs {

const char* gguf_arch_name(Arch a) {
  switch (a) {
    case Arch::Qwen2: return "qwen2";
    case Arch::Qwen3: return "qwen3";
    case Arch::Phi3: return "phi3";
    case Arch::Gemma2: return "gemma2";
    case Arch::Gemma3: return "gemma3";
    default: return "llama";
  }
}

// transformers registers the text-only Gemma 3 as "gemma3_text" ("gemma3" is the multimodal model).
const char* hf_model_type(Arch a) { return a == Arch::Gemma3 ? "gemma3_text" : gguf_arch_name(a); }

const char* hf_architecture(Arch a) {
  switch (a) {
    case Arch::Qwen2: return "Qwen2ForCausalLM";
    case Arch::Qwen3: return "Qwen3ForCausalLM";
    case Arch::Phi3: return "Phi3ForCausalLM";
    case Arch::Gemma2: return "Gemma2ForCausalLM";
    case Arch::Gemma3: return "Gemma3ForCausalLM";
    default: return "LlamaForCausalLM";
  }
}

void HParams::validate(const std::string& src) const {
  auto pos = [&](int v, const char* what) {
    if (v <= 0) fail("{}: {} must be positive, got {}", src, what, v);
  };
  pos(n_vocab, "vocabulary size");
  pos(n_embd, "embedding length");
  pos(n_layer, "block count");
  pos(n_head, "attention head count");
  pos(n_head_kv, "attention KV head count");
  pos(head_dim, "head dimension");
  pos(n_ff, "feed-forward length");
  if (n_head % n_head_kv != 0)
    fail("{}: head count {} is not a multiple of the KV head count {}", src, n_head, n_head_kv);
  if (rope_dim <= 0 || rope_dim > head_dim || rope_dim % 2 != 0)
    fail("{}: rope dimension {} must be even and in 1..head_dim ({})", src, rope_dim, head_dim);
  if (!(rms_eps > 0.0f) || rms_eps > 1.0f) fail("{}: RMS norm epsilon {} out of range", src, rms_eps);
  if (!(rope_theta > 0.0f)) fail("{}: rope theta {} must be positive", src, rope_theta);
  pos(n_ctx_train, "training context length");
  if (n_swa < 0) fail("{}: sliding window {} must be >= 0", src, n_swa);
  if (swa_period < 0) fail("{}: sliding-window layer period {} must be >= 0", src, swa_period);
  if (!(std::isfinite(attn_softcap) && attn_softcap >= 0) || !(std::isfinite(final_softcap) && final_softcap >= 0))
    fail("{}: soft-capping values ({} attention, {} final) must be finite and >= 0", src, attn_softcap, final_softcap);
  if (!(std::isfinite(rope_theta_swa) && rope_theta_swa >= 0))
    fail("{}: local-layer rope theta {} must be finite and >= 0", src, rope_theta_swa);
  if (!(std::isfinite(query_scale) && query_scale >= 0)) fail("{}: query scale {} must be finite and >= 0", src, query_scale);
  if (n_layer > 1024 || n_head > 1024 || head_dim > 1024 || n_embd > 65536 || n_ff > (1 << 20) || n_vocab > (1 << 24) ||
      n_ctx_train > (1 << 24))
    fail("{}: implausible model shape ({})", src, summary());
  if (!std::isfinite(rope_theta) || !std::isfinite(rms_eps))
    fail("{}: rope theta {} and RMS norm epsilon {} must be finite", src, rope_theta, rms_eps);
  if (rope_scaling.type != "none") {
    const RopeScaling& r = rope_scaling;
    if (!(std::isfinite(r.factor) && r.factor > 0) || !(std::isfinite(r.low_freq_factor) && r.low_freq_factor > 0) ||
        !(std::isfinite(r.high_freq_factor) && r.high_freq_factor > 0) || r.original_max_pos <= 0)
      fail("{}: rope scaling ({}) needs finite positive factors and a positive original context, got factor {}, "
           "low {}, high {}, original {}",
           src, r.type, r.factor, r.low_freq_factor, r.high_freq_factor, r.original_max_pos);
  }
}

std::string HParams::summary() const {
  return fmt::format(
      "{}: vocab {}, dim {}, layers {}, heads {}/{} kv, head dim {}, ffn {}, ctx {}, rope theta {}{}{}{}{}{}",
      arch_name, n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx_train, rope_theta,
      rope_scaling.type != "none" ? ", rope scaling " + rope_scaling.type : "",
      tied_embeddings ? ", tied embeddings" : "", qkv_bias ? ", qkv bias" : "", qk_norm ? ", q/k norm" : "",
      n_swa > 0 ? fmt::format(", sliding window {}", n_swa) : "") +
         // Gemma's fields only where set: the summary enters the fingerprint of every other model.
         (swa_period > 0 ? fmt::format(", every {}-th layer global", swa_period) : "") +
         (rope_theta_swa > 0 ? fmt::format(", local rope theta {}", rope_theta_swa) : "") +
         (attn_softcap > 0 ? fmt::format(", attention soft-cap {}", attn_softcap) : "") +
         (final_softcap > 0 ? fmt::format(", final soft-cap {}", final_softcap) : "") +
         (query_scale > 0 ? fmt::format(", query scale {}", query_scale) : "") + (gemma_block ? ", gemma block" : "");
}

}  // namespace kvs
