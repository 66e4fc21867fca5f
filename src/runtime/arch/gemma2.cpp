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

namespace kvs::arch {

namespace gemma2 {

void embed(const Runtime& rt, const int32_t* tokens, int n, float* x) {
  const int E = rt.model.hp.n_embd;
  // x = embed(token) * sqrt(E), in F32 as llama.cpp and transformers
  backend::Tensor out = rows_of(x, n, E);
  rt.be.embed_rows(rt.model.tok_embd, tokens, out, std::sqrt(static_cast<float>(E)));
}

void output_and_ffn(const Runtime& rt, Activations& a, int il, int rows) {
  const HParams& hp = rt.model.hp;
  const LayerWeights& L = rt.model.layers[static_cast<size_t>(il)];
  const int64_t E = hp.n_embd, F = hp.n_ff, Q = static_cast<int64_t>(hp.n_head) * hp.head_dim;
  backend::Backend& be = rt.be;
  // h = x + post_attn_norm(W_o . att)
  backend::Tensor y = rows_of(a.xn.data(), rows, E);
  be.matmul(L.wo, rows_of(a.att.data(), rows, Q), y);
  be.rms_norm(y, L.post_attn_norm, y, hp.rms_eps);
  step::add_residual(rt, a, a.xn.data(), rows);
  // x = h + post_ffn_norm(W_down . (gelu(W_gate . m) * (W_up . m))), m = ffn_norm(h). GELU as
  // llama.cpp's CPU backend computes it (through an F16 table) when rt.shape.f16_compat, else in
  // F32 as transformers' gelu_pytorch_tanh.
  step::norm_rows(rt, a.x.data(), L.ffn_norm, a.xn.data(), rows);
  backend::Tensor gate = rows_of(a.ffn_gate.data(), rows, F), up = rows_of(a.ffn_up.data(), rows, F);
  const backend::MatmulOut gate_up[] = {{&L.ffn_gate, gate}, {&L.ffn_up, up}};
  be.matmul_shared(gate_up, y);
  be.gelu_tanh_mul(gate, up, rt.shape.f16_compat);
  be.matmul(L.ffn_down, gate, y);
  be.rms_norm(y, L.post_ffn_norm, y, hp.rms_eps);
  step::add_residual(rt, a, a.xn.data(), rows);
}

void logits(const Runtime& rt, Activations& a, const std::vector<int>& rows, float* logits_out) {
  const HParams& hp = rt.model.hp;
  llama::logits(rt, a, rows, logits_out);
  // logits -> c * tanh(logits / c); Gemma 3 files that set no final soft-cap leave it at 0
  if (hp.final_softcap > 0) {
    backend::Tensor out = rows_of(logits_out, static_cast<int64_t>(rows.size()), hp.n_vocab);
    rt.be.softcap(out, hp.final_softcap);
  }
}

}  // namespace gemma2

const ArchBlock& gemma2_block() {
  static const ArchBlock b{gemma2::embed, llama::attention_input, llama::queries, gemma2::output_and_ffn, gemma2::logits};
  return b;
}

}  // namespace kvs::arch
