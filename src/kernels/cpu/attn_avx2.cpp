// AVX2 attention row kernels (semantics in ops.h). qk: four rows at a time per query, four
// accumulators reduced together; pv: the query's accumulator row is updated in chunks of 64 dims
// held in registers. Head dims that are not a multiple of 8 take the portable loops.
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

template <typename KT>
void qk_rows(const float* Q, int nq, const KT* K, int n, int D, float scale, float* out, int64_t ldo) {
  const __m128 vs = _mm_set1_ps(scale);
  for (int q = 0; q < nq; ++q) {
    const float* qv = Q + static_cast<int64_t>(q) * D;
    float* o = out + q * ldo;
    int r = 0;
    for (; r + 4 <= n; r += 4) {
      const KT* k0 = K + static_cast<int64_t>(r) * D;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int d = 0; d < D; d += 8) {
        const __m256 x = _mm256_loadu_ps(qv + d);
        a0 = _mm256_fmadd_ps(x, load8(k0 + d), a0);
        a1 = _mm256_fmadd_ps(x, load8(k0 + D + d), a1);
        a2 = _mm256_fmadd_ps(x, load8(k0 + 2 * D + d), a2);
        a3 = _mm256_fmadd_ps(x, load8(k0 + 3 * D + d), a3);
      }
      _mm_storeu_ps(o + r, _mm_mul_ps(hsum4(a0, a1, a2, a3), vs));
    }
    for (; r < n; ++r) {
      const KT* k0 = K + static_cast<int64_t>(r) * D;
      __m256 a = _mm256_setzero_ps();
      for (int d = 0; d < D; d += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(qv + d), load8(k0 + d), a);
      o[r] = hsum_ps(a) * scale;
    }
  }
}

// One query's accumulator chunk of NC x 8 dims, held in registers across all rows (NC is a
// compile-time constant so the array never spills to the stack).
template <int NC, typename VT>
inline void pv_chunk(const float* p, const VT* V, int n, int D, float* a) {
  __m256 r[NC];
#pragma GCC unroll 8
  for (int i = 0; i < NC; ++i) r[i] = _mm256_loadu_ps(a + 8 * i);
  for (int j = 0; j < n; ++j) {
    if (p[j] == 0.0f) continue;
    const __m256 w = _mm256_set1_ps(p[j]);
    const VT* v = V + static_cast<int64_t>(j) * D;
#pragma GCC unroll 8
    for (int i = 0; i < NC; ++i) r[i] = _mm256_fmadd_ps(w, load8(v + 8 * i), r[i]);
  }
#pragma GCC unroll 8
  for (int i = 0; i < NC; ++i) _mm256_storeu_ps(a + 8 * i, r[i]);
}

template <typename VT>
void pv_rows(const float* P, int nq, int64_t ldp, const VT* V, int n, int D, float* acc) {
  for (int q = 0; q < nq; ++q) {
    const float* p = P + q * ldp;
    float* a = acc + static_cast<int64_t>(q) * D;
    int d0 = 0;
    for (; d0 + 64 <= D; d0 += 64) pv_chunk<8>(p, V + d0, n, D, a + d0);
    switch ((D - d0) / 8) {
      case 0: break;
      case 1: pv_chunk<1>(p, V + d0, n, D, a + d0); break;
      case 2: pv_chunk<2>(p, V + d0, n, D, a + d0); break;
      case 3: pv_chunk<3>(p, V + d0, n, D, a + d0); break;
      case 4: pv_chunk<4>(p, V + d0, n, D, a + d0); break;
      case 5: pv_chunk<5>(p, V + d0, n, D, a + d0); break;
      case 6: pv_chunk<6>(p, V + d0, n, D, a + d0); break;
      case 7: pv_chunk<7>(p, V + d0, n, D, a + d0); break;
    }
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
