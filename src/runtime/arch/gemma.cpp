#include "runtime/arch/gemma.h"

#include <cmath>

#include "core/fp16.h"
#include "kernels/ops.h"

namespace kvs::arch {

void gelu_tanh_mul(float* x, const float* up, int64_t n, bool f16_compat) {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): torch's gelu(approximate="tanh") and ggml_gelu_f32.
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f, kA = 0.044715f;
  auto gelu = [&](float v) { return 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * v * (1.0f + kA * v * v))); };
  for (int64_t i = 0; i < n; ++i) {
    float g;
    if (!f16_compat) {
      g = gelu(x[i]);
    } else if (x[i] <= -10.0f) {  // ggml_vec_gelu_f32 with GGML_GELU_FP16: outside (-10, 10) exact, else a
      g = 0.0f;                   // table of F16 results indexed by the F16-rounded input
    } else if (x[i] >= 10.0f) {
      g = x[i];
    } else {
      g = fp16_to_fp32(fp32_to_fp16(gelu(fp16_to_fp32(fp32_to_fp16(x[i])))));
    }
    x[i] = g * up[i];
  }
}

void gemma_output_and_ffn(const Runtime& rt, Activations& a, int il, int rows) {
  const HParams& hp = rt.model.hp;
  const LayerWeights& L = rt.model.layers[static_cast<size_t>(il)];
  const int E = hp.n_embd, F = hp.n_ff;
  // h = x + post_attn_norm(W_o . att)
  kernels::matmul(L.wo, a.att.data(), rows, a.xn.data(), rt.pool, rt.mm);
  detail::for_rows(rt.pool, rows, [&](int t) {
    float* o = a.xn.data() + static_cast<size_t>(t) * E;
    kernels::rmsnorm(o, L.post_attn_norm.f32(), o, E, hp.rms_eps);
    kernels::add_f32(a.x.data() + static_cast<size_t>(t) * E, o, E);
  });
  // x = h + post_ffn_norm(W_down . (gelu(W_gate . n) * (W_up . n))), n = ffn_norm(h)
  detail::for_rows(rt.pool, rows, [&](int t) {
    kernels::rmsnorm(a.x.data() + static_cast<size_t>(t) * E, L.ffn_norm.f32(), a.xn.data() + static_cast<size_t>(t) * E, E,
                     hp.rms_eps);
  });
  kernels::matmul(L.ffn_gate, a.xn.data(), rows, a.ffn_gate.data(), rt.pool, rt.mm);
  kernels::matmul(L.ffn_up, a.xn.data(), rows, a.ffn_up.data(), rt.pool, rt.mm);
  detail::for_rows(rt.pool, rows, [&](int t) {
    gelu_tanh_mul(a.ffn_gate.data() + static_cast<size_t>(t) * F, a.ffn_up.data() + static_cast<size_t>(t) * F, F,
                  rt.shape.f16_compat);
  });
  kernels::matmul(L.ffn_down, a.ffn_gate.data(), rows, a.xn.data(), rt.pool, rt.mm);
  detail::for_rows(rt.pool, rows, [&](int t) {
    float* o = a.xn.data() + static_cast<size_t>(t) * E;
    kernels::rmsnorm(o, L.post_ffn_norm.f32(), o, E, hp.rms_eps);
    kernels::add_f32(a.x.data() + static_cast<size_t>(t) * E, o, E);
  });
}

}  // namespace kvs::arch
