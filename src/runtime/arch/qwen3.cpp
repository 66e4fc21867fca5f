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
#include "runtime/arch/block.h"

namespace kvs::arch {

namespace qwen3 {

void attention_input(const Runtime& rt, Activations& a, int il, int n, bool keep_pre, const float* rope) {
  // n = attn_norm(x); q, k, v = W . n (+ b when the file has them: HF's attention_bias, the released
  // models have none); q_h, k_h = q_norm(q_h), k_norm(k_h); q, k = RoPE(q), RoPE(k)
  step::qkv_rope(rt, a, il, n, keep_pre, rope, /*head_norms=*/true);
}

void queries(const Runtime& rt, int il, const float* attn_in, int n, const float* rope_cs, bool rope_shared,
             float* q_out) {
  step::queries_rope(rt, il, attn_in, n, rope_cs, rope_shared, q_out, /*head_norms=*/true);
}

}  // namespace qwen3

const ArchBlock& qwen3_block() {
  static const ArchBlock b{llama::embed, qwen3::attention_input, qwen3::queries, llama::output_and_ffn, llama::logits};
  return b;
}

}  // namespace kvs::arch
