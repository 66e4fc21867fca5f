// Portable attention row kernels (semantics in ops.h): plain float loops over the rows of one KV
// page for every query of a GQA group.
//
// Dimension legend: nq = queries, n = rows in the block, D = head dim; Q [nq][D], K/V [n][D],
// out/P rows of stride ldo/ldp, acc [nq][D].
#include "kernels/cpu/generic_fp16.h"
#include "kernels/cpu/impl.h"

namespace kvs::kernels::generic {
namespace {

inline float load(const float* p) { return *p; }
inline float load(const uint16_t* p) { return h2f_vec(*p); }

template <typename KT>
void qk_rows(const float* Q, int nq, const KT* K, int n, int D, float scale, float* out, int64_t ldo) {
  for (int q = 0; q < nq; ++q)
    for (int r = 0; r < n; ++r) {
      const float* qv = Q + static_cast<int64_t>(q) * D;
      const KT* k = K + static_cast<int64_t>(r) * D;
      float s = 0;
      for (int d = 0; d < D; ++d) s += qv[d] * load(k + d);
      out[q * ldo + r] = s * scale;
    }
}

template <typename VT>
void pv_rows(const float* P, int nq, int64_t ldp, const VT* V, int n, int D, float* acc) {
  for (int q = 0; q < nq; ++q) {
    float* a = acc + static_cast<int64_t>(q) * D;
    for (int r = 0; r < n; ++r) {
      const float p = P[q * ldp + r];
      const VT* v = V + static_cast<int64_t>(r) * D;
      for (int d = 0; d < D; ++d) a[d] += p * load(v + d);
    }
  }
}

}  // namespace

void qk_rows_f32(const float* Q, int nq, const float* K, int n, int D, float scale, float* out, int64_t ldo) {
  qk_rows(Q, nq, K, n, D, scale, out, ldo);
}
void qk_rows_f16(const float* Q, int nq, const uint16_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  qk_rows(Q, nq, K, n, D, scale, out, ldo);
}
void pv_rows_f32(const float* P, int nq, int64_t ldp, const float* V, int n, int D, float* acc) {
  pv_rows(P, nq, ldp, V, n, D, acc);
}
void pv_rows_f16(const float* P, int nq, int64_t ldp, const uint16_t* V, int n, int D, float* acc) {
  pv_rows(P, nq, ldp, V, n, D, acc);
}

}  // namespace kvs::kernels::generic
