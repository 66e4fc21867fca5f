// Internal helpers for *_avx512.cpp files only, included after avx512_begin.h. Everything here
// has internal linkage (see avx512_begin.h).
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/exp_coeffs.h"  // constants only

namespace kvs::kernels::avx512 {
namespace {

inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i loadu128(const void* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

// Sum of the 16 lanes (shuffles within the register: no extract, whose GCC 12 intrinsics warn).
inline float reduce_ps(__m512 v) {
  __m512 t = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
  __m128 s = _mm512_castps512_ps128(t);
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// True if a lane of any of the vectors is NaN. Each vector is checked itself: max_ps returns its
// second operand when either is NaN, so a maximum over them can drop one.
template <class... V>
inline bool any_nan(V... v) {
  return (_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) | ...) != 0;
}

// Maximum of the 16 lanes.
inline float hmax_ps(__m512 v) {
  __m512 t = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  t = _mm512_max_ps(t, _mm512_shuffle_f32x4(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
  __m128 s = _mm512_castps512_ps128(t);
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// exp_ps of simd_avx2.h over 16 lanes, operation for operation with the same constants
// (exp_coeffs.h), so each lane's value is the AVX2 table's.
inline __m512 exp_ps(__m512 x) {
  namespace c = exp_coeffs;
  const __m512 lo = _mm512_set1_ps(c::kLo), hi = _mm512_set1_ps(c::kHi);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(c::kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(c::kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(c::kLn2Lo), r);
  __m512 p = _mm512_set1_ps(c::kP0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kP5));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(static_cast<__mmask16>(~underflow), p, _mm512_castsi512_ps(e));
}

// Four sums at once: {reduce(a), reduce(b), reduce(c), reduce(d)}.
inline __m128 reduce4_ps(__m512 a, __m512 b, __m512 c, __m512 d) {
  // Fold 512 -> 256 -> 128 per vector, then the 4x4 transpose-add.
  auto fold = [](__m512 v) {
    const __m512 t = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m512 u = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_castps512_ps128(u);
  };
  const __m128 ab = _mm_hadd_ps(fold(a), fold(b));
  const __m128 cd = _mm_hadd_ps(fold(c), fold(d));
  return _mm_hadd_ps(ab, cd);
}

// 16 float lanes: x in lanes 0..7, y in lanes 8..15.
inline __m512 halves_ps(float x, float y) {
  return _mm512_insertf32x8(_mm512_set1_ps(x), _mm256_set1_ps(y), 1);
}

// 64 bytes from two 32-byte halves.
inline __m512i join256(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// 64-bit pairs of a and b interleaved (unpacklo_pd / unpackhi_pd on floats).
inline __m512 unpacklo_pairs(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
inline __m512 unpackhi_pairs(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
// r[l] = row l (16 floats) -> r[c] = column c {row 0 [c], ..., row 15 [c]}.
// (16 x 16 in registers: 64 shuffles.)
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  // t[2i] per 128-bit lane k: {r2i[4k], r2i+1[4k], r2i[4k+1], r2i+1[4k+1]}; t[2i+1]: the same for 4k+2, 4k+3.
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + j] per lane k: rows 4g .. 4g + 3 at column 4k + j.
  __m512 u[16];
  for (int g = 0; g < 4; ++g) {
    u[4 * g] = unpacklo_pairs(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = unpackhi_pairs(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = unpacklo_pairs(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = unpackhi_pairs(t[4 * g + 1], t[4 * g + 3]);
  }
  // Column 4k + j = lanes {u[j] k, u[4 + j] k, u[8 + j] k, u[12 + j] k}.
  for (int j = 0; j < 4; ++j) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], _MM_SHUFFLE(2, 0, 2, 0));   // lanes 0, 2
    const __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], _MM_SHUFFLE(3, 1, 3, 1));   // lanes 1, 3
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(2, 0, 2, 0));
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], _MM_SHUFFLE(3, 1, 3, 1));
    r[j] = _mm512_shuffle_f32x4(v0, w0, _MM_SHUFFLE(2, 0, 2, 0));       // k = 0
    r[8 + j] = _mm512_shuffle_f32x4(v0, w0, _MM_SHUFFLE(3, 1, 3, 1));   // k = 2
    r[4 + j] = _mm512_shuffle_f32x4(v1, w1, _MM_SHUFFLE(2, 0, 2, 0));   // k = 1
    r[12 + j] = _mm512_shuffle_f32x4(v1, w1, _MM_SHUFFLE(3, 1, 3, 1));  // k = 3
  }
}

}  // namespace
}  // namespace kvs::kernels::avx512
