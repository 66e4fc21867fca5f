// Qwen3 (dense), read top-down: the Llama block (llama.cpp) with each head's query and key
// RMS-normed before RoPE (weights [head_dim] shared by the heads), rotate-half RoPE, head_dim
// independent of the width (Q/K/V biases only if the file has them: HF's attention_bias):
//   x = embed(token)
//   per layer:  n = attn_norm(x)
//               q_h = RoPE(q_norm(W_q . n)_h), k_h = RoPE(k_norm(W_k . n)_h) for every head h, v = W_v . n
//               x = x + W_o . attention(q, cache + k, cache + v)
//               x = x + W_down . (silu(W_gate . m) * (W_up . m)),  m = ffn_norm(x)
//   logits = W_out . output_norm(x)
// Gemma 3 (gemma3.cpp) takes this attention input (its norms are Gemma norms, stored as 1 + w).
// Sources: transformers' modeling_qwen3.py (Qwen3Attention), llama.cpp's build_qwen3.
#include <vector>

#include "kernels/ops.h"
#include "runtime/arch/block.h"

namespace kvs::arch {

using detail::for_rows;

namespace qwen3 {

void attention_input(const Runtime& rt, Activations& a, int il, int n, bool keep_pre, const float* rope) {
  const HParams& hp = rt.model.hp;
  const LayerWeights& L = rt.model.layers[static_cast<size_t>(il)];
  const size_t Q = static_cast<size_t>(hp.n_head) * hp.head_dim, KV = static_cast<size_t>(hp.n_head_kv) * hp.head_dim;
  // n = attn_norm(x); q, k, v = W . n
  step::norm_rows(rt, a.x.data(), L.attn_norm, a.xn.data(), n);
  step::project_qkv(rt, L, a, n);
  for_rows(rt.pool, n, [&](int t) {
    // + b_q, b_k, b_v when the file has them (HF's attention_bias; the released models have none)
    step::add_qkv_bias(hp, L, a, t);
    // q_h, k_h = q_norm(q_h), k_norm(k_h)
    step::head_norm(a.q.data() + t * Q, hp.n_head, hp.head_dim, L.q_norm.f32(), hp.rms_eps);
    step::head_norm(a.k.data() + t * KV, hp.n_head_kv, hp.head_dim, L.k_norm.f32(), hp.rms_eps);
    if (keep_pre) step::keep_pre_rope(hp, a, t);
    // q, k = RoPE(q), RoPE(k)
    step::rope_qk(hp, a, t, rope + static_cast<size_t>(t) * hp.rope_dim);
  });
}

void queries(const Runtime& rt, int il, const float* attn_in, int n, const float* rope_cs, bool rope_shared,
             float* q_out) {
  const HParams& hp = rt.model.hp;
  const LayerWeights& L = rt.model.layers[static_cast<size_t>(il)];
  const int H = hp.n_head, D = hp.head_dim, R = hp.rope_dim, Q = H * D;
  kernels::matmul(L.wq, attn_in, n, q_out, rt.pool, rt.mm);
  for_rows(rt.pool, n, [&](int t) {
    float* qt = q_out + static_cast<size_t>(t) * Q;
    if (L.bq.valid()) kernels::add_f32(qt, L.bq.f32(), Q);
    step::head_norm(qt, H, D, L.q_norm.f32(), hp.rms_eps);
    kernels::rope(qt, H, D, R, rope_cs + (rope_shared ? 0 : static_cast<size_t>(t) * R), hp.rope_style);
  });
}

}  // namespace qwen3

const ArchBlock& qwen3_block() {
  static const ArchBlock b{llama::embed, qwen3::attention_input, qwen3::queries, llama::output_and_ffn, llama::logits};
  return b;
}

}  // namespace kvs::arch
