// The Llama block, read top-down (Llama 2/3/3.1/3.2, Mistral, SmolLM, TinyLlama; Qwen2 and Phi-3
// run it too: qwen2.cpp, phi3.cpp):
//   x = embed(token)
//   per layer:  n = attn_norm(x)
//               q = RoPE(W_q . n + b_q), k = RoPE(W_k . n + b_k), v = W_v . n + b_v   (biases optional:
//                                                                                 Qwen2's; some Llama files)
//               x = x + W_o . attention(q, cache + k, cache + v)                  (forward.cpp)
//               x = x + W_down . (silu(W_gate . m) * (W_up . m)),  m = ffn_norm(x)
//   logits = W_out . output_norm(x)
// Sources: Meta's llama model.py, transformers' modeling_llama.py, llama.cpp's build_llama.
#include <vector>

#include "runtime/arch/block.h"

namespace kvs::arch {

namespace llama {

void attention_input(const Runtime& rt, Activations& a, int il, int n, bool keep_pre, const float* rope) {
  // n = attn_norm(x); q, k, v = W . n (+ b); q, k = RoPE(q), RoPE(k)
  step::qkv_rope(rt, a, il, n, keep_pre, rope, /*head_norms=*/false);
}

void queries(const Runtime& rt, int il, const float* attn_in, int n, const float* rope_cs, bool rope_shared,
             float* q_out) {
  step::queries_rope(rt, il, attn_in, n, rope_cs, rope_shared, q_out, /*head_norms=*/false);
}

void embed(const Runtime& rt, const int32_t* tokens, int n, float* x) {
  backend::Tensor out = rows_of(x, n, rt.model.hp.n_embd);
  rt.be.embed_rows(rt.model.tok_embd, tokens, out, 1.0f);
}

void output_and_ffn(const Runtime& rt, Activations& a, int il, int rows) {
  const HParams& hp = rt.model.hp;
  const LayerWeights& L = rt.model.layers[static_cast<size_t>(il)];
  const int64_t E = hp.n_embd, F = hp.n_ff, Q = static_cast<int64_t>(hp.n_head) * hp.head_dim;
  backend::Backend& be = rt.be;
  // x = x + W_o . att
  // then m = ffn_norm(x), in the same parallel section
  backend::Tensor y = rows_of(a.xn.data(), rows, E);
  be.matmul(L.wo, rows_of(a.att.data(), rows, Q), y);
  step::add_residual_then_norm(rt, a, a.xn.data(), L.ffn_norm, a.xn.data(), rows);
  // x = x + W_down . (silu(W_gate . m) * (W_up . m))
  backend::Tensor gate = rows_of(a.ffn_gate.data(), rows, F), up = rows_of(a.ffn_up.data(), rows, F);
  const backend::MatmulOut gate_up[] = {{&L.ffn_gate, gate}, {&L.ffn_up, up}};
  be.matmul_shared(gate_up, y);
  be.silu_mul(gate, up);
  be.matmul(L.ffn_down, gate, y);
  step::add_residual(rt, a, a.xn.data(), rows);
}

void logits(const Runtime& rt, Activations& a, const std::vector<int>& rows, float* logits_out) {
  const HParams& hp = rt.model.hp;
  const int64_t E = hp.n_embd, n = static_cast<int64_t>(rows.size());
  backend::Backend& be = rt.be;
  // logits = W_out . output_norm(x)
  backend::Tensor xn = rows_of(a.xn.data(), n, E), out = rows_of(logits_out, n, hp.n_vocab);
  be.gather_rows(rows_of(a.x.data(), a.capacity, E), rows, xn);
  be.rms_norm(xn, rt.model.output_norm, xn, hp.rms_eps);
  be.matmul(rt.model.output, xn, out);
}

}  // namespace llama

const ArchBlock& llama_block() {
  static const ArchBlock b{llama::embed, llama::attention_input, llama::queries, llama::output_and_ffn, llama::logits};
  return b;
}

}  // namespace kvs::arch
