// Greedy sampling's argmax over 16 lanes (semantics in ops.h): per lane the largest value seen
// and its index, updated where a value is greater (ordered compare: a NaN never wins, and a later
// equal value does not replace an earlier one); then the largest lane value and, among the lanes
// that hold it, the smallest index. A scalar loop takes ~90 us per 49,152-entry row, one per
// sequence of a batched step on the scheduler's thread.
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
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  // Named, not arrays: GCC kept arrays of them in memory, which made the loop slower than one chain.
  __m512 b0 = ninf, b1 = ninf, b2 = ninf, b3 = ninf;
  const __m512i none = _mm512_set1_epi32(-1);
  __m512i j0 = none, j1 = none, j2 = none, j3 = none;
  __m512i i0 = lane, i1 = _mm512_add_epi32(lane, _mm512_set1_epi32(16)), i2 = _mm512_add_epi32(lane, _mm512_set1_epi32(32)),
          i3 = _mm512_add_epi32(lane, _mm512_set1_epi32(48));
  auto update = [](__m512& b, __m512i& bi, __m512 v, __m512i i, __mmask16 valid) {
    const __mmask16 gt = _mm512_mask_cmp_ps_mask(valid, v, b, _CMP_GT_OQ);
    b = _mm512_mask_mov_ps(b, gt, v);
    bi = _mm512_mask_mov_epi32(bi, gt, i);
  };
  const __m512i step64 = _mm512_set1_epi32(64), step16 = _mm512_set1_epi32(16);
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    update(b0, j0, _mm512_loadu_ps(x + i), i0, 0xFFFF);
    update(b1, j1, _mm512_loadu_ps(x + i + 16), i1, 0xFFFF);
    update(b2, j2, _mm512_loadu_ps(x + i + 32), i2, 0xFFFF);
    update(b3, j3, _mm512_loadu_ps(x + i + 48), i3, 0xFFFF);
    i0 = _mm512_add_epi32(i0, step64);
    i1 = _mm512_add_epi32(i1, step64);
    i2 = _mm512_add_epi32(i2, step64);
    i3 = _mm512_add_epi32(i3, step64);
  }
  // The rest, 16 at a time then masked, into accumulator 0 (i0 is at i already).
  for (; i + 16 <= n; i += 16) {
    update(b0, j0, _mm512_loadu_ps(x + i), i0, 0xFFFF);
    i0 = _mm512_add_epi32(i0, step16);
  }
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    update(b0, j0, _mm512_mask_loadu_ps(ninf, tail, x + i), i0, tail);
  }
  const __m512 best[4] = {b0, b1, b2, b3};
  const __m512i bidx[4] = {j0, j1, j2, j3};
  const float mx = hmax_ps(_mm512_max_ps(_mm512_max_ps(b0, b1), _mm512_max_ps(b2, b3)));
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
