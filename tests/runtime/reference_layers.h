// A scalar reference of the transformer layers, for tests of the forward pass and of presses that
// change it (row pruning): double-accumulating matmuls (kernels::matmul_ref) and scalar attention
// (attention_ref), no threads, no tiles.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kvcache/attention.h"
#include "kvcache/kv_cache.h"
#include "model/model.h"

namespace kvs::test {

// Scalar layers [from, to) on rows x [n][E] at `pos`, appending their K/V to `cache` (double
// accumulating matmuls, scalar attention); q_last gets the last row's query at layer to - 1.
inline void ref_layers(const Model& m, KvCache& cache, int from, int to, std::vector<float>& x, const std::vector<int32_t>& pos,
                std::vector<float>& q_last) {
  const HParams& hp = m.hp;
  const int n = static_cast<int>(pos.size()), E = hp.n_embd, H = hp.n_head, Hkv = hp.n_head_kv, D = hp.head_dim;
  const int F = hp.n_ff, R = hp.rope_dim;
  const AttnShape shape{H, Hkv, D, 1.0f / std::sqrt(static_cast<float>(D))};
  std::vector<float> xn(static_cast<size_t>(n) * E), q(static_cast<size_t>(n) * H * D), k(static_cast<size_t>(n) * Hkv * D),
      v(k.size()), att(q.size()), proj(static_cast<size_t>(n) * E), g(static_cast<size_t>(n) * F), u(g.size()),
      cs(static_cast<size_t>(R));
  for (int il = from; il < to; ++il) {
    const LayerWeights& L = m.layers[static_cast<size_t>(il)];
    for (int t = 0; t < n; ++t)
      kernels::rmsnorm(&x[static_cast<size_t>(t) * E], L.attn_norm.f32(), &xn[static_cast<size_t>(t) * E], E, hp.rms_eps);
    kernels::matmul_ref(L.wq, xn.data(), n, q.data());
    kernels::matmul_ref(L.wk, xn.data(), n, k.data());
    kernels::matmul_ref(L.wv, xn.data(), n, v.data());
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < R / 2; ++i) {
        const double a = static_cast<double>(pos[t]) * m.rope_inv_freq[static_cast<size_t>(i)];
        cs[2 * i] = static_cast<float>(std::cos(a));
        cs[2 * i + 1] = static_cast<float>(std::sin(a));
      }
      kernels::rope(&q[static_cast<size_t>(t) * H * D], H, D, R, cs.data(), hp.rope_style);
      kernels::rope(&k[static_cast<size_t>(t) * Hkv * D], Hkv, D, R, cs.data(), hp.rope_style);
    }
    ASSERT_TRUE(cache.append(il, n, k.data(), v.data(), pos.data()));
    attention_ref(cache, il, shape, q.data(), pos.data(), n, att.data(), nullptr);
    q_last.assign(q.end() - H * D, q.end());
    kernels::matmul_ref(L.wo, att.data(), n, proj.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    for (int t = 0; t < n; ++t)
      kernels::rmsnorm(&x[static_cast<size_t>(t) * E], L.ffn_norm.f32(), &xn[static_cast<size_t>(t) * E], E, hp.rms_eps);
    kernels::matmul_ref(L.ffn_gate, xn.data(), n, g.data());
    kernels::matmul_ref(L.ffn_up, xn.data(), n, u.data());
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    kernels::matmul_ref(L.ffn_down, g.data(), n, proj.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  }
}

}  // namespace kvs::test
