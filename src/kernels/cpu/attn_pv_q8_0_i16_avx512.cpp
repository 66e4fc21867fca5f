// AVX-512 P.V against Q8_0 V rows with the weights rounded to int16 (semantics in ops.h:
// pv_rows_q8_0_i16), head dim 64.
//
// Why: the float row kernel (attn_rows_impl.h, pv_block) converts every value of a row to f32 and
// multiplies it by its block's scale before the FMAs: per 64-value row and a GQA group of 3, four
// sign extensions, four conversions, two scale conversions, four products and 12 FMAs. Here the
// block scale goes into the weight instead (w = p * d, one product per row, block and query, done
// 16 rows at a time), the weights are rounded to int16, and two rows at a time become int16 pairs
// (row r, row r + 1) of every value: vpdpwssd multiplies a pair by the two rows' weights and adds
// both to an int32 lane. A pair of rows costs four byte interleaves, four sign extensions and 12
// vpdpwssd for 3 queries, the weights' broadcast folded into the instruction. Queries go 3 or 4 at a
// time (12 or 16 int32 accumulators).
//
// Numerics: per chunk of up to 32 rows and per query q, s = max_r |p(q, r)| * max_{r,b} |d(r, b)| /
// 32767 and wi(q, r, b) = round-half-even(p(q, r) d(r, b) / s) in [-32767, 32767]; the int32 sums
// sum_r wi * k (|k| <= 128) are exact (at most 32 * 32767 * 128 = 1.3e8); acc += s * sum in f32. The
// error against the f32 weights is at most (s / 2) * sum_r |k(r, j)| per value (1.5e-5 of the
// chunk's largest weight bound per row, against 1/254 of a block's largest value for the Q8_0
// values themselves). A chunk with a weight or scale that is not finite, or whose bound is below
// the smallest normal float, goes through the float row kernel instead (the float result).
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

constexpr int kD = 64;             // the head dim this path serves
constexpr int64_t kRowBytes = 68;  // a Q8_0 row of 64: two blocks {f16 d, int8 qs[32]}
constexpr int kChunk = 32;         // rows per integer pass (one weight scale per query)

using i32_unaligned = int32_t __attribute__((may_alias, aligned(1)));

// acc + vpdpwssd(x, the int16 pair at p broadcast to every lane), the broadcast folded into the
// instruction (GCC 12 emits a separate vpbroadcastd from the intrinsic; tile_packed_avx512.cpp
// says what that costs).
inline __m512i dpwssd_bcast(__m512i acc, __m512i x, const int16_t* p) {
  __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(x), "m"(*reinterpret_cast<const i32_unaligned*>(p)));
  return acc;
}

// QB queries (weights P rows of stride ldp) against rows [0, n) of V, n <= kChunk: acc rows of
// stride kD += P . V. Returns false, changing nothing, when a weight or a block scale is not
// finite, or a query's bound max |p| * max |d| is not finite or is below the smallest normal float
// (the caller then runs the float kernel on the chunk).
template <int QB>
bool chunk_i16(const float* P, int64_t ldp, const uint8_t* V, int n, float* acc) {
  // The rows' block scales as f32, d[b][half] = rows 16 half .. 16 half + 15 (0 past n, so that a
  // padded row's weight is 0): gathered as the int32 at each block's start, whose low half is the
  // f16 scale. (Scalar copies into an array read back as vectors stalled on store forwarding.)
  const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                         _mm512_set1_epi32(static_cast<int>(kRowBytes)));
  const __mmask16 m0 = static_cast<__mmask16>(n >= 16 ? 0xFFFF : (1u << n) - 1);
  const __mmask16 m1 = static_cast<__mmask16>(n >= 32 ? 0xFFFF : n <= 16 ? 0 : (1u << (n - 16)) - 1);
  __m512 d[2][2];
  for (int b = 0; b < 2; ++b) {
    const __m512i g0 = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m0, idx, V + 34 * b, 1);
    const __m512i g1 = m1 ? _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m1, idx, V + 16 * kRowBytes + 34 * b, 1)
                          : _mm512_setzero_si512();
    d[b][0] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g0));
    d[b][1] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g1));
  }
  // One scale for all the chunk's rows and both blocks: the largest |d| (one reduction for the
  // queries together), times each query's largest |p| (a bound on its largest |w| that costs one
  // reduction a query rather than one a query and block; the scales of one head's rows differ
  // little, so the weights keep nearly all of int16's range).
  const __m512 dm = _mm512_max_ps(_mm512_max_ps(_mm512_abs_ps(d[0][0]), _mm512_abs_ps(d[0][1])),
                                  _mm512_max_ps(_mm512_abs_ps(d[1][0]), _mm512_abs_ps(d[1][1])));
  if (any_nan(d[0][0], d[0][1], d[1][0], d[1][1])) return false;
  const float dmax = hmax_ps(dm);
  // Weights wi[q][b][r] (r padded to kChunk with 0) and their scales s[q].
  alignas(64) int16_t wi[QB][2][kChunk];
  float s[QB];
#pragma GCC unroll 4
  for (int q = 0; q < QB; ++q) {
    const __m512 p0 = _mm512_maskz_loadu_ps(m0, P + q * ldp), p1 = _mm512_maskz_loadu_ps(m1, P + q * ldp + 16);
    if (any_nan(p0, p1)) return false;
    const float mx = hmax_ps(_mm512_max_ps(_mm512_abs_ps(p0), _mm512_abs_ps(p1))) * dmax;
    if (!(mx <= std::numeric_limits<float>::max())) return false;
    if (mx != 0.0f && mx < std::numeric_limits<float>::min()) return false;  // 32767 / mx would overflow
    if (mx == 0.0f) {
      std::memset(wi[q], 0, sizeof wi[q]);
      s[q] = 0.0f;
      continue;
    }
    // round-half-even(p * d * 32767 / mx): |p d| <= mx, so |wi| <= 32767 (as prepare_queries_q8_0).
    const __m512 inv = _mm512_set1_ps(32767.0f / mx);
#pragma GCC unroll 2
    for (int b = 0; b < 2; ++b) {
      const __m512 w0 = _mm512_mul_ps(_mm512_mul_ps(p0, d[b][0]), inv), w1 = _mm512_mul_ps(_mm512_mul_ps(p1, d[b][1]), inv);
      _mm256_store_si256(reinterpret_cast<__m256i*>(wi[q][b]), _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(w0)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(wi[q][b] + 16), _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(w1)));
    }
    s[q] = mx / 32767.0f;
  }
  // a[q][b][0]: int32 lanes 0-7 = values 0-7 of block b, lanes 8-15 = values 16-23; a[q][b][1]:
  // values 8-15 and 24-31 (the lane order of the byte interleave below).
  __m512i a[QB][2][2];
#pragma GCC unroll 4
  for (int q = 0; q < QB; ++q)
    for (int b = 0; b < 2; ++b) a[q][b][0] = a[q][b][1] = _mm512_setzero_si512();
  for (int r = 0; r < n; r += 2) {
    const uint8_t* r0 = V + r * kRowBytes;
    const uint8_t* r1 = r + 1 < n ? r0 + kRowBytes : r0;  // an odd count's last pair: weight 0
#pragma GCC unroll 2
    for (int b = 0; b < 2; ++b) {
      const __m256i x = loadu256(r0 + 2 + 34 * b), y = loadu256(r1 + 2 + 34 * b);
      // Per 128-bit lane the bytes x0 y0 x1 y1 ...: sign-extended, int32 lane i holds the pair
      // (row r, row r + 1) of one value.
      const __m512i lo = _mm512_cvtepi8_epi16(_mm256_unpacklo_epi8(x, y));
      const __m512i hi = _mm512_cvtepi8_epi16(_mm256_unpackhi_epi8(x, y));
#pragma GCC unroll 4
      for (int q = 0; q < QB; ++q) {
        a[q][b][0] = dpwssd_bcast(a[q][b][0], lo, wi[q][b] + r);
        a[q][b][1] = dpwssd_bcast(a[q][b][1], hi, wi[q][b] + r);
      }
    }
  }
#pragma GCC unroll 4
  for (int q = 0; q < QB; ++q)
    for (int b = 0; b < 2; ++b) {
      const __m512 lo = _mm512_cvtepi32_ps(a[q][b][0]), hi = _mm512_cvtepi32_ps(a[q][b][1]);
      const __m512 sc = _mm512_set1_ps(s[q]);
      float* o = acc + q * kD + 32 * b;
      // Values 0-15 = lo's 128-bit lanes 0-1 then hi's 0-1; values 16-31 = lanes 2-3 of each.
      _mm512_storeu_ps(o, _mm512_fmadd_ps(sc, _mm512_shuffle_f32x4(lo, hi, 0x44), _mm512_loadu_ps(o)));
      _mm512_storeu_ps(o + 16, _mm512_fmadd_ps(sc, _mm512_shuffle_f32x4(lo, hi, 0xEE), _mm512_loadu_ps(o + 16)));
    }
  return true;
}

template <int QB>
void rows_i16(const float* P, int64_t ldp, const uint8_t* V, int n, float* acc) {
  for (int r = 0; r < n; r += kChunk) {
    const int m = std::min(kChunk, n - r);
    if (!chunk_i16<QB>(P + r, ldp, V + r * kRowBytes, m, acc)) pv_rows_q8_0(P + r, QB, ldp, V + r * kRowBytes, m, kD, acc);
  }
}

}  // namespace

void pv_rows_q8_0_i16(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc) {
  (void)D;  // kD: callers ask has_pv_rows_q8_0_i16 first (ops.h)
  // Queries in blocks of 3 when that divides them (SmolLM2's GQA groups of 3), else of 4 (Llama
  // 3.2's groups of 4) and the rest.
  int q = 0;
  if (nq % 4 != 0 && nq % 3 == 0)
    for (; q < nq; q += 3) rows_i16<3>(P + q * ldp, ldp, V, n, acc + q * kD);
  for (; q + 4 <= nq; q += 4) rows_i16<4>(P + q * ldp, ldp, V, n, acc + q * kD);
  switch (nq - q) {
    case 1: rows_i16<1>(P + q * ldp, ldp, V, n, acc + q * kD); break;
    case 2: rows_i16<2>(P + q * ldp, ldp, V, n, acc + q * kD); break;
    case 3: rows_i16<3>(P + q * ldp, ldp, V, n, acc + q * kD); break;
    default: break;
  }
}

}  // namespace kvs::kernels::avx512

#include "kernels/cpu/avx512_end.h"
