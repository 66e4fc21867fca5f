// Test helper: the queries a decode over Q8_0 pages actually scores with. Its Q.K rounds each query
// to int16 once per task (kernels::prepare_queries_q8_0, ops.h: s = max|q| / 32767, qi =
// round-half-even(q * (32767 / max|q|)), the query becomes s * qi), where the kernels have that
// path (the AVX-512 table, head dim 64) and the batch is decode-sized. A reference fed these
// queries matches the engine as tightly as with float queries; the kernel tests
// (tests/kernels/attn_q8_0_prepared_test.cpp) bound the rounding itself.
#pragma once
#include <cmath>
#include <vector>

#include "kernels/ops.h"
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

}  // namespace kvs::test
