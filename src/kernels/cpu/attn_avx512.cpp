// AVX-512 attention row kernels (semantics in ops.h: qk_rows_*, pv_rows_*), the decode attention's
// inner loops. What makes them faster than the AVX2 ones is not only the width: every K or V row
// is loaded (and, for F16 pages, converted) once per block of up to four queries, where the AVX2
// loops convert it again for each query of the GQA group.
//  - qk: a block of QB queries x 4 rows, one accumulator per pair (QB x 4 <= 16 registers), the
//    rows' 16-value pieces loaded once for the QB queries; the 4 sums of each query reduced
//    together (unpack/add transposes, 13 operations for 4 sums).
//  - pv: per 64-dim piece of the head, a block of QB queries' accumulators (QB x NC registers)
//    held across all rows; each row's piece loaded once for the QB queries.
// Head dims that are not a multiple of 16 take the AVX2 loops (every supported model's is).
//
// Dimension legend: nq = queries, n = rows in the block, D = head dim; Q [nq][D], K/V [n][D],
// out/P rows of stride ldo/ldp, acc [nq][D]; QB = queries per block, NC = 16-value pieces held.
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/impl.h"
// clang-format off
#include "kernels/cpu/avx512_begin.h"
#include "kernels/cpu/simd_avx512.h"
// clang-format on

namespace kvs::kernels::avx512 {
namespace {

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) { return _mm512_cvtph_ps(loadu256(p)); }

// {sum(a), sum(b), sum(c), sum(d)}: pairwise transposes within the 128-bit lanes, then the four
// lanes folded.
inline __m128 sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));  // per lane: a02 b02 a13 b13
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512 abcd = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))),
                                    _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))));
  const __m512 h = _mm512_add_ps(abcd, _mm512_shuffle_f32x4(abcd, abcd, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 s = _mm512_add_ps(h, _mm512_shuffle_f32x4(h, h, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_castps512_ps128(s);
}

// Scores of QB queries (rows of Q, stride D) against rows [0, n) of K: out rows of stride ldo.
template <int QB, typename KT>
void qk_block(const float* Q, const KT* K, int n, int D, float scale, float* out, int64_t ldo) {
  const __m128 vs = _mm_set1_ps(scale);
  int r = 0;
  for (; r + 4 <= n; r += 4) {
    const KT* k0 = K + static_cast<int64_t>(r) * D;
    __m512 acc[QB][4];
#pragma GCC unroll 4
    for (int q = 0; q < QB; ++q)
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) acc[q][i] = _mm512_setzero_ps();
    for (int d = 0; d < D; d += 16) {
      const __m512 x0 = load16(k0 + d), x1 = load16(k0 + D + d), x2 = load16(k0 + 2 * D + d),
                   x3 = load16(k0 + 3 * D + d);
#pragma GCC unroll 4
      for (int q = 0; q < QB; ++q) {
        const __m512 qv = _mm512_loadu_ps(Q + static_cast<int64_t>(q) * D + d);
        acc[q][0] = _mm512_fmadd_ps(qv, x0, acc[q][0]);
        acc[q][1] = _mm512_fmadd_ps(qv, x1, acc[q][1]);
        acc[q][2] = _mm512_fmadd_ps(qv, x2, acc[q][2]);
        acc[q][3] = _mm512_fmadd_ps(qv, x3, acc[q][3]);
      }
    }
#pragma GCC unroll 4
    for (int q = 0; q < QB; ++q)
      _mm_storeu_ps(out + q * ldo + r, _mm_mul_ps(sum4(acc[q][0], acc[q][1], acc[q][2], acc[q][3]), vs));
  }
  for (; r < n; ++r) {
    const KT* k0 = K + static_cast<int64_t>(r) * D;
    __m512 acc[QB];
#pragma GCC unroll 4
    for (int q = 0; q < QB; ++q) acc[q] = _mm512_setzero_ps();
    for (int d = 0; d < D; d += 16) {
      const __m512 x = load16(k0 + d);
#pragma GCC unroll 4
      for (int q = 0; q < QB; ++q)
        acc[q] = _mm512_fmadd_ps(_mm512_loadu_ps(Q + static_cast<int64_t>(q) * D + d), x, acc[q]);
    }
#pragma GCC unroll 4
    for (int q = 0; q < QB; ++q) out[q * ldo + r] = reduce_ps(acc[q]) * scale;
  }
}

template <typename KT>
void qk_rows(const float* Q, int nq, const KT* K, int n, int D, float scale, float* out, int64_t ldo) {
  int q = 0;
  for (; q + 4 <= nq; q += 4) qk_block<4>(Q + static_cast<int64_t>(q) * D, K, n, D, scale, out + q * ldo, ldo);
  const float* Qt = Q + static_cast<int64_t>(q) * D;
  float* ot = out + q * ldo;
  switch (nq - q) {
    case 1: qk_block<1>(Qt, K, n, D, scale, ot, ldo); break;
    case 2: qk_block<2>(Qt, K, n, D, scale, ot, ldo); break;
    case 3: qk_block<3>(Qt, K, n, D, scale, ot, ldo); break;
    default: break;
  }
}

// acc rows (stride D) of QB queries, dims [0, 16 NC) of the piece at V, += P rows (stride ldp)
// times the rows of V (stride D). A row whose QB probabilities are all zero (masked) is skipped.
template <int QB, int NC, typename VT>
void pv_block(const float* P, int64_t ldp, const VT* V, int n, int D, float* acc) {
  __m512 a[QB][NC];
#pragma GCC unroll 4
  for (int q = 0; q < QB; ++q)
#pragma GCC unroll 4
    for (int i = 0; i < NC; ++i) a[q][i] = _mm512_loadu_ps(acc + static_cast<int64_t>(q) * D + 16 * i);
  for (int j = 0; j < n; ++j) {
    bool any = false;
#pragma GCC unroll 4
    for (int q = 0; q < QB; ++q) any |= P[q * ldp + j] != 0.0f;
    if (!any) continue;
    const VT* v = V + static_cast<int64_t>(j) * D;
    __m512 x[NC];
#pragma GCC unroll 4
    for (int i = 0; i < NC; ++i) x[i] = load16(v + 16 * i);
#pragma GCC unroll 4
    for (int q = 0; q < QB; ++q) {
      const __m512 w = _mm512_set1_ps(P[q * ldp + j]);
#pragma GCC unroll 4
      for (int i = 0; i < NC; ++i) a[q][i] = _mm512_fmadd_ps(w, x[i], a[q][i]);
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < QB; ++q)
#pragma GCC unroll 4
    for (int i = 0; i < NC; ++i) _mm512_storeu_ps(acc + static_cast<int64_t>(q) * D + 16 * i, a[q][i]);
}

template <int NC, typename VT>
void pv_piece(const float* P, int nq, int64_t ldp, const VT* V, int n, int D, float* acc) {
  int q = 0;
  for (; q + 4 <= nq; q += 4) pv_block<4, NC>(P + q * ldp, ldp, V, n, D, acc + static_cast<int64_t>(q) * D);
  const float* Pt = P + q * ldp;
  float* at = acc + static_cast<int64_t>(q) * D;
  switch (nq - q) {
    case 1: pv_block<1, NC>(Pt, ldp, V, n, D, at); break;
    case 2: pv_block<2, NC>(Pt, ldp, V, n, D, at); break;
    case 3: pv_block<3, NC>(Pt, ldp, V, n, D, at); break;
    default: break;
  }
}

template <typename VT>
void pv_rows(const float* P, int nq, int64_t ldp, const VT* V, int n, int D, float* acc) {
  int d0 = 0;
  for (; d0 + 64 <= D; d0 += 64) pv_piece<4>(P, nq, ldp, V + d0, n, D, acc + d0);
  switch ((D - d0) / 16) {
    case 1: pv_piece<1>(P, nq, ldp, V + d0, n, D, acc + d0); break;
    case 2: pv_piece<2>(P, nq, ldp, V + d0, n, D, acc + d0); break;
    case 3: pv_piece<3>(P, nq, ldp, V + d0, n, D, acc + d0); break;
    default: break;
  }
}

}  // namespace

void qk_rows_f32(const float* Q, int nq, const float* K, int n, int D, float scale, float* out, int64_t ldo) {
  if (D % 16 != 0) return avx2::qk_rows_f32(Q, nq, K, n, D, scale, out, ldo);
  qk_rows(Q, nq, K, n, D, scale, out, ldo);
}
void qk_rows_f16(const float* Q, int nq, const uint16_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  if (D % 16 != 0) return avx2::qk_rows_f16(Q, nq, K, n, D, scale, out, ldo);
  qk_rows(Q, nq, K, n, D, scale, out, ldo);
}
void pv_rows_f32(const float* P, int nq, int64_t ldp, const float* V, int n, int D, float* acc) {
  if (D % 16 != 0) return avx2::pv_rows_f32(P, nq, ldp, V, n, D, acc);
  pv_rows(P, nq, ldp, V, n, D, acc);
}
void pv_rows_f16(const float* P, int nq, int64_t ldp, const uint16_t* V, int n, int D, float* acc) {
  if (D % 16 != 0) return avx2::pv_rows_f16(P, nq, ldp, V, n, D, acc);
  pv_rows(P, nq, ldp, V, n, D, acc);
}

}  // namespace kvs::kernels::avx512

#include "kernels/cpu/avx512_end.h"
