// AVX-512 row kernels between the weight tiles of a decode step: silu_mul (the feed-forward
// block's gate) and quant_act_q8_0 (a matmul's input rounded to Q8_0 for the integer tiles).
// Semantics in ops.h / quant.h; both are the AVX2 kernels' results, lane for lane.
//
// Why: at 16 sequences a step runs these 30 and 120 times, a visible share of the step with
// 8-lane kernels (docs/benchmarks/issue25-server-step-5-intel-2026-11-30.md).
//
// quant_act_q8_0 is bit-exact with prepare_act_q8_0 (quant.cpp): per block of 32, amax = max |x|
// (exact in any order), d = amax / 127, id = 1 / d (0 when d is 0), the fp16 of d and its float,
// qs = x * id rounded half-even and saturated to int8 (as the AVX2 packs). Four blocks share one
// reduction of their maxima and one division.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/impl.h"
#include "kernels/quant.h"
// clang-format off
#include "kernels/cpu/avx512_begin.h"
#include "kernels/cpu/simd_avx512.h"
// clang-format on

namespace kvs::kernels::avx512 {

void silu_mul(float* gate, const float* up, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 g = _mm512_loadu_ps(gate + i);
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), g));
    _mm512_storeu_ps(gate + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_loadu_ps(up + i)));
  }
  if (i < n) avx2::silu_mul(gate + i, up + i, n - i);
}

namespace {

// x [32] * id, rounded half-even, saturated to int8, stored at qs [32].
inline void round_store_i8(const float* x, __m512 id, int8_t* qs) {
  constexpr int rnd = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512i a = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), id), rnd);
  const __m512i b = _mm512_cvt_roundps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16), id), rnd);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtsepi32_epi8(a));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qs + 16), _mm512_cvtsepi32_epi8(b));
}

inline __m512 abs_max32(const float* x) {
  return _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x)), _mm512_abs_ps(_mm512_loadu_ps(x + 16)));
}

}  // namespace

void quant_act_q8_0(const float* x, void* y, int64_t n) {
  auto* o = static_cast<block_q8_0*>(y);
  const int64_t nb = n / QK8_0;
  float* scales = act_q8_0_pad_and_scales(y, n);  // [nb]
  const __m128 k127 = _mm_set1_ps(127.0f), one = _mm_set1_ps(1.0f);
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    const float* xb = x + b * QK8_0;
    const __m512 m0 = abs_max32(xb), m1 = abs_max32(xb + 32), m2 = abs_max32(xb + 64), m3 = abs_max32(xb + 96);
    // 128-bit lane i of e: four partial maxima of block i; then each lane's four folded.
    const __m512 a = _mm512_max_ps(_mm512_shuffle_f32x4(m0, m1, 0x44), _mm512_shuffle_f32x4(m0, m1, 0xEE));
    const __m512 c = _mm512_max_ps(_mm512_shuffle_f32x4(m2, m3, 0x44), _mm512_shuffle_f32x4(m2, m3, 0xEE));
    __m512 e = _mm512_max_ps(_mm512_shuffle_f32x4(a, c, 0x88), _mm512_shuffle_f32x4(a, c, 0xDD));
    e = _mm512_max_ps(e, _mm512_permute_ps(e, 0x4E));
    e = _mm512_max_ps(e, _mm512_permute_ps(e, 0xB1));
    const __m128 amax = _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), e));
    const __m128 d = _mm_div_ps(amax, k127);
    const __m128 id = _mm_maskz_div_ps(_mm_cmp_ps_mask(d, _mm_setzero_ps(), _CMP_NEQ_UQ), one, d);
    const __m128i h = _mm_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_ps(scales + b, _mm_cvtph_ps(h));
    alignas(16) uint16_t hs[8];
    alignas(16) float ids[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(hs), h);
    _mm_store_ps(ids, id);
    for (int i = 0; i < 4; ++i) {
      o[b + i].d = hs[i];
      round_store_i8(xb + 32 * i, _mm512_set1_ps(ids[i]), o[b + i].qs);
    }
  }
  for (; b < nb; ++b) {
    const float* xb = x + b * QK8_0;
    const float amax = hmax_ps(abs_max32(xb));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    o[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    scales[b] = h2f(o[b].d);
    round_store_i8(xb, _mm512_set1_ps(id), o[b].qs);
  }
}

}  // namespace kvs::kernels::avx512

#include "kernels/cpu/avx512_end.h"
