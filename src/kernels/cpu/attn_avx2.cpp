// AVX2 attention row kernels (semantics in ops.h), as the AVX-512 ones (attn_avx512.cpp) in
// 8 lanes: each K/V row is loaded (and converted from F16) once per pair of queries of the GQA
// group. qk: 2 queries x 4 rows, the four sums of a query reduced together; pv: 2 queries'
// accumulators for a 32-dim piece held in registers across all rows. Head dims that are not a
// multiple of 8 take the portable loops.
//
// Dimension legend: nq = queries, n = rows in the block, D = head dim; Q [nq][D], K/V [n][D],
// out/P rows of stride ldo/ldp, acc [nq][D].
#include "kernels/cpu/impl.h"
#include "kernels/cpu/simd_avx2.h"

namespace kvs::kernels::avx2 {
namespace {

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return f16x8_to_ps(p); }

// Horizontal sums of four vectors -> one __m128 {s0, s1, s2, s3}.
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_hadd_ps(a, b);  // a01 a23 b01 b23 | a45 a67 b45 b67
  const __m256 cd = _mm256_hadd_ps(c, d);
  const __m256 abcd = _mm256_hadd_ps(ab, cd);  // a0123 b0123 c0123 d0123 | a4567 ...
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// Scores of QB queries (rows of Q, stride D) against rows [0, n) of K, out rows of stride ldo:
// 4 rows at a time, each row's 8-value pieces loaded (converted from F16) once for the QB queries;
// QB x 4 accumulators + 4 rows = 13 of the 16 registers at QB = 2.
template <int QB, typename KT>
void qk_block(const float* Q, const KT* K, int n, int D, float scale, float* out, int64_t ldo) {
  const __m128 vs = _mm_set1_ps(scale);
  int r = 0;
  for (; r + 4 <= n; r += 4) {
    const KT* k0 = K + static_cast<int64_t>(r) * D;
    __m256 acc[QB][4];
#pragma GCC unroll 2
    for (int q = 0; q < QB; ++q)
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) acc[q][i] = _mm256_setzero_ps();
    for (int d = 0; d < D; d += 8) {
      const __m256 x0 = load8(k0 + d), x1 = load8(k0 + D + d), x2 = load8(k0 + 2 * D + d), x3 = load8(k0 + 3 * D + d);
#pragma GCC unroll 2
      for (int q = 0; q < QB; ++q) {
        const __m256 qv = _mm256_loadu_ps(Q + static_cast<int64_t>(q) * D + d);
        acc[q][0] = _mm256_fmadd_ps(qv, x0, acc[q][0]);
        acc[q][1] = _mm256_fmadd_ps(qv, x1, acc[q][1]);
        acc[q][2] = _mm256_fmadd_ps(qv, x2, acc[q][2]);
        acc[q][3] = _mm256_fmadd_ps(qv, x3, acc[q][3]);
      }
    }
#pragma GCC unroll 2
    for (int q = 0; q < QB; ++q)
      _mm_storeu_ps(out + q * ldo + r, _mm_mul_ps(hsum4(acc[q][0], acc[q][1], acc[q][2], acc[q][3]), vs));
  }
  for (; r < n; ++r) {
    const KT* k0 = K + static_cast<int64_t>(r) * D;
    __m256 acc[QB];
#pragma GCC unroll 2
    for (int q = 0; q < QB; ++q) acc[q] = _mm256_setzero_ps();
    for (int d = 0; d < D; d += 8) {
      const __m256 x = load8(k0 + d);
#pragma GCC unroll 2
      for (int q = 0; q < QB; ++q) acc[q] = _mm256_fmadd_ps(_mm256_loadu_ps(Q + static_cast<int64_t>(q) * D + d), x, acc[q]);
    }
#pragma GCC unroll 2
    for (int q = 0; q < QB; ++q) out[q * ldo + r] = hsum_ps(acc[q]) * scale;
  }
}

template <typename KT>
void qk_rows(const float* Q, int nq, const KT* K, int n, int D, float scale, float* out, int64_t ldo) {
  int q = 0;
  for (; q + 2 <= nq; q += 2) qk_block<2>(Q + static_cast<int64_t>(q) * D, K, n, D, scale, out + q * ldo, ldo);
  if (q < nq) qk_block<1>(Q + static_cast<int64_t>(q) * D, K, n, D, scale, out + q * ldo, ldo);
}

// acc rows (stride D) of QB queries, dims [0, 8 NC) of the piece at V, += P rows (stride ldp)
// times the rows of V (stride D), the accumulators held in registers across all rows (QB x NC +
// NC <= 12 of 16 registers); a row whose QB probabilities are all zero (masked) is skipped.
template <int QB, int NC, typename VT>
void pv_block(const float* P, int64_t ldp, const VT* V, int n, int D, float* acc) {
  __m256 a[QB][NC];
#pragma GCC unroll 2
  for (int q = 0; q < QB; ++q)
#pragma GCC unroll 4
    for (int i = 0; i < NC; ++i) a[q][i] = _mm256_loadu_ps(acc + static_cast<int64_t>(q) * D + 8 * i);
  for (int j = 0; j < n; ++j) {
    bool any = false;
#pragma GCC unroll 2
    for (int q = 0; q < QB; ++q) any |= P[q * ldp + j] != 0.0f;
    if (!any) continue;
    const VT* v = V + static_cast<int64_t>(j) * D;
    __m256 x[NC];
#pragma GCC unroll 4
    for (int i = 0; i < NC; ++i) x[i] = load8(v + 8 * i);
#pragma GCC unroll 2
    for (int q = 0; q < QB; ++q) {
      const __m256 w = _mm256_set1_ps(P[q * ldp + j]);
#pragma GCC unroll 4
      for (int i = 0; i < NC; ++i) a[q][i] = _mm256_fmadd_ps(w, x[i], a[q][i]);
    }
  }
#pragma GCC unroll 2
  for (int q = 0; q < QB; ++q)
#pragma GCC unroll 4
    for (int i = 0; i < NC; ++i) _mm256_storeu_ps(acc + static_cast<int64_t>(q) * D + 8 * i, a[q][i]);
}

template <int NC, typename VT>
void pv_piece(const float* P, int nq, int64_t ldp, const VT* V, int n, int D, float* acc) {
  int q = 0;
  for (; q + 2 <= nq; q += 2) pv_block<2, NC>(P + q * ldp, ldp, V, n, D, acc + static_cast<int64_t>(q) * D);
  if (q < nq) pv_block<1, NC>(P + q * ldp, ldp, V, n, D, acc + static_cast<int64_t>(q) * D);
}

template <typename VT>
void pv_rows(const float* P, int nq, int64_t ldp, const VT* V, int n, int D, float* acc) {
  int d0 = 0;
  for (; d0 + 32 <= D; d0 += 32) pv_piece<4>(P, nq, ldp, V + d0, n, D, acc + d0);
  switch ((D - d0) / 8) {
    case 1: pv_piece<1>(P, nq, ldp, V + d0, n, D, acc + d0); break;
    case 2: pv_piece<2>(P, nq, ldp, V + d0, n, D, acc + d0); break;
    case 3: pv_piece<3>(P, nq, ldp, V + d0, n, D, acc + d0); break;
    default: break;
  }
}

}  // namespace

// Every supported model has D % 8 == 0 (head dims 64, 80, 96, 128, ...); the rest is portable.
void qk_rows_f32(const float* Q, int nq, const float* K, int n, int D, float scale, float* out, int64_t ldo) {
  if (D % 8 != 0) return generic::qk_rows_f32(Q, nq, K, n, D, scale, out, ldo);
  qk_rows(Q, nq, K, n, D, scale, out, ldo);
}
void qk_rows_f16(const float* Q, int nq, const uint16_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  if (D % 8 != 0) return generic::qk_rows_f16(Q, nq, K, n, D, scale, out, ldo);
  qk_rows(Q, nq, K, n, D, scale, out, ldo);
}
void pv_rows_f32(const float* P, int nq, int64_t ldp, const float* V, int n, int D, float* acc) {
  if (D % 8 != 0) return generic::pv_rows_f32(P, nq, ldp, V, n, D, acc);
  pv_rows(P, nq, ldp, V, n, D, acc);
}
void pv_rows_f16(const float* P, int nq, int64_t ldp, const uint16_t* V, int n, int D, float* acc) {
  if (D % 8 != 0) return generic::pv_rows_f16(P, nq, ldp, V, n, D, acc);
  pv_rows(P, nq, ldp, V, n, D, acc);
}

}  // namespace kvs::kernels::avx2
