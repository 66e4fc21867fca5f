// Gemma 2, read top-down:
//   x = embed(token) * sqrt(E)
//   per layer:  n = attn_norm(x)
//               q = RoPE(W_q . n), k = RoPE(W_k . n), v = W_v . n            (the Llama block's, llama.cpp)
//               h = x + post_attn_norm(W_o . attention(q, cache + k, cache + v))
//                        (attention: logits soft-capped c * tanh(s / c), scale query_pre_attn_scalar^-1/2,
//                         a 4,096-token window on even layers: AttnShape, kvcache/attention.h)
//               x = h + post_ffn_norm(W_down . (gelu_tanh(W_gate . m) * (W_up . m))),  m = ffn_norm(h)
//   logits = final_softcap * tanh(W_out . output_norm(x) / final_softcap)
// Norm weights are held as 1 + w (GGUF's convention; HF's w gets +1 at load), so every norm is a
// plain RMSNorm here. Sources: transformers' modeling_gemma2.py, llama.cpp's build_gemma2.
#include "runtime/arch/block.h"

#include <cmath>

#include "core/fp16.h"
#include "kernels/ops.h"

namespace kvs::arch {

using detail::for_rows;

namespace gemma2 {

void embed(const Runtime& rt, const int32_t* tokens, int n, float* x) {
  const Model& m = rt.model;
  const int E = m.hp.n_embd;
  // x = embed(token) * sqrt(E), in F32 as llama.cpp and transformers
  const float scale = std::sqrt(static_cast<float>(E));
  for_rows(rt.pool, n, [&](int t) {
    float* xt = x + static_cast<size_t>(t) * E;
    kernels::dequantize_row(m.tok_embd.type, m.tok_embd.row(tokens[t]), xt, E);
    kernels::scale_f32(xt, scale, E);
  });
}

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

void output_and_ffn(const Runtime& rt, Activations& a, int il, int rows) {
  const HParams& hp = rt.model.hp;
  const LayerWeights& L = rt.model.layers[static_cast<size_t>(il)];
  const int F = hp.n_ff;
  // h = x + post_attn_norm(W_o . att)
  kernels::matmul(L.wo, a.att.data(), rows, a.xn.data(), rt.pool, rt.mm);
  step::norm_rows(rt, a.xn.data(), L.post_attn_norm, a.xn.data(), rows);
  step::add_residual(rt, a, a.xn.data(), rows);
  // x = h + post_ffn_norm(W_down . (gelu(W_gate . m) * (W_up . m))), m = ffn_norm(h). GELU as
  // llama.cpp's CPU backend computes it (through an F16 table) when rt.shape.f16_compat, else in
  // F32 as transformers' gelu_pytorch_tanh.
  step::norm_rows(rt, a.x.data(), L.ffn_norm, a.xn.data(), rows);
  const kernels::MatmulTarget gate_up[] = {{&L.ffn_gate, a.ffn_gate.data()}, {&L.ffn_up, a.ffn_up.data()}};
  kernels::matmul_shared(gate_up, a.xn.data(), rows, rt.pool, rt.mm);
  for_rows(rt.pool, rows, [&](int t) {
    gelu_tanh_mul(a.ffn_gate.data() + static_cast<size_t>(t) * F, a.ffn_up.data() + static_cast<size_t>(t) * F, F,
                  rt.shape.f16_compat);
  });
  kernels::matmul(L.ffn_down, a.ffn_gate.data(), rows, a.xn.data(), rt.pool, rt.mm);
  step::norm_rows(rt, a.xn.data(), L.post_ffn_norm, a.xn.data(), rows);
  step::add_residual(rt, a, a.xn.data(), rows);
}

void logits(const Runtime& rt, Activations& a, const std::vector<int>& rows, float* logits_out) {
  const HParams& hp = rt.model.hp;
  llama::logits(rt, a, rows, logits_out);
  // logits -> c * tanh(logits / c), as llama.cpp (scale by 1/c, tanh, scale by c); Gemma 3 files
  // that set no final soft-cap leave it at 0
  if (hp.final_softcap > 0) {
    const float c = hp.final_softcap, inv = 1.0f / c;
    const size_t n = rows.size() * static_cast<size_t>(hp.n_vocab);
    for (size_t i = 0; i < n; ++i) logits_out[i] = c * std::tanh(logits_out[i] * inv);
  }
}

}  // namespace gemma2

const ArchBlock& gemma2_block() {
  static const ArchBlock b{gemma2::embed, llama::attention_input, llama::queries, gemma2::output_and_ffn, gemma2::logits};
  return b;
}

}  // namespace kvs::arch
