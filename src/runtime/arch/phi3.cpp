// Phi-3 (mini; Phi-3.5-mini and Phi-4 read the same way), read top-down: the Llama block
// (llama.cpp) with its weights stored fused, rotate-half RoPE, and a sliding window on every layer
// (Phi-3-mini-4k: a query sees the last 2,047 positions; AttnShape, kvcache/attention.h):
//   x = embed(token)
//   per layer:  n = attn_norm(x)
//               [q; k; v] = W_qkv . n                  (W_qkv = [W_q; W_k; W_v], one tensor in the file)
//               q, k = RoPE(q), RoPE(k)
//               x = x + W_o . attention(q, cache + k, cache + v)          (windowed)
//               [g; u] = W_gate_up . m,  m = ffn_norm(x)  (W_gate_up = [W_gate; W_up], gate first)
//               x = x + W_down . (silu(g) * u)
//   logits = W_out . output_norm(x)
// The loader (model/load_gguf.cpp, load_hf.cpp) splits the fused tensors into row views wq/wk/wv
// and ffn_gate/ffn_up without copying, so every step is the Llama block's: the product of a row
// view is the corresponding rows of the fused product. Files without a fused attn_qkv carry Q/K/V
// biases (llama.cpp's phi3 graph), the Llama block's optional biases. LongRoPE (the 128k models'
// rope_factors_long/short) is refused at load.
// Sources: transformers' modeling_phi3.py, llama.cpp's build_phi3.
#include "runtime/arch/block.h"

namespace kvs::arch {

const ArchBlock& phi3_block() {
  static const ArchBlock b{llama::embed, llama::attention_input, llama::queries, llama::output_and_ffn, llama::logits};
  return b;
}

}  // namespace kvs::arch
