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

#include "kernels/ops.h"
#include "runtime/arch/block.h"

namespace kvs::arch {

using detail::for_rows;

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
  const Model& m = rt.model;
  const int E = m.hp.n_embd;
  for_rows(rt.pool, n, [&](int t) {
    kernels::dequantize_row(m.tok_embd.type, m.tok_embd.row(tokens[t]), x + static_cast<size_t>(t) * E, E);
  });
}

void output_and_ffn(const Runtime& rt, Activations& a, int il, int rows) {
  const HParams& hp = rt.model.hp;
  const LayerWeights& L = rt.model.layers[static_cast<size_t>(il)];
  const size_t F = static_cast<size_t>(hp.n_ff);
  // x = x + W_o . att
  // then m = ffn_norm(x), in the same parallel section
  kernels::matmul(L.wo, a.att.data(), rows, a.xn.data(), rt.pool, rt.mm);
  step::add_residual_then_norm(rt, a, a.xn.data(), L.ffn_norm, a.xn.data(), rows);
  // x = x + W_down . (silu(W_gate . m) * (W_up . m))
  const kernels::MatmulTarget gate_up[] = {{&L.ffn_gate, a.ffn_gate.data()}, {&L.ffn_up, a.ffn_up.data()}};
  kernels::matmul_shared(gate_up, a.xn.data(), rows, rt.pool, rt.mm);
  for_rows(rt.pool, rows, [&](int t) {
    kernels::silu_mul(a.ffn_gate.data() + t * F, a.ffn_up.data() + t * F, static_cast<int64_t>(F));
  });
  kernels::matmul(L.ffn_down, a.ffn_gate.data(), rows, a.xn.data(), rt.pool, rt.mm);
  step::add_residual(rt, a, a.xn.data(), rows);
}

void logits(const Runtime& rt, Activations& a, const std::vector<int>& rows, float* logits_out) {
  const HParams& hp = rt.model.hp;
  const size_t E = static_cast<size_t>(hp.n_embd);
  // logits = W_out . output_norm(x)
  for (size_t i = 0; i < rows.size(); ++i)
    kernels::rmsnorm(a.x.data() + static_cast<size_t>(rows[i]) * E, rt.model.output_norm.f32(), a.xn.data() + i * E,
                     static_cast<int64_t>(E), hp.rms_eps);
  kernels::matmul(rt.model.output, a.xn.data(), static_cast<int64_t>(rows.size()), logits_out, rt.pool, rt.mm);
}

}  // namespace llama

const ArchBlock& llama_block() {
  static const ArchBlock b{llama::embed, llama::attention_input, llama::queries, llama::output_and_ffn, llama::logits};
  return b;
}

}  // namespace kvs::arch
