#include "runtime/arch/block.h"

#include <cstring>

#include "core/error.h"
#include "kernels/ops.h"

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
  const HParams& hp = rt.model.hp;
  const size_t E = static_cast<size_t>(hp.n_embd);
  detail::for_rows(rt.pool, n, [&](int t) {
    kernels::rmsnorm(x + static_cast<size_t>(t) * E, w.f32(), out + static_cast<size_t>(t) * E, static_cast<int>(E),
                     hp.rms_eps);
  });
}

namespace {

// a.q, a.k, a.v = W_q, W_k, W_v . a.xn over n rows (no bias): one parallel section and one
// activation conversion for the three when they are repacked (kernels::matmul_shared).
void project_qkv(const Runtime& rt, const LayerWeights& L, Activations& a, int n) {
  const kernels::MatmulTarget t[] = {{&L.wq, a.q.data()}, {&L.wk, a.k.data()}, {&L.wv, a.v.data()}};
  kernels::matmul_shared(t, a.xn.data(), n, rt.pool, rt.mm);
}

// Row t of a.q, a.k, a.v += b_q, b_k, b_v when the layer has biases (else nothing).
void add_qkv_bias(const HParams& hp, const LayerWeights& L, Activations& a, int t) {
  if (!L.bq.valid()) return;
  const size_t Q = static_cast<size_t>(hp.n_head) * hp.head_dim, KV = static_cast<size_t>(hp.n_head_kv) * hp.head_dim;
  kernels::add_f32(a.q.data() + t * Q, L.bq.f32(), static_cast<int64_t>(Q));
  kernels::add_f32(a.k.data() + t * KV, L.bk.f32(), static_cast<int64_t>(KV));
  kernels::add_f32(a.v.data() + t * KV, L.bv.f32(), static_cast<int64_t>(KV));
}

// Per-head RMSNorm in place: x [heads][D], weights w [D] (Qwen3's / Gemma 3's q_norm, k_norm).
void head_norm(float* x, int heads, int D, const float* w, float eps) {
  for (int h = 0; h < heads; ++h) kernels::rmsnorm(x + static_cast<size_t>(h) * D, w, x + static_cast<size_t>(h) * D, D, eps);
}

// Row t of a.q / a.k copied to a.q_pre / a.k_pre (observers that ask for pre-RoPE vectors).
void keep_pre_rope(const HParams& hp, Activations& a, int t) {
  const size_t Q = static_cast<size_t>(hp.n_head) * hp.head_dim, KV = static_cast<size_t>(hp.n_head_kv) * hp.head_dim;
  std::memcpy(a.q_pre.data() + t * Q, a.q.data() + t * Q, sizeof(float) * Q);
  std::memcpy(a.k_pre.data() + t * KV, a.k.data() + t * KV, sizeof(float) * KV);
}

// RoPE of row t of a.q and a.k with the (cos, sin) row cs [R].
void rope_qk(const HParams& hp, Activations& a, int t, const float* cs) {
  const size_t Q = static_cast<size_t>(hp.n_head) * hp.head_dim, KV = static_cast<size_t>(hp.n_head_kv) * hp.head_dim;
  kernels::rope(a.q.data() + t * Q, hp.n_head, hp.head_dim, hp.rope_dim, cs, hp.rope_style);
  kernels::rope(a.k.data() + t * KV, hp.n_head_kv, hp.head_dim, hp.rope_dim, cs, hp.rope_style);
}

}  // namespace

void qkv_rope(const Runtime& rt, Activations& a, int il, int n, bool keep_pre, const float* rope, bool head_norms) {
  const HParams& hp = rt.model.hp;
  const LayerWeights& L = rt.model.layers[static_cast<size_t>(il)];
  const size_t Q = static_cast<size_t>(hp.n_head) * hp.head_dim, KV = static_cast<size_t>(hp.n_head_kv) * hp.head_dim;
  norm_rows(rt, a.x.data(), L.attn_norm, a.xn.data(), n);
  project_qkv(rt, L, a, n);
  detail::for_rows(rt.pool, n, [&](int t) {
    add_qkv_bias(hp, L, a, t);
    if (head_norms) {
      head_norm(a.q.data() + t * Q, hp.n_head, hp.head_dim, L.q_norm.f32(), hp.rms_eps);
      head_norm(a.k.data() + t * KV, hp.n_head_kv, hp.head_dim, L.k_norm.f32(), hp.rms_eps);
    }
    if (keep_pre) keep_pre_rope(hp, a, t);
    rope_qk(hp, a, t, rope + static_cast<size_t>(t) * hp.rope_dim);
  });
}

void queries_rope(const Runtime& rt, int il, const float* attn_in, int n, const float* rope_cs, bool rope_shared,
                  float* q_out, bool head_norms) {
  const HParams& hp = rt.model.hp;
  const LayerWeights& L = rt.model.layers[static_cast<size_t>(il)];
  const int H = hp.n_head, D = hp.head_dim, R = hp.rope_dim, Q = H * D;
  kernels::matmul(L.wq, attn_in, n, q_out, rt.pool, rt.mm);
  detail::for_rows(rt.pool, n, [&](int t) {
    float* qt = q_out + static_cast<size_t>(t) * Q;
    if (L.bq.valid()) kernels::add_f32(qt, L.bq.f32(), Q);
    if (head_norms) head_norm(qt, H, D, L.q_norm.f32(), hp.rms_eps);
    kernels::rope(qt, H, D, R, rope_cs + (rope_shared ? 0 : static_cast<size_t>(t) * R), hp.rope_style);
  });
}

void add_residual(const Runtime& rt, Activations& a, const float* y, int rows) {
  const size_t E = static_cast<size_t>(rt.model.hp.n_embd);
  detail::for_rows(rt.pool, rows, [&](int t) {
    kernels::add_f32(a.x.data() + static_cast<size_t>(t) * E, y + static_cast<size_t>(t) * E, static_cast<int>(E));
  });
}

void add_residual_then_norm(const Runtime& rt, Activations& a, const float* y, const TensorView& w, float* out,
                            int rows) {
  const HParams& hp = rt.model.hp;
  const size_t E = static_cast<size_t>(hp.n_embd);
  detail::for_rows(rt.pool, rows, [&](int t) {
    float* x = a.x.data() + static_cast<size_t>(t) * E;
    kernels::add_f32(x, y + static_cast<size_t>(t) * E, static_cast<int>(E));
    kernels::rmsnorm(x, w.f32(), out + static_cast<size_t>(t) * E, static_cast<int>(E), hp.rms_eps);
  });
}

}  // namespace step
}  // namespace kvs::arch
