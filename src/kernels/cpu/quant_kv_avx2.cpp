// AVX2 quantisers of KV cache rows (KvCache::write_row: one K or V row per call, every decode step
// and prefill token), bit-exact with the scalar quantize_row_q8_0 / quantize_row_q4_0 (quant.cpp,
// llama.cpp's quantize_row_*_ref) that the portable table calls: the same scalar scale arithmetic,
// x * id (+ 8.5 for Q4_0) per element with no a*b+c fusion (this file is compiled with
// -ffp-contract=off, src/CMakeLists.txt), the reference's rounding — std::round, ties away from
// zero, for Q8_0; truncation for Q4_0 — and its clamping of out-of-range and NaN values.
// The scalar Q8_0 row (64 values) costs ~0.5 us, mostly in 64 roundf calls, at every append of a
// decode token's K and V rows.
//
// Dimension legend: n = row length (a multiple of 32), b = block, j = element in a block.
#include <cstdint>

#include "kernels/cpu/impl.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/quant.h"

namespace kvs::kernels::avx2 {
namespace {

// max |x| over a block; a NaN element is skipped, as std::max(amax, fabs(x)) skips it
// (_mm256_max_ps returns its second operand when either is NaN).
inline float block_absmax(const float* x) {
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < 32; j += 8) m = _mm256_max_ps(abs_ps(_mm256_loadu_ps(x + j)), m);
  return hmax_ps(m);
}

// std::round: ties away from zero. t = trunc(v) and v - t are exact, so |v - t| >= 0.5 decides
// the tie exactly (adding 0.5 and truncating would not: 0.49999997f + 0.5f rounds up to 1).
// NaN stays NaN.
inline __m256 round_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 up = _mm256_cmp_ps(abs_ps(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));  // +-1
  return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

// truncate_to_int8 (quant_round.h) of 8 values: NaN and v <= -129 -> -128, v >= 128 -> 127, else
// truncated toward zero. (max_ps returns -128, its second operand, for NaN.)
inline __m256i truncate_i8(__m256 v) {
  v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-128.0f)), _mm256_set1_ps(127.0f));
  return _mm256_cvttps_epi32(v);
}

}  // namespace

void quant_kv_q8_0(const float* x, void* y, int64_t n) {
  auto* o = static_cast<block_q8_0*>(y);
  for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
    const float d = block_absmax(x) / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    o[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    const __m256 m = _mm256_set1_ps(id);
    __m256i q[4];
    for (int c = 0; c < 4; ++c) q[c] = truncate_i8(round_away(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * c), m)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o[b].qs), pack_i8(q[0], q[1], q[2], q[3]));
  }
}

void quant_kv_q4_0(const float* x, void* y, int64_t n) {
  auto* o = static_cast<block_q4_0*>(y);
  for (int64_t b = 0; b < n / QK4_0; ++b, x += QK4_0) {
    // signed_absmax: the first element of the largest magnitude (0 when every one is 0 or NaN).
    const float amax = block_absmax(x);
    float mx = 0.0f;
    if (amax > 0.0f) {
      const __m256 a = _mm256_set1_ps(amax);
      uint32_t hit = 0;
      for (int c = 0; c < 4; ++c)
        hit |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + 8 * c)), a, _CMP_EQ_OQ)))
               << (8 * c);
      mx = x[__builtin_ctz(hit)];
    }
    const float d = mx / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    o[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    const __m256 m = _mm256_set1_ps(id), half = _mm256_set1_ps(8.5f);
    __m256i q[4];
    for (int c = 0; c < 4; ++c)
      q[c] = _mm256_min_epi32(truncate_i8(_mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * c), m), half)),
                              _mm256_set1_epi32(15));
    // qs[j] = q[j] & 15 | (q[j + 16] & 15) << 4 (store_nibbles).
    const __m256i p = pack_i8(q[0], q[1], q[2], q[3]);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(_mm256_castsi256_si128(p), m4);
    const __m128i hi = _mm_and_si128(_mm256_extracti128_si256(p, 1), m4);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o[b].qs), _mm_or_si128(lo, _mm_slli_epi16(hi, 4)));
  }
}

}  // namespace kvs::kernels::avx2
