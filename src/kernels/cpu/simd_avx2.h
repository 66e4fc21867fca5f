// Internal helpers for *_avx2.cpp files only (compiled with -mavx2 -mfma -mf16c). Everything here
// has internal linkage so no AVX2 code can leak into generic callers through the linker.
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/exp_coeffs.h"

namespace kvs::kernels::avx2 {
namespace {

// fp16 -> fp32 for one scalar (F16C).
inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

// fp16 at p broadcast to 8 fp32 lanes (vpbroadcastw + vcvtph2ps: no scalar round trip).
inline __m256 h2f_bcast(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_set1_epi16(static_cast<short>(*p)));
}

inline float hsum_ps(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax_ps(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// 32 int32 (4 vectors of 8, in order) -> 32 int8 in order, saturating.
inline __m256i pack_i8(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// 8 bf16 -> 8 fp32.
inline __m256 bf16x8_to_ps(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline __m256 f16x8_to_ps(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// 32 signed bytes x . y summed in pairs of 4 into 8 int32 lanes; x, y in [-127, 127].
inline __m256i dot_i8x32(__m256i x, __m256i y) {
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

// 32 unpacked Q4_0 values (first 16 from the low nibbles) in [-8, 7] as signed bytes.
inline __m256i unpack_q4_0(const uint8_t* qs) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i b = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t),
                                     _mm256_set1_epi8(0x0F));
  return _mm256_sub_epi8(b, _mm256_set1_epi8(8));
}

// 6-bit scale/min j of a Q4_K block (same as q4_K_scale_min in quant.h, kept local to AVX2 code).
inline void scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Q4_K 6-bit scales and mins of one block unpacked to bytes: out[0..7] scales, out[8..15] mins.
inline void unpack_q4_K_scales(const uint8_t* s, uint8_t out[16]) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
  const uint32_t r[4] = {u[0] & m6, (u[2] & m4) | (((u[0] >> 6) & m2) << 4), u[1] & m6,
                         ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4)};
  std::memcpy(out, r, 16);
}

inline __m256i loadu256(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// exp(x) for 8 floats, ~1-2 ulp over the normal range; exact 0 below -87.3 (also for -inf),
// saturates near FLT_MAX above 88.3. Cody-Waite range reduction (x = n ln2 + r, two-constant
// ln2) + degree-6 polynomial for exp(r) on |r| <= ln2/2 (Cephes expf coefficients), times 2^n
// through the exponent bits. The one AVX2 exp: softmax, exp_sub_sum and silu_mul use it.
inline __m256 exp_ps(__m256 x) {
  namespace c = exp_coeffs;
  const __m256 lo = _mm256_set1_ps(c::kLo), hi = _mm256_set1_ps(c::kHi);
  const __m256 underflow = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(c::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(c::kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(c::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(c::kP0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c::kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c::kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c::kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c::kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c::kP5));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

// ---- dot tiles ---------------------------------------------------------------------------------
// Tokens per pass of a row kernel (the accumulators of kNT tokens stay in registers).
constexpr int kNT = 4;
// Software prefetch distance for the weight stream: decode reads weight rows back to back, and
// on this machine the hardware prefetcher alone leaves ~15% of DRAM bandwidth unused.
constexpr size_t kPrefetchBytes = 4096;

// A dot tile from a row kernel: K<NT>::run(w_row, act, act_stride, n, out, ldo) writes the row's
// dot with NT tokens to out[t * ldo], t < NT; each row meets the tokens kNT at a time.
template <template <int> class K>
void tile_by_tokens(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt,
                    int64_t n, float* out, int64_t ldo) {
  for (int r = 0; r < nr; ++r) {
    const uint8_t* wr = w + r * ws;
    // Touch the bytes kPrefetchBytes ahead of this row (may run past the weight: prefetches
    // never fault).
    for (size_t off = 0; off < ws; off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(wr + kPrefetchBytes + off), _MM_HINT_T0);
    int t = 0;
    for (; t + kNT <= nt; t += kNT) K<kNT>::run(wr, a + t * as, as, n, out + t * ldo + r, ldo);
    switch (nt - t) {
      case 3: K<3>::run(wr, a + t * as, as, n, out + t * ldo + r, ldo); break;
      case 2: K<2>::run(wr, a + t * as, as, n, out + t * ldo + r, ldo); break;
      case 1: K<1>::run(wr, a + t * as, as, n, out + t * ldo + r, ldo); break;
      default: break;
    }
  }
}

// One row against one token through the row kernel K.
template <template <int> class K>
float dot1(const void* w, const void* act, int64_t n) {
  float r;
  K<1>::run(static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(act), 0, n, &r, 0);
  return r;
}

}  // namespace
}  // namespace kvs::kernels::avx2
