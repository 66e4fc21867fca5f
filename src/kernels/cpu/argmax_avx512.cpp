// Greedy sampling's argmax over 16 lanes (semantics in ops.h): per lane the largest value seen
// and its index, updated where a value is greater (ordered compare: a NaN never wins, and a later
// equal value does not replace an earlier one); then the largest lane value and, among the lanes
// that hold it, the smallest index. The scalar loop this replaces took ~90 us per 49,152-entry
// row, 16 of them per step of a 16-sequence batch on the scheduler's thread (BENCHMARKS.md,
// issue 25).
#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "kernels/cpu/impl.h"
// clang-format off
#include "kernels/cpu/avx512_begin.h"
#include "kernels/cpu/simd_avx512.h"
// clang-format on

namespace kvs::kernels::avx512 {

int64_t argmax_f32(const float* x, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 best = ninf;
  __m512i bidx = _mm512_set1_epi32(-1);
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i step = _mm512_set1_epi32(16);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __mmask16 gt = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
    best = _mm512_mask_mov_ps(best, gt, v);
    bidx = _mm512_mask_mov_epi32(bidx, gt, idx);
    idx = _mm512_add_epi32(idx, step);
  }
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_mask_loadu_ps(ninf, tail, x + i);
    const __mmask16 gt = _mm512_mask_cmp_ps_mask(tail, v, best, _CMP_GT_OQ);
    best = _mm512_mask_mov_ps(best, gt, v);
    bidx = _mm512_mask_mov_epi32(bidx, gt, idx);
  }
  const float mx = hmax_ps(best);
  const __mmask16 at = _mm512_cmp_ps_mask(best, _mm512_set1_ps(mx), _CMP_EQ_OQ) &
                       _mm512_cmpge_epi32_mask(bidx, _mm512_setzero_si512());
  // Nothing above -inf (every value -inf or NaN): the portable loop's answer (the first -inf, or 0).
  if (at == 0) return generic::argmax_f32(x, n);
  return _mm512_mask_reduce_min_epi32(at, bidx);
}

}  // namespace kvs::kernels::avx512

#include "kernels/cpu/avx512_end.h"
