#include "model/presets.h"

#include <cmath>

#include "core/error.h"

namespace kvs {
namespace {

HParams make(Arch arch, int vocab, int embd, int layers, int heads, int kv, int ff, int ctx, float theta, float eps,
             bool tied) {
  HParams hp;
  hp.arch = arch;
  hp.arch_name = gguf_arch_name(arch);
  hp.n_vocab = vocab;
  hp.n_embd = embd;
  hp.n_layer = layers;
  hp.n_head = heads;
  hp.n_head_kv = kv;
  hp.head_dim = embd / heads;
  hp.rope_dim = hp.head_dim;
  hp.n_ff = ff;
  hp.n_ctx_train = ctx;
  hp.rope_theta = theta;
  hp.rms_eps = eps;
  hp.tied_embeddings = tied;
  hp.qkv_bias = arch == Arch::Qwen2;
  hp.qk_norm = arch == Arch::Qwen3;
  hp.rope_style = arch == Arch::Llama ? kernels::RopeStyle::Interleaved : kernels::RopeStyle::RotateHalf;
  return hp;
}

// Qwen3: head_dim 128 whatever the width (Q is wider than the residual stream on the small models).
HParams qwen3(int vocab, int embd, int layers, int heads, int kv, int head_dim, int ff, int ctx, bool tied) {
  HParams hp = make(Arch::Qwen3, vocab, embd, layers, heads, kv, ff, ctx, 1000000.f, 1e-6f, tied);
  hp.head_dim = head_dim;
  hp.rope_dim = head_dim;
  return hp;
}

// Phi-3: untied output, RoPE theta 10k, a sliding window on every layer.
HParams phi3(int vocab, int embd, int layers, int heads, int kv, int ff, int ctx, int window) {
  HParams hp = make(Arch::Phi3, vocab, embd, layers, heads, kv, ff, ctx, 10000.f, 1e-5f, false);
  hp.n_swa = window;
  return hp;
}

// Gemma 2 and 3: GeGLU, pre- and post-norms, tied embeddings, head_dim apart from the width, a
// window on every layer but each period-th, attention scale query_pre_attn_scalar^-1/2 (= head_dim
// on all but the largest models).
HParams gemma(Arch arch, int vocab, int embd, int layers, int heads, int kv, int head_dim, int ff, int ctx, float theta,
              int window, int period) {
  HParams hp = make(arch, vocab, embd, layers, heads, kv, ff, ctx, theta, 1e-6f, true);
  hp.head_dim = head_dim;
  hp.rope_dim = head_dim;
  hp.gemma_block = true;
  hp.n_swa = window;
  hp.swa_period = period;
  hp.query_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  return hp;
}

// Gemma 2: soft-capping (attention 50, final 30), a 4,096-token window on the even layers.
HParams gemma2(int vocab, int embd, int layers, int heads, int kv, int head_dim, int ff, int window) {
  HParams hp = gemma(Arch::Gemma2, vocab, embd, layers, heads, kv, head_dim, ff, 8192, 10000.f, window, 2);
  hp.attn_softcap = 50.0f;
  hp.final_softcap = 30.0f;
  return hp;
}

// Gemma 3 (text): no soft-capping, per-head Q/K norms, five local layers per global one, global
// RoPE base 1e6 (linear scaling 8 on the 4B and larger), local base 10k.
HParams gemma3(int vocab, int embd, int layers, int heads, int kv, int head_dim, int ff, int ctx, int window) {
  HParams hp = gemma(Arch::Gemma3, vocab, embd, layers, heads, kv, head_dim, ff, ctx, 1000000.f, window, 6);
  hp.qk_norm = true;
  hp.rope_theta_swa = 10000.0f;
  return hp;
}

std::vector<ShapePreset> build() {
  std::vector<ShapePreset> v;
  v.push_back({"smollm2-135m", "SmolLM2-135M (HuggingFaceTB): 30 layers, dim 576, 9/3 heads",
               make(Arch::Llama, 49152, 576, 30, 9, 3, 1536, 8192, 100000.f, 1e-5f, true)});
  v.push_back({"smollm2-360m", "SmolLM2-360M: 32 layers, dim 960, 15/5 heads",
               make(Arch::Llama, 49152, 960, 32, 15, 5, 2560, 8192, 100000.f, 1e-5f, true)});
  v.push_back({"qwen2.5-0.5b", "Qwen2.5-0.5B: 24 layers, dim 896, 14/2 heads, QKV bias",
               make(Arch::Qwen2, 151936, 896, 24, 14, 2, 4864, 32768, 1000000.f, 1e-6f, true)});
  v.push_back({"qwen3-0.6b", "Qwen3-0.6B: 28 layers, dim 1024, 16/8 heads of 128, per-head Q/K norm",
               qwen3(151936, 1024, 28, 16, 8, 128, 3072, 40960, true)});
  v.push_back({"phi-3-mini", "Phi-3-mini-4k: 32 layers, dim 3072, 32/32 heads of 96, fused QKV and gate/up, window 2047",
               phi3(32064, 3072, 32, 32, 32, 8192, 4096, 2047)});
  v.push_back({"gemma-2-2b", "Gemma-2-2B: 26 layers, dim 2304, 8/4 heads of 256, GeGLU, soft-capping, window 4096 on even layers",
               gemma2(256000, 2304, 26, 8, 4, 256, 9216, 4096)});
  v.push_back({"gemma-3-1b", "Gemma-3-1B: 26 layers, dim 1152, 4/1 heads of 256, Q/K norms, window 512 on 5 of 6 layers, "
               "RoPE base 1e6 global / 10k local",
               gemma3(262144, 1152, 26, 4, 1, 256, 6912, 32768, 512)});
  HParams l32 = make(Arch::Llama, 128256, 2048, 16, 32, 8, 8192, 131072, 500000.f, 1e-5f, true);
  l32.rope_scaling = {"llama3", 32.0f, 1.0f, 4.0f, 8192};
  v.push_back({"llama-3.2-1b", "Llama-3.2-1B: 16 layers, dim 2048, 32/8 heads, llama3 rope scaling", l32});
  v.push_back({"tinyllama-1.1b", "TinyLlama-1.1B: 22 layers, dim 2048, 32/4 heads",
               make(Arch::Llama, 32000, 2048, 22, 32, 4, 5632, 2048, 10000.f, 1e-5f, false)});
  v.push_back({"stories260k", "karpathy stories260K: 5 layers, dim 64, 8/4 heads",
               make(Arch::Llama, 512, 64, 5, 8, 4, 172, 512, 10000.f, 1e-5f, false)});
  v.push_back({"tiny", "a tiny test shape: 2 layers, dim 64, 4/2 heads",
               make(Arch::Llama, 320, 64, 2, 4, 2, 128, 1024, 10000.f, 1e-5f, false)});
  v.push_back({"tiny-qwen2", "a tiny Qwen2 test shape with QKV bias",
               make(Arch::Qwen2, 320, 64, 2, 4, 2, 128, 1024, 1000000.f, 1e-6f, true)});
  v.push_back({"tiny-phi3", "a tiny Phi-3 test shape: 2 layers, dim 64, 4/2 heads, fused QKV and gate/up, window 1000",
               phi3(320, 64, 2, 4, 2, 128, 1024, 1000)});
  v.push_back({"tiny-qwen3", "a tiny Qwen3 test shape: 2 layers, dim 64, 4/2 heads of 32 (Q wider than dim), Q/K norm",
               qwen3(320, 64, 2, 4, 2, 32, 128, 1024, true)});
  // Soft-caps scaled to a random model's logits (attention scores within +-0.1, output logits within
  // +-0.6 at weight std 0.02), so that both caps change the result; Gemma 2's 50 / 30 would not bite.
  HParams tg2 = gemma2(320, 64, 4, 4, 2, 32, 128, 48);
  tg2.attn_softcap = 0.05f;
  tg2.final_softcap = 0.3f;
  v.push_back({"tiny-gemma2",
               "a tiny Gemma 2 test shape: 4 layers, dim 64, 4/2 heads of 32, window 48 on even layers, soft-caps 0.05 / 0.3",
               tg2});
  // Six layers: five local, one global (layer 5); the 4B's linear RoPE scaling (factor 8) on the
  // global table, so that both tables and the scaling enter the reference comparison.
  HParams tg3 = gemma3(320, 64, 6, 4, 2, 32, 128, 2048, 48);
  tg3.rope_scaling.type = "linear";
  tg3.rope_scaling.factor = 8.0f;
  v.push_back({"tiny-gemma3",
               "a tiny Gemma 3 test shape: 6 layers (5 local, window 48), dim 64, 4/2 heads of 32, Q/K norms, "
               "RoPE 1e6 linear x8 global / 10k local",
               tg3});
  return v;
}

}  // namespace

const std::vector<ShapePreset>& shape_presets() {
  static const std::vector<ShapePreset> v = build();
  return v;
}

const ShapePreset& shape_preset(const std::string& name) {
  for (const auto& p : shape_presets())
    if (p.name == name) return p;
  std::string names;
  for (const auto& p : shape_presets()) names += (names.empty() ? "" : ", ") + p.name;
  fail("unknown shape '{}' (known: {})", name, names);
}

}  // namespace kvs
