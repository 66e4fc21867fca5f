// AVX-512 attention kernels. The decode attention's row kernels (semantics in ops.h: qk_rows_*,
// pv_rows_*): attn_rows_impl.h over 16 lanes, every K or V row loaded (and, for F16 pages,
// converted) once per block of up to four queries of the GQA group (qk: 4 queries x 4 rows = 16
// accumulators; pv: 4 queries x 64 dims = 16). The prefill attention's tiles (qk_panels, pv_tile:
// attn_tiles_impl.h). The online-softmax pieces (max_f32, exp_sub_sum) over 16 lanes. Head dims
// that are not a multiple of 16 take the AVX2 row loops (every supported model's is).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "kernels/cpu/exp_coeffs.h"

#include "kernels/cpu/impl.h"
#include "kernels/ops.h"
// clang-format off
#include "kernels/cpu/avx512_begin.h"
#include "kernels/cpu/simd_avx512.h"
// clang-format on

namespace kvs::kernels::avx512 {
namespace {

struct Simd {
  using vec = __m512;
  static constexpr int kLanes = 16, kQueries = 4;
  // Prefill tiles (attn_tiles_impl.h): qk 6 rows x 64 keys, pv 6 rows x 64 dims (24 accumulators).
  static constexpr int kQkRows = 6, kQkVecs = 4, kPvRows = 6, kPvVecs = 4;
  static vec zero() { return _mm512_setzero_ps(); }
  static vec load(const float* p) { return _mm512_loadu_ps(p); }
  static vec at(const float* row, int d) { return _mm512_loadu_ps(row + d); }
  static vec at(const uint16_t* row, int d) { return _mm512_cvtph_ps(loadu256(row + d)); }
  // 16 of a block's 32 int8 values (d % 32 is 0 or 16), before / after the block's scale.
  static vec raw(const block_q8_0* row, int d) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(loadu128(row[d / QK8_0].qs + d % QK8_0)));
  }
  static vec at(const block_q8_0* row, int d) { return _mm512_mul_ps(raw(row, d), scale(row, d)); }
  // 16 of a Q4_0 block's 32 values (d % 32 is 0: the low nibbles, or 16: the high ones), q - 8 / (q - 8) * d.
  static vec raw(const block_q4_0* row, int d) {
    const __m128i x = loadu128(row[d / QK4_0].qs);
    const __m128i nib = _mm_and_si128(d % QK4_0 == 0 ? x : _mm_srli_epi16(x, 4), _mm_set1_epi8(0x0F));
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(nib), _mm512_set1_epi32(8)));
  }
  static vec at(const block_q4_0* row, int d) { return _mm512_mul_ps(raw(row, d), scale(row, d)); }
  // The scale of the block holding element d, in every lane.
  static vec scale(const block_q8_0* row, int d) { return _mm512_set1_ps(h2f(row[d / QK8_0].d)); }
  static vec scale(const block_q4_0* row, int d) { return _mm512_set1_ps(h2f(row[d / QK4_0].d)); }
  static vec mul(vec a, vec b) { return _mm512_mul_ps(a, b); }
  static vec set1(float x) { return _mm512_set1_ps(x); }
  static vec fmadd(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
  static void store(float* p, vec v) { _mm512_storeu_ps(p, v); }
  static float sum(vec v) { return reduce_ps(v); }
  // {sum(a), sum(b), sum(c), sum(d)}: pairwise transposes within the 128-bit lanes, then the four
  // lanes folded (13 operations for 4 sums).
  static __m128 sum4(vec a, vec b, vec c, vec d) {
    const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));  // per lane: a02 b02 a13 b13
    const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    const __m512 abcd = _mm512_add_ps(unpacklo_pairs(ab, cd), unpackhi_pairs(ab, cd));
    const __m512 h = _mm512_add_ps(abcd, _mm512_shuffle_f32x4(abcd, abcd, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m512 s = _mm512_add_ps(h, _mm512_shuffle_f32x4(h, h, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_castps512_ps128(s);
  }
};

#include "kernels/cpu/attn_rows_impl.h"
#include "kernels/cpu/attn_tiles_impl.h"

}  // namespace

void qk_rows_f32(const float* Q, int nq, const float* K, int n, int D, float scale, float* out, int64_t ldo) {
  if (D % 16 != 0) return avx2::qk_rows_f32(Q, nq, K, n, D, scale, out, ldo);
  qk_rows<Simd>(Q, nq, K, n, D, scale, out, ldo);
}
void qk_rows_f16(const float* Q, int nq, const uint16_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  if (D % 16 != 0) return avx2::qk_rows_f16(Q, nq, K, n, D, scale, out, ldo);
  qk_rows<Simd>(Q, nq, K, n, D, scale, out, ldo);
}
void pv_rows_f32(const float* P, int nq, int64_t ldp, const float* V, int n, int D, float* acc) {
  if (D % 16 != 0) return avx2::pv_rows_f32(P, nq, ldp, V, n, D, acc);
  pv_rows<Simd>(P, nq, ldp, V, n, D, acc);
}
void pv_rows_f16(const float* P, int nq, int64_t ldp, const uint16_t* V, int n, int D, float* acc) {
  if (D % 16 != 0) return avx2::pv_rows_f16(P, nq, ldp, V, n, D, acc);
  pv_rows<Simd>(P, nq, ldp, V, n, D, acc);
}
// Q8_0 rows: D is a multiple of 32 (whole blocks), so of 16 too.
void qk_rows_q8_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  qk_rows<Simd>(Q, nq, reinterpret_cast<const block_q8_0*>(K), n, D, scale, out, ldo);
}
void pv_rows_q8_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc) {
  pv_rows<Simd>(P, nq, ldp, reinterpret_cast<const block_q8_0*>(V), n, D, acc);
}
void qk_rows_q4_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  qk_rows<Simd>(Q, nq, reinterpret_cast<const block_q4_0*>(K), n, D, scale, out, ldo);
}
void pv_rows_q4_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc) {
  pv_rows<Simd>(P, nq, ldp, reinterpret_cast<const block_q4_0*>(V), n, D, acc);
}


// The online-softmax pieces (semantics in ops.h): 16 lanes, the tail through a masked load of the
// same exp (-inf in the unused lanes, whose exp is 0).
float max_f32(const float* x, int64_t n) {
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 m0 = ninf, m1 = ninf;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(x + i + 16));
  }
  for (; i + 16 <= n; i += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(x + i));
  if (i < n) m1 = _mm512_max_ps(m1, _mm512_mask_loadu_ps(ninf, static_cast<__mmask16>((1u << (n - i)) - 1), x + i));
  return hmax_ps(_mm512_max_ps(m0, m1));
}
float exp_sub_sum(float* x, int64_t n, float sub) {
  const __m512 vs = _mm512_set1_ps(sub);
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 e0 = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs));
    const __m512 e1 = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vs));
    _mm512_storeu_ps(x + i, e0);
    _mm512_storeu_ps(x + i + 16, e1);
    s0 = _mm512_add_ps(s0, e0);
    s1 = _mm512_add_ps(s1, e1);
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs));
    _mm512_storeu_ps(x + i, e);
    s0 = _mm512_add_ps(s0, e);
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), m, x + i);
    const __m512 e = exp_ps(_mm512_sub_ps(v, vs));
    _mm512_mask_storeu_ps(x + i, m, e);
    s1 = _mm512_add_ps(s1, e);
  }
  return reduce_ps(_mm512_add_ps(s0, s1));
}

void qk_panels(const float* Q, int rows, int D, const float* Kt, int n_panels, float* S, int64_t lds) {
  qk_panels_impl<Simd>(Q, rows, D, Kt, n_panels, S, lds);
}
void pv_tile(const float* P, int rows, int64_t ldp, const float* V, int n, int D, float* O) {
  pv_tile_impl<Simd>(P, rows, ldp, V, n, D, O);
}

// Keys into panels of 16 (ops.h): per 16 keys x 16 dims, 16 row loads, a 16 x 16 transposition
// in registers (transpose16, simd_avx512.h) and 16 column stores; the element loop of the portable
// version cost the prefill attention 4% of its time once it packed each key block per query block.

void pack_key_panels(const float* K, int n, int D, float* Kt) {
  constexpr int KP = kKeyPanel;
  static_assert(KP == 16);
  const int np = (n + KP - 1) / KP;
  for (int p = 0; p < np; ++p) {
    const float* src = K + static_cast<int64_t>(p) * KP * D;  // [m][D]
    float* dst = Kt + static_cast<int64_t>(p) * D * KP;        // [D][16]
    const int m = std::min(KP, n - p * KP);
    int d = 0;
    for (; d + 16 <= D; d += 16) {
      __m512 r[16];
      for (int l = 0; l < 16; ++l) r[l] = l < m ? _mm512_loadu_ps(src + static_cast<int64_t>(l) * D + d) : _mm512_setzero_ps();
      transpose16(r);
      for (int c = 0; c < 16; ++c) _mm512_storeu_ps(dst + static_cast<int64_t>(d + c) * KP, r[c]);
    }
    for (; d < D; ++d)
      for (int l = 0; l < KP; ++l) dst[d * KP + l] = l < m ? src[static_cast<int64_t>(l) * D + d] : 0.0f;
  }
}

}  // namespace kvs::kernels::avx512

#include "kernels/cpu/avx512_end.h"
