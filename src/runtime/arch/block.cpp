#include "runtime/arch/block.h"

#include "core/error.h"

namespace kvs::arch {

const ArchBlock& block_of(Arch arch) {
  switch (arch) {
    case Arch::Llama: return llama_block();
    case Arch::Qwen2: return qwen2_block();
    case Arch::Qwen3: return qwen3_block();
    case Arch::Phi3: return phi3_block();
    case Arch::Gemma2: return gemma2_block();
    case Arch::Gemma3: return gemma3_block();
  }
  fail("no forward pass for architecture #{}", static_cast<int>(arch));
}

namespace step {

void norm_rows(const Runtime& rt, const float* x, const TensorView& w, float* out, int n) {
  const int E = rt.model.hp.n_embd;
  backend::Tensor y = rows_of(out, n, E);
  rt.be.rms_norm(rows_of(x, n, E), w, y, rt.model.hp.rms_eps);
}

namespace {

// a.q, a.k, a.v = W_q, W_k, W_v . a.xn over n rows (no bias): one parallel section and one
// activation conversion for the three when they are repacked (Backend::matmul_shared).
void project_qkv(const Runtime& rt, const LayerWeights& L, Activations& a, int n) {
  const HParams& hp = rt.model.hp;
  const int64_t Q = static_cast<int64_t>(hp.n_head) * hp.head_dim, KV = static_cast<int64_t>(hp.n_head_kv) * hp.head_dim;
  const backend::MatmulOut t[] = {
      {&L.wq, rows_of(a.q.data(), n, Q)}, {&L.wk, rows_of(a.k.data(), n, KV)}, {&L.wv, rows_of(a.v.data(), n, KV)}};
  rt.be.matmul_shared(t, rows_of(a.xn.data(), n, hp.n_embd));
}

}  // namespace

void qkv_rope(const Runtime& rt, Activations& a, int il, int n, bool keep_pre, const float* rope, bool head_norms) {
  const HParams& hp = rt.model.hp;
  const LayerWeights& L = rt.model.layers[static_cast<size_t>(il)];
  const int64_t Q = static_cast<int64_t>(hp.n_head) * hp.head_dim, KV = static_cast<int64_t>(hp.n_head_kv) * hp.head_dim;
  backend::Backend& be = rt.be;
  norm_rows(rt, a.x.data(), L.attn_norm, a.xn.data(), n);
  project_qkv(rt, L, a, n);
  backend::Tensor q = rows_of(a.q.data(), n, Q), k = rows_of(a.k.data(), n, KV), v = rows_of(a.v.data(), n, KV);
  // + b_q, b_k, b_v when the layer has them
  if (L.bq.valid()) {
    be.add_bias(q, L.bq);
    be.add_bias(k, L.bk);
    be.add_bias(v, L.bv);
  }
  // q_h, k_h = q_norm(q_h), k_norm(k_h): a norm weight of head_dim elements normalises each head
  if (head_norms) {
    be.rms_norm(q, L.q_norm, q, hp.rms_eps);
    be.rms_norm(k, L.k_norm, k, hp.rms_eps);
  }
  // pre-RoPE copies for observers that ask for them
  if (keep_pre) {
    backend::Tensor qp = rows_of(a.q_pre.data(), n, Q), kp = rows_of(a.k_pre.data(), n, KV);
    be.copy(q, qp);
    be.copy(k, kp);
  }
  const backend::Tensor cs = rows_of(rope, n, hp.rope_dim);
  be.rope(q, hp.n_head, hp.head_dim, hp.rope_dim, cs, hp.rope_style);
  be.rope(k, hp.n_head_kv, hp.head_dim, hp.rope_dim, cs, hp.rope_style);
}

void queries_rope(const Runtime& rt, int il, const float* attn_in, int n, const float* rope_cs, bool rope_shared,
                  float* q_out, bool head_norms) {
  const HParams& hp = rt.model.hp;
  const LayerWeights& L = rt.model.layers[static_cast<size_t>(il)];
  const int64_t Q = static_cast<int64_t>(hp.n_head) * hp.head_dim;
  backend::Backend& be = rt.be;
  backend::Tensor q = rows_of(q_out, n, Q);
  be.matmul(L.wq, rows_of(attn_in, n, hp.n_embd), q);
  if (L.bq.valid()) be.add_bias(q, L.bq);
  if (head_norms) be.rms_norm(q, L.q_norm, q, hp.rms_eps);
  be.rope(q, hp.n_head, hp.head_dim, hp.rope_dim, rows_of(rope_cs, rope_shared ? 1 : n, hp.rope_dim), hp.rope_style);
}

void add_residual(const Runtime& rt, Activations& a, const float* y, int rows) {
  const int E = rt.model.hp.n_embd;
  backend::Tensor x = rows_of(a.x.data(), rows, E);
  rt.be.add(x, rows_of(y, rows, E));
}

void add_residual_then_norm(const Runtime& rt, Activations& a, const float* y, const TensorView& w, float* out,
                            int rows) {
  const int E = rt.model.hp.n_embd;
  backend::Tensor x = rows_of(a.x.data(), rows, E), o = rows_of(out, rows, E);
  rt.be.add_then_rms_norm(x, rows_of(y, rows, E), w, o, rt.model.hp.rms_eps);
}

}  // namespace step
}  // namespace kvs::arch
