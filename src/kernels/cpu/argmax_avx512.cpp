// Greedy sampling's argmax over 16 lanes (semantics in ops.h): per lane the largest value seen
// and its index, updated where a value is greater (ordered compare: a NaN never wins, and a later
// equal value does not replace an earlier one); then the largest lane value and, among the lanes
// that hold it, the smallest index. The scalar loop this replaces took ~90 us per 49,152-entry
// row, 16 of them per step of a 16-sequence batch on the scheduler's thread (BENCHMARKS.md,
// issue 25).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/cpu/impl.h"
// clang-format off
#include "kernels/cpu/avx512_begin.h"
#include "kernels/cpu/simd_avx512.h"
// clang-format on

namespace kvs::kernels::avx512 {

int64_t argmax_f32(const float* x, int64_t n) {
  // Four (value, index) accumulators, 64 values a pass: with one, each compare waited for the
  // previous blend (~5 cycles a vector; ~15 us a 49,152-entry row). Each accumulator lane keeps
  // the first of its largest values; the reduction below takes the smallest index among all the
  // lanes holding the largest value, so the answer is still the first largest value.
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 best[4] = {ninf, ninf, ninf, ninf};
  __m512i bidx[4];
  __m512i idx[4];
  for (int k = 0; k < 4; ++k) {
    bidx[k] = _mm512_set1_epi32(-1);
    idx[k] = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                              _mm512_set1_epi32(16 * k));
  }
  auto update = [](__m512& b, __m512i& bi, __m512 v, __m512i i, __mmask16 valid) {
    const __mmask16 gt = _mm512_mask_cmp_ps_mask(valid, v, b, _CMP_GT_OQ);
    b = _mm512_mask_mov_ps(b, gt, v);
    bi = _mm512_mask_mov_epi32(bi, gt, i);
  };
  const __m512i step64 = _mm512_set1_epi32(64), step16 = _mm512_set1_epi32(16);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int k = 0; k < 4; ++k) {
      update(best[k], bidx[k], _mm512_loadu_ps(x + i + 16 * k), idx[k], 0xFFFF);
      idx[k] = _mm512_add_epi32(idx[k], step64);
    }
  }
  // The rest, 16 at a time then masked, into accumulator 0 (its index vector moved to i).
  idx[0] = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                            _mm512_set1_epi32(static_cast<int>(i)));
  for (; i + 16 <= n; i += 16) {
    update(best[0], bidx[0], _mm512_loadu_ps(x + i), idx[0], 0xFFFF);
    idx[0] = _mm512_add_epi32(idx[0], step16);
  }
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    update(best[0], bidx[0], _mm512_mask_loadu_ps(ninf, tail, x + i), idx[0], tail);
  }
  const float mx = hmax_ps(_mm512_max_ps(_mm512_max_ps(best[0], best[1]), _mm512_max_ps(best[2], best[3])));
  const __m512 vmx = _mm512_set1_ps(mx);
  int32_t found = std::numeric_limits<int32_t>::max();
  for (int k = 0; k < 4; ++k) {
    const __mmask16 at = _mm512_cmp_ps_mask(best[k], vmx, _CMP_EQ_OQ) & _mm512_cmpge_epi32_mask(bidx[k], _mm512_setzero_si512());
    if (at) found = std::min(found, _mm512_mask_reduce_min_epi32(at, bidx[k]));
  }
  // Nothing above -inf (every value -inf or NaN): the portable loop's answer (the first -inf, or 0).
  if (found == std::numeric_limits<int32_t>::max()) return generic::argmax_f32(x, n);
  return found;
}

}  // namespace kvs::kernels::avx512

#include "kernels/cpu/avx512_end.h"
