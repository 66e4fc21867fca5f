// Test helper: the queries a decode over Q8_0 pages actually scores with. Its Q.K rounds each query
// to int16 once per task (kernels::prepare_queries_q8_0, ops.h: s = max|q| / 32767, qi =
// round-half-even(q * (32767 / max|q|)), the query becomes s * qi), where the kernels have that
// path (the AVX-512 table, head dim 64) and the batch is decode-sized. A reference fed these
// queries matches the engine as tightly as with float queries; the kernel tests
// (tests/kernels/attn_q8_0_prepared_test.cpp) bound the rounding itself.
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/fp16.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "kvcache/attention.h"
#include "kvcache/kv_cache.h"

namespace kvs::test {

// q: [n_tok][H][D]; unchanged unless the engine would round them (see above).
inline std::vector<float> queries_as_scored(const KvCache& c, const std::vector<float>& q, int n_tok) {
  const int D = c.layout().head_dim;
  std::vector<float> probe(static_cast<size_t>(D), 1.0f);
  std::vector<uint8_t> prep(static_cast<size_t>(kernels::kQ8PreparedQueryBytes));
  if (c.layout().dtype != DType::Q8_0 || n_tok >= kAttnPrefillMinTokens ||
      !kernels::prepare_queries_q8_0(probe.data(), 1, D, 1.0f, prep.data()))
    return q;
  std::vector<float> out(q.size());
  for (size_t r = 0; r + D <= q.size(); r += static_cast<size_t>(D)) {
    float mx = 0;
    for (int j = 0; j < D; ++j) mx = std::fmax(mx, std::fabs(q[r + j]));
    if (mx == 0) continue;  // zeros stay zeros
    const float inv = 32767.0f / mx, s = mx / 32767.0f;
    for (int j = 0; j < D; ++j) out[r + j] = std::nearbyint(q[r + j] * inv) * s;
  }
  return out;
}

// The P.V of those tasks also rounds its weights to int16 (kernels::pv_rows_q8_0_i16) where the
// kernels have that path for the head dim, one chunk per page (attention.cpp): per chunk the
// rounding is at most s / 2 with s = max p * max |d| / 32767 over the chunk's rows (ops.h). A
// task's p is exp(score - its own max) and the merge scales it by exp(that max - the overall max),
// so against the overall max, output value j of query head h errs by at most
//   sum over pages c of  max_{r in c} p(r) * max_{r in c, b} |d(r, b)| / 65534 * sum_{r in c} |k(r, j)|,
// divided by z = sum_r p(r), with p(r) = exp(score_r - max) over the slots the query sees (0
// elsewhere; a page split between two tasks only lowers its pieces' maxima), k the int8 values and
// d the block scales of every slot of the page. Returns that bound (x 1.05 for the f32 weights the
// rounding starts from) per output value, [n_tok][H][D], with the scores of the queries the engine
// uses (queries_as_scored) in double; zeros where the path is not taken. window: a sliding
// window's length, 0 for none.
inline std::vector<double> pv_i16_bound(const KvCache& c, int layer, const AttnShape& s, const std::vector<float>& q_scored,
                                        const int32_t* qpos, int n_tok, int32_t window = 0) {
  using kernels::block_q8_0;
  using kernels::QK8_0;
  const int H = s.n_head, G = s.n_head / s.n_head_kv, D = s.head_dim, P = c.layout().page_tokens;
  std::vector<double> bound(static_cast<size_t>(n_tok) * H * D, 0.0);
  if (q_scored.empty() || c.layout().dtype != DType::Q8_0 || n_tok >= kAttnPrefillMinTokens ||
      !kernels::has_pv_rows_q8_0_i16(D))
    return bound;
  std::vector<float> k(static_cast<size_t>(D));
  for (int t = 0; t < n_tok; ++t)
    for (int qh = 0; qh < H; ++qh) {
      const int kvh = qh / G;
      const HeadCache& h = c.head(layer, kvh);
      std::vector<double> score(static_cast<size_t>(h.len()), -INFINITY);
      double m = -INFINITY;
      for (int32_t j = 0; j < h.len(); ++j) {
        const int32_t kp = h.pos[static_cast<size_t>(j)];
        if (kp > qpos[t] || (window > 0 && qpos[t] - kp >= window)) continue;
        c.read_k(layer, kvh, j, k.data());
        double d = 0;
        for (int i = 0; i < D; ++i) d += static_cast<double>(q_scored[(static_cast<size_t>(t) * H + qh) * D + i]) * k[i];
        score[static_cast<size_t>(j)] = d * s.scale;
        m = std::max(m, d * s.scale);
      }
      if (m == -INFINITY) continue;
      double z = 0;
      std::vector<double> err(static_cast<size_t>(D), 0.0);
      for (int32_t c0 = 0; c0 < h.len(); c0 += P) {
        const int32_t c1 = std::min(h.len(), c0 + P);
        double pmax = 0, dmax = 0;
        std::vector<double> sum_k(static_cast<size_t>(D), 0.0);
        for (int32_t j = c0; j < c1; ++j) {
          const auto* b = reinterpret_cast<const block_q8_0*>(c.v_row(layer, kvh, j));
          for (int bi = 0; bi < D / QK8_0; ++bi) dmax = std::max(dmax, std::fabs(static_cast<double>(fp16_to_fp32(b[bi].d))));
          const double p = std::exp(score[static_cast<size_t>(j)] - m);  // 0 for slots not seen
          if (p == 0) continue;
          z += p;
          pmax = std::max(pmax, p);
          for (int i = 0; i < D; ++i) sum_k[static_cast<size_t>(i)] += std::abs(b[i / QK8_0].qs[i % QK8_0]);
        }
        for (int i = 0; i < D; ++i) err[static_cast<size_t>(i)] += pmax * dmax / 65534.0 * sum_k[static_cast<size_t>(i)];
      }
      for (int i = 0; i < D; ++i) bound[(static_cast<size_t>(t) * H + qh) * D + i] = 1.05 * err[static_cast<size_t>(i)] / z;
    }
  return bound;
}

}  // namespace kvs::test
