// AVX2+FMA version of kvzip_fold_max (compiled with -mavx2 -mfma -mf16c; called only after the
// CPU check in kvzip_fold.cpp). Blocks of 32 keys kept in four registers across all the rows, so
// `best` is read and written once per tile; the tail (n % 8) through the scalar fma.
#include <immintrin.h>

#include "press/math/kvzip_fold.h"

namespace kvs {

namespace {

// max over rows of fma(S[i][j], mul[i], -sub[i]) for the 8 * R keys at column j0, folded into best.
template <int R>
void fold_block(const float* S, int64_t lds, int nrows, int64_t j0, const float* mul, const float* sub, float* best) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_loadu_ps(best + j0 + 8 * r);
  for (int i = 0; i < nrows; ++i) {
    const float* row = S + static_cast<int64_t>(i) * lds + j0;
    const __m256 a = _mm256_set1_ps(mul[i]), b = _mm256_set1_ps(sub[i]);
    // max(acc, x) with acc as the second operand keeps best when x is NaN, like the scalar loop.
    for (int r = 0; r < R; ++r) acc[r] = _mm256_max_ps(_mm256_fmsub_ps(_mm256_loadu_ps(row + 8 * r), a, b), acc[r]);
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(best + j0 + 8 * r, acc[r]);
}

}  // namespace

void kvzip_fold_max_avx2(const float* S, int64_t lds, int nrows, int64_t n, const float* mul, const float* sub,
                         float* best) {
  int64_t j = 0;
  for (; j + 32 <= n; j += 32) fold_block<4>(S, lds, nrows, j, mul, sub, best);
  for (; j + 8 <= n; j += 8) fold_block<1>(S, lds, nrows, j, mul, sub, best);
  for (; j < n; ++j) {
    float m = best[j];
    for (int i = 0; i < nrows; ++i) {
      // _mm_fmsub_ss: one rounding, as in the vector lanes.
      const float x = _mm_cvtss_f32(_mm_fmsub_ss(_mm_set_ss(S[static_cast<int64_t>(i) * lds + j]), _mm_set_ss(mul[i]),
                                                 _mm_set_ss(sub[i])));
      m = m < x ? x : m;
    }
    best[j] = m;
  }
}

}  // namespace kvs
