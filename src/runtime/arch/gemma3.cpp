// Gemma 3 (text), read top-down: Gemma 2's layer (gemma2.cpp) with Qwen3's attention input
// (qwen3.cpp) and two RoPE tables:
//   x = embed(token) * sqrt(E)
//   per layer:  n = attn_norm(x)
//               q_h = RoPE_l(q_norm(W_q . n)_h), k_h = RoPE_l(k_norm(W_k . n)_h), v = W_v . n
//                    RoPE_l: a local layer rotates with base rope_theta_swa = 10,000, unscaled; a global
//                    one with rope_theta = 1e6 and the model's scaling (linear x8 on 4B+) — forward.cpp
//                    hands each layer its table (Activations::rope_local / rope)
//               h = x + post_attn_norm(W_o . attention(q, cache + k, cache + v))
//                        (five local layers, window 512 on the 1B, for each global one; no logit
//                         soft-capping: AttnShape, kvcache/attention.h)
//               x = h + post_ffn_norm(W_down . (gelu_tanh(W_gate . m) * (W_up . m))),  m = ffn_norm(h)
//   logits = W_out . output_norm(x)       (soft-capped as Gemma 2's only if the file sets final_logit_softcapping)
// All norms, the per-head ones included, are Gemma norms held as 1 + w.
// Sources: transformers' modeling_gemma3.py (Gemma3ForCausalLM), llama.cpp's build_gemma3_iswa.
#include "runtime/arch/block.h"

namespace kvs::arch {

const ArchBlock& gemma3_block() {
  static const ArchBlock b{gemma2::embed, qwen3::attention_input, qwen3::queries, gemma2::output_and_ffn,
                           gemma2::logits};
  return b;
}

}  // namespace kvs::arch
