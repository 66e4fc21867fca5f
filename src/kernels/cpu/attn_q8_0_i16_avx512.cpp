// AVX-512 Q.K against Q8_0 KV rows with the queries rounded to int16 (semantics in ops.h:
// prepare_queries_q8_0, qk_rows_q8_0_prepared), head dim 64.
//
// Why: the float row kernel (attn_rows_impl.h) converts every key value to f32 and multiplies it by
// its block's scale before the FMAs (4 conversions, 4 products, 12 FMAs and the scale broadcasts
// per 64-value row for a GQA group of 3). Here a row becomes two vectors of 32 int16 values
// (sign-extended, no products), each query takes one vpmaddwd and one vpdpwssd a row, and the
// block scales are applied once per row and block after an integer reduction: Q.K of 3 queries
// 1.46x faster per row with the rows in L1. The queries are rounded once per decode task
// (prepare_queries_q8_0), not per page. From DRAM it pays together with the next task's pages
// asked for during P.V (kvcache/attention.cpp NextTaskPrefetch; docs/benchmarks/issue25-server-step-3-2026-11-29.md).
//
// Numerics: query q becomes s * qi with s = max|q| / 32767 and qi = round(q / s) in [-32767, 32767]
// (one scale per query: the error is at most s / 2 a value, 1.5e-5 of the query's largest
// magnitude, against 1/254 of a block's largest key for the Q8_0 keys themselves). The integer
// sums are exact (|k| <= 128, |qi| <= 32767: at most 1.1e8 per block of 32); score(r) = scale * s *
// sum_b d(r, b) * isum(r, b) in f32. llama.cpp rounds the queries further, to 8 bits (its CPU
// flash attention converts Q to the keys' vec_dot type, Q8_0); 16 bits keep the scores within
// 1e-4 of the f32 queries' (tests/kernels/attn_q8_0_prepared_test.cpp checks the bound).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kernels/cpu/impl.h"
#include "kernels/ops.h"
// clang-format off
#include "kernels/cpu/avx512_begin.h"
#include "kernels/cpu/simd_avx512.h"
// clang-format on

namespace kvs::kernels::avx512 {
namespace {

constexpr int kD = 64;            // the head dim this path serves
constexpr int64_t kRowBytes = 68;  // a Q8_0 row of 64: two blocks {f16 d, int8 qs[32]}

// Byte layout of one prepared query (kQ8PreparedQueryBytes, ops.h): int16 a[32] = {qi[0:16],
// qi[32:48]}, int16 b[32] = {qi[16:32], qi[48:64]}, then the f32 factor scale * s.
// a / b pair each query value with the key values row_i16 puts in the same int16 lanes.
constexpr int kOffB = 64, kOffScale = 128;

// 16 int16 values of block 0 and 16 of block 1 of a row, from element o (0 or 16) of each block:
// after vpmaddwd, int32 lanes 0-7 hold block 0's pair sums and lanes 8-15 block 1's.
inline __m512i row_i16(const uint8_t* row, int o) {
  const __m256i x = _mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(row + 2 + o)), loadu128(row + 36 + o), 1);
  return _mm512_cvtepi8_epi16(x);
}

// QB prepared queries against rows [0, n) of K: out rows of stride ldo. Rows go 4 at a time;
// a short last group repeats its last row and stores only the real ones.
template <int QB>
void qk_block_i16(const uint8_t* prep, const uint8_t* K, int n, float* out, int64_t ldo) {
  __m512i qa[QB], qb[QB];
  float qs[QB];
#pragma GCC unroll 4
  for (int q = 0; q < QB; ++q) {
    const uint8_t* p = prep + q * kQ8PreparedQueryBytes;
    qa[q] = _mm512_loadu_si512(p);
    qb[q] = _mm512_loadu_si512(p + kOffB);
    std::memcpy(&qs[q], p + kOffScale, sizeof(float));
  }
  for (int r = 0; r < n; r += 4) {
    const int m = std::min(4, n - r);
    const uint8_t* k0 = K + r * kRowBytes;
    const uint8_t* k1 = K + (r + std::min(1, m - 1)) * kRowBytes;
    const uint8_t* k2 = K + (r + std::min(2, m - 1)) * kRowBytes;
    const uint8_t* k3 = K + (r + std::min(3, m - 1)) * kRowBytes;
    const __m512i x0a = row_i16(k0, 0), x0b = row_i16(k0, 16), x1a = row_i16(k1, 0), x1b = row_i16(k1, 16);
    const __m512i x2a = row_i16(k2, 0), x2b = row_i16(k2, 16), x3a = row_i16(k3, 0), x3b = row_i16(k3, 16);
    auto d16 = [](const uint8_t* p) {
      int16_t h;
      std::memcpy(&h, p, sizeof h);
      return h;
    };
    // The block scales [d(r0, b0) .. d(r3, b0), d(r0, b1) .. d(r3, b1)].
    const __m256 dk = _mm256_cvtph_ps(
        _mm_setr_epi16(d16(k0), d16(k1), d16(k2), d16(k3), d16(k0 + 34), d16(k1 + 34), d16(k2 + 34), d16(k3 + 34)));
#pragma GCC unroll 4
    for (int q = 0; q < QB; ++q) {
      const __m512i a0 = _mm512_dpwssd_epi32(_mm512_madd_epi16(x0a, qa[q]), x0b, qb[q]);
      const __m512i a1 = _mm512_dpwssd_epi32(_mm512_madd_epi16(x1a, qa[q]), x1b, qb[q]);
      const __m512i a2 = _mm512_dpwssd_epi32(_mm512_madd_epi16(x2a, qa[q]), x2b, qb[q]);
      const __m512i a3 = _mm512_dpwssd_epi32(_mm512_madd_epi16(x3a, qa[q]), x3b, qb[q]);
      // Per 128-bit lane: rows 0-3's sums of that lane's 4 int32 values; lanes 0-1 are block 0,
      // lanes 2-3 block 1.
      const __m512i t01 = _mm512_add_epi32(_mm512_unpacklo_epi32(a0, a1), _mm512_unpackhi_epi32(a0, a1));
      const __m512i t23 = _mm512_add_epi32(_mm512_unpacklo_epi32(a2, a3), _mm512_unpackhi_epi32(a2, a3));
      const __m512i u = _mm512_add_epi32(_mm512_unpacklo_epi64(t01, t23), _mm512_unpackhi_epi64(t01, t23));
      const __m512i v = _mm512_add_epi32(u, _mm512_shuffle_i32x4(u, u, _MM_SHUFFLE(2, 3, 0, 1)));
      // [block 0 rows 0-3, block 1 rows 0-3], exact int32 sums.
      const __m256i w = _mm512_castsi512_si256(_mm512_shuffle_i32x4(v, v, _MM_SHUFFLE(3, 1, 2, 0)));
      const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(w), dk);
      const __m128 sc = _mm_mul_ps(_mm_add_ps(_mm256_castps256_ps128(f), _mm256_extractf128_ps(f, 1)), _mm_set1_ps(qs[q]));
      if (m == 4)
        _mm_storeu_ps(out + q * ldo + r, sc);
      else
        _mm_mask_storeu_ps(out + q * ldo + r, static_cast<__mmask8>((1u << m) - 1), sc);
    }
  }
}

}  // namespace

bool prepare_queries_q8_0(const float* Q, int nq, int D, float scale, uint8_t* prep) {
  if (D != kD) return false;
  for (int q = 0; q < nq; ++q) {
    const float* x = Q + static_cast<int64_t>(q) * kD;
    uint8_t* p = prep + static_cast<int64_t>(q) * kQ8PreparedQueryBytes;
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16), v2 = _mm512_loadu_ps(x + 32),
                 v3 = _mm512_loadu_ps(x + 48);
    const __m512 am = _mm512_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)),
                                    _mm512_max_ps(_mm512_abs_ps(v2), _mm512_abs_ps(v3)));
    const float mx = _mm512_reduce_max_ps(am);
    // (A largest magnitude below the smallest normal float would make 32767 / mx overflow.)
    if (any_nan(v0, v1, v2, v3) || !(mx <= std::numeric_limits<float>::max())) return false;
    if (mx != 0.0f && mx < std::numeric_limits<float>::min()) return false;
    float factor = 0.0f;
    if (mx == 0.0f) {
      std::memset(p, 0, kOffScale);
    } else {
      // qi = round-half-even(x * 32767 / mx): |x| <= mx, so |qi| <= 32767 (the product rounds to at
      // most 32767 * (1 + 2^-24), whose rounding is 32767).
      const __m512 inv = _mm512_set1_ps(32767.0f / mx);
      auto w = [&](__m512 v) { return _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(v, inv))); };
      _mm512_storeu_si512(p, _mm512_inserti64x4(_mm512_castsi256_si512(w(v0)), w(v2), 1));
      _mm512_storeu_si512(p + kOffB, _mm512_inserti64x4(_mm512_castsi256_si512(w(v1)), w(v3), 1));
      factor = mx / 32767.0f * scale;
    }
    std::memcpy(p + kOffScale, &factor, sizeof factor);
  }
  return true;
}

void qk_rows_q8_0_prepared(const uint8_t* prep, int nq, const uint8_t* K, int n, int D, float* out, int64_t ldo) {
  (void)D;  // kD: prepare_queries_q8_0 refused any other
  int q = 0;
  for (; q + 4 <= nq; q += 4) qk_block_i16<4>(prep + q * kQ8PreparedQueryBytes, K, n, out + q * ldo, ldo);
  switch (nq - q) {
    case 1: qk_block_i16<1>(prep + q * kQ8PreparedQueryBytes, K, n, out + q * ldo, ldo); break;
    case 2: qk_block_i16<2>(prep + q * kQ8PreparedQueryBytes, K, n, out + q * ldo, ldo); break;
    case 3: qk_block_i16<3>(prep + q * kQ8PreparedQueryBytes, K, n, out + q * ldo, ldo); break;
    default: break;
  }
}

}  // namespace kvs::kernels::avx512

#include "kernels/cpu/avx512_end.h"
