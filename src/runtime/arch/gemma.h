// Gemma 2's layer, read top-down where it departs from the Llama block (runtime/arch/llama.cpp,
// which runs the rest: embedding, Q/K/V, RoPE, cache, attention, logits):
//   x  = embed(token) * sqrt(E)
//   per layer: h = x + post_attn_norm(W_o . attention(attn_norm(x)))       (soft-capped, windowed
//                                                                          on local layers: AttnShape)
//              x = h + post_ffn_norm(W_down . (gelu_tanh(W_gate . n) * (W_up . n))),  n = ffn_norm(h)
//   logits = final_softcap * tanh(W_out . output_norm(x) / final_softcap)
// Norm weights are held as 1 + w (GGUF's convention; HF's w gets +1 at load), so every norm is a
// plain RMSNorm here. Sources: transformers' modeling_gemma2.py, llama.cpp's build_gemma2.
//
// Gemma 3 (text) is the same layer with three changes, all data rather than code:
//   - q = RoPE_l(q_norm(W_q . n)), k = RoPE_l(k_norm(W_k . n)) per head (HParams::qk_norm, as Qwen3;
//     the norms are Gemma norms, 1 + w) — llama.cpp's qkv();
//   - RoPE_l: a local layer rotates with its own table (base rope_theta_swa = 10,000, unscaled), a
//     global one with rope_theta = 1e6 and the model's scaling (linear x8 on 4B+) — Model::
//     rope_inv_freq_swa / rope_inv_freq, Activations::rope_local / rope;
//   - five local layers per global one (swa_period 6, window 512 on the 1B) and no soft-capping.
// Sources: transformers' modeling_gemma3.py (Gemma3ForCausalLM), llama.cpp's build_gemma3_iswa.
#pragma once
#include "runtime/arch/llama.h"

namespace kvs::arch {

// The attention output's projection, its norm and the residual, then the feed-forward block with
// its pre- and post-norms, on rows [0, rows) of a.att / a.x (Gemma 2's half of a layer after the
// attention). GELU as llama.cpp's CPU backend computes it (through an F16 table) when
// rt.shape.f16_compat, else in F32 as transformers' gelu_pytorch_tanh.
void gemma_output_and_ffn(const Runtime& rt, Activations& a, int il, int rows);

// tanh-approximated GELU of x times up, in place in x: x[i] = gelu(x[i]) * up[i]. f16_compat:
// GELU's input and output rounded to F16 as ggml's table lookup does.
void gelu_tanh_mul(float* x, const float* up, int64_t n, bool f16_compat);

}  // namespace kvs::arch
