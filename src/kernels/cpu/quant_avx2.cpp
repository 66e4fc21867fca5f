// AVX2 activation quantisers (bit-exact with prepare_act_q8_0 / quantize_act_q8_K in quant.cpp:
// same scalar scale arithmetic, vector multiply, round-half-even) and row dequantisers (exact
// with the scalar reference: same float operations, no FMA contraction).
//
// Dimension legend: n = row length, b = block, g = 64-element group (Q4_K), h = 128-element half
// (Q6_K), l = byte within a 32-byte chunk.
#include <cstring>

#include "kernels/cpu/impl.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/quant.h"

namespace kvs::kernels::avx2 {
namespace {

// 32 floats * mul, rounded half-even, as 32 int8 in order (inputs must round into [-128, 127]).
inline __m256i round_pack_i8(const float* x, __m256 mul) {
  const int rnd = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x), mul), rnd));
  const __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8), mul), rnd));
  const __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 16), mul), rnd));
  const __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 24), mul), rnd));
  return pack_i8(i0, i1, i2, i3);
}

inline float absmax(const float* x, int n) {
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < n; j += 8) m = _mm256_max_ps(m, abs_ps(_mm256_loadu_ps(x + j)));
  return hmax_ps(m);
}

inline void store8(float* dst, __m256 v) { _mm256_storeu_ps(dst, v); }

}  // namespace

void quant_act_q8_0(const float* x, void* y, int64_t n) {
  auto* o = static_cast<block_q8_0*>(y);
  const int64_t nb = n / QK8_0;
  float* scales = act_q8_0_pad_and_scales(y, n);  // [nb]
  for (int64_t b = 0; b < nb; ++b, x += QK8_0) {
    const float amax = absmax(x, QK8_0);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    o[b].d = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    scales[b] = h2f(o[b].d);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o[b].qs), round_pack_i8(x, _mm256_set1_ps(id)));
  }
}

void quant_act_q8_K(const float* x, void* y, int64_t n) {
  auto* o = static_cast<block_q8_K*>(y);
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    const float amax = absmax(x, QK_K);
    if (amax == 0.0f) {
      std::memset(&o[b], 0, sizeof(block_q8_K));
      continue;
    }
    const float iscale = 127.0f / amax;
    const __m256 mul = _mm256_set1_ps(iscale);
    for (int c = 0; c < QK_K / 32; ++c) {
      __m256i q = round_pack_i8(x + 32 * c, mul);
      q = _mm256_max_epi8(q, _mm256_set1_epi8(-127));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o[b].qs + 32 * c), q);
      // [4-sums of 16 groups of 4]: lanes 0-3 = first 16 bytes, 4-7 = second 16.
      const __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q),
                                           _mm256_set1_epi16(1));
      __m256i s = _mm256_hadd_epi32(s4, s4);
      s = _mm256_hadd_epi32(s, s);
      o[b].bsums[2 * c] = static_cast<int16_t>(_mm256_extract_epi32(s, 0));
      o[b].bsums[2 * c + 1] = static_cast<int16_t>(_mm256_extract_epi32(s, 4));
    }
    o[b].d = 1.0f / iscale;
  }
}

void dequant_f16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(dst + i, f16x8_to_ps(s + i));
  for (; i < n; ++i) dst[i] = h2f(s[i]);
}

void dequant_bf16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(dst + i, bf16x8_to_ps(s + i));
  for (; i < n; ++i) {
    const uint32_t u = static_cast<uint32_t>(s[i]) << 16;
    std::memcpy(dst + i, &u, 4);
  }
}

void dequant_q8_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q8_0*>(src);
  for (int64_t b = 0; b < n / QK8_0; ++b, dst += QK8_0) {
    const __m256 d = _mm256_set1_ps(h2f(x[b].d));
    for (int k = 0; k < 4; ++k) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(x[b].qs + 8 * k));
      store8(dst + 8 * k, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
    }
  }
}

void dequant_q4_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q4_0*>(src);
  for (int64_t b = 0; b < n / QK4_0; ++b, dst += QK4_0) {
    const __m256 d = _mm256_set1_ps(h2f(x[b].d));
    const __m256i q = unpack_q4_0(x[b].qs);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    store8(dst, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
    store8(dst + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
    store8(dst + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
    store8(dst + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
  }
}

void dequant_q4_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q4_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = h2f(x[b].d), dmin = h2f(x[b].dmin);
    const uint8_t* q = x[b].qs;
    for (int g = 0; g < 4; ++g, q += 32, dst += 64) {
      uint8_t sc[2], m[2];
      scale_min_k4(2 * g, x[b].scales, &sc[0], &m[0]);
      scale_min_k4(2 * g + 1, x[b].scales, &sc[1], &m[1]);
      const __m256i bytes = loadu256(q);
      const __m256i nib[2] = {_mm256_and_si256(bytes, _mm256_set1_epi8(0x0F)),
                              _mm256_and_si256(_mm256_srli_epi16(bytes, 4), _mm256_set1_epi8(0x0F))};
      for (int s = 0; s < 2; ++s) {
        const __m256 ds = _mm256_set1_ps(d * sc[s]), dm = _mm256_set1_ps(dmin * m[s]);
        const __m128i lo = _mm256_castsi256_si128(nib[s]), hi = _mm256_extracti128_si256(nib[s], 1);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int k = 0; k < 4; ++k) {
          const __m256 qf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]));
          store8(dst + 32 * s + 8 * k, _mm256_sub_ps(_mm256_mul_ps(ds, qf), dm));
        }
      }
    }
  }
}

void dequant_q6_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q6_K*>(src);
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x30);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = h2f(x[b].d);
    for (int h = 0; h < 2; ++h, dst += 128) {
      const __m256i ql0 = loadu256(x[b].ql + 64 * h), ql1 = loadu256(x[b].ql + 64 * h + 32);
      const __m256i qh = loadu256(x[b].qh + 32 * h);
      const __m256i q[4] = {  // [quarter] 32 values in [0, 63]
          _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m2)),
          _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                          _mm256_and_si256(_mm256_srli_epi16(qh, 2), m2))};
      for (int k = 0; k < 4; ++k) {
        const __m256i v = _mm256_sub_epi8(q[k], _mm256_set1_epi8(32));
        const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
        const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
        for (int p = 0; p < 4; ++p) {
          const __m256 ds = _mm256_set1_ps(d * x[b].scales[8 * h + 2 * k + p / 2]);
          store8(dst + 32 * k + 8 * p,
                 _mm256_mul_ps(ds, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[p]))));
        }
      }
    }
  }
}

}  // namespace kvs::kernels::avx2
