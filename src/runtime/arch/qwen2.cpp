// Qwen2 / Qwen2.5, read top-down: the Llama block (llama.cpp) with biases on the Q, K and V
// projections and rotate-half RoPE (hp.rope_style, set at load: GGUF `qwen2`, HF Qwen2ForCausalLM):
//   x = embed(token)
//   per layer:  n = attn_norm(x)
//               q = RoPE(W_q . n + b_q), k = RoPE(W_k . n + b_k), v = W_v . n + b_v
//               x = x + W_o . attention(q, cache + k, cache + v)
//               x = x + W_down . (silu(W_gate . m) * (W_up . m)),  m = ffn_norm(x)
//   logits = W_out . output_norm(x)                                     (W_out tied to embed on 0.5B-3B)
// Every step is the Llama block's (its Q/K/V biases are optional there, as in llama.cpp's
// build_llama); the loader requires the biases for this architecture.
// Sources: transformers' modeling_qwen2.py, llama.cpp's build_qwen2.
#include "runtime/arch/block.h"

namespace kvs::arch {

const ArchBlock& qwen2_block() {
  static const ArchBlock b{llama::embed, llama::attention_input, llama::queries, llama::output_and_ffn, llama::logits};
  return b;
}

}  // namespace kvs::arch
