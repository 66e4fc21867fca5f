// AVX2 attention row kernels (semantics in ops.h: qk_rows_*, pv_rows_*): attn_rows_impl.h over
// 8 lanes, each K/V row loaded (and converted from F16) once per pair of queries of the GQA group
// (qk: 2 queries x 4 rows = 8 accumulators + 4 rows, 13 of the 16 registers; pv: 2 queries x 32
// dims = 8 accumulators + 4 row pieces). Head dims that are not a multiple of 8 take the portable
// loops (every supported model's is: 64, 80, 96, 128, ...).
#include "kernels/cpu/impl.h"
#include "kernels/cpu/simd_avx2.h"

namespace kvs::kernels::avx2 {
namespace {

struct Simd {
  using vec = __m256;
  static constexpr int kLanes = 8, kQueries = 2;
  // Prefill tiles (attn_tiles_impl.h): qk 6 rows x 16 keys, pv 6 rows x 16 dims (12 accumulators).
  static constexpr int kQkRows = 6, kQkVecs = 2, kPvRows = 6, kPvVecs = 2;
  static vec zero() { return _mm256_setzero_ps(); }
  static vec load(const float* p) { return _mm256_loadu_ps(p); }
  static vec at(const float* row, int d) { return _mm256_loadu_ps(row + d); }
  static vec at(const uint16_t* row, int d) { return f16x8_to_ps(row + d); }
  // 8 of a block's 32 int8 values (d % 32 is 0, 8, 16 or 24), before / after the block's scale.
  static vec raw(const block_q8_0* row, int d) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row[d / QK8_0].qs + d % QK8_0));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
  }
  static vec at(const block_q8_0* row, int d) { return _mm256_mul_ps(raw(row, d), scale(row, d)); }
  // 8 of a Q4_0 block's 32 values (d % 32 is 0 or 8: low nibbles of bytes 0-7 / 8-15; 16 or 24:
  // their high nibbles), q - 8 / (q - 8) * d.
  static vec raw(const block_q4_0* row, int d) {
    const int j = d % QK4_0;
    const __m128i x = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row[d / QK4_0].qs + j % 16));
    const __m128i nib = _mm_and_si128(j < 16 ? x : _mm_srli_epi16(x, 4), _mm_set1_epi8(0x0F));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(nib), _mm256_set1_epi32(8)));
  }
  static vec at(const block_q4_0* row, int d) { return _mm256_mul_ps(raw(row, d), scale(row, d)); }
  // The scale of the block holding element d, in every lane.
  static vec scale(const block_q8_0* row, int d) { return _mm256_set1_ps(h2f(row[d / QK8_0].d)); }
  static vec scale(const block_q4_0* row, int d) { return _mm256_set1_ps(h2f(row[d / QK4_0].d)); }
  static vec mul(vec a, vec b) { return _mm256_mul_ps(a, b); }
  static vec set1(float x) { return _mm256_set1_ps(x); }
  static vec fmadd(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
  static void store(float* p, vec v) { _mm256_storeu_ps(p, v); }
  static float sum(vec v) { return hsum_ps(v); }
  // {sum(a), sum(b), sum(c), sum(d)}.
  static __m128 sum4(vec a, vec b, vec c, vec d) {
    const __m256 ab = _mm256_hadd_ps(a, b);  // a01 a23 b01 b23 | a45 a67 b45 b67
    const __m256 cd = _mm256_hadd_ps(c, d);
    const __m256 abcd = _mm256_hadd_ps(ab, cd);  // a0123 b0123 c0123 d0123 | a4567 ...
    return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
  }
};

#include "kernels/cpu/attn_rows_impl.h"
#include "kernels/cpu/attn_tiles_impl.h"

}  // namespace

void qk_rows_f32(const float* Q, int nq, const float* K, int n, int D, float scale, float* out, int64_t ldo) {
  if (D % 8 != 0) return generic::qk_rows_f32(Q, nq, K, n, D, scale, out, ldo);
  qk_rows<Simd>(Q, nq, K, n, D, scale, out, ldo);
}
void qk_rows_f16(const float* Q, int nq, const uint16_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  if (D % 8 != 0) return generic::qk_rows_f16(Q, nq, K, n, D, scale, out, ldo);
  qk_rows<Simd>(Q, nq, K, n, D, scale, out, ldo);
}
void pv_rows_f32(const float* P, int nq, int64_t ldp, const float* V, int n, int D, float* acc) {
  if (D % 8 != 0) return generic::pv_rows_f32(P, nq, ldp, V, n, D, acc);
  pv_rows<Simd>(P, nq, ldp, V, n, D, acc);
}
void pv_rows_f16(const float* P, int nq, int64_t ldp, const uint16_t* V, int n, int D, float* acc) {
  if (D % 8 != 0) return generic::pv_rows_f16(P, nq, ldp, V, n, D, acc);
  pv_rows<Simd>(P, nq, ldp, V, n, D, acc);
}
// Q8_0 rows: D is a multiple of 32 (whole blocks).
void qk_rows_q8_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  qk_rows<Simd>(Q, nq, reinterpret_cast<const block_q8_0*>(K), n, D, scale, out, ldo);
}
void pv_rows_q8_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc) {
  pv_rows<Simd>(P, nq, ldp, reinterpret_cast<const block_q8_0*>(V), n, D, acc);
}
// Q4_0 rows: D is a multiple of 32 (whole blocks).
void qk_rows_q4_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  qk_rows<Simd>(Q, nq, reinterpret_cast<const block_q4_0*>(K), n, D, scale, out, ldo);
}
void pv_rows_q4_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc) {
  pv_rows<Simd>(P, nq, ldp, reinterpret_cast<const block_q4_0*>(V), n, D, acc);
}

void qk_panels(const float* Q, int rows, int D, const float* Kt, int n_panels, float* S, int64_t lds) {
  qk_panels_impl<Simd>(Q, rows, D, Kt, n_panels, S, lds);
}
void pv_tile(const float* P, int rows, int64_t ldp, const float* V, int n, int D, float* O) {
  pv_tile_impl<Simd>(P, rows, ldp, V, n, D, O);
}

}  // namespace kvs::kernels::avx2
