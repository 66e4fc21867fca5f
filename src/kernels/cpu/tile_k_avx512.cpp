// AVX-512 dot tiles of Q4_K / Q6_K weight rows against Q8_K activations: RM rows x RN tokens per
// pass, 64 elements per 512-bit register.
//   Q4_K: maddubs(nibbles, q8) -> int16 pairs, vpdpwssd with the 6-bit sub-block scale -> int32;
//         the mins through the activation's bsums (-dmin * sum_s m_s * bsum_s).
//   Q6_K: maddubs(q6 in [0, 63], q8) -> int16 pairs, vpdpwssd with the int8 sub-block scale; the
//         -32 offset as -32 * sum_s scale_s * bsum_s, the accumulator's starting value.
// Integer parts are exact (maddubs pairs stay below 2 * 63 * 127), so results differ from the
// reference only by float summation order.
//
// Dimension legend: n = row length, QK_K = 256 elements per super-block b, g = 64-element chunk,
// RM/RN = rows/tokens of a pass.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/impl.h"
#include "kernels/quant.h"
// clang-format off
#include "kernels/cpu/avx512_begin.h"
#include "kernels/cpu/simd_avx512.h"
#include "kernels/cpu/tile_k_avx512.h"
// clang-format on

namespace kvs::kernels::avx512 {
namespace {

template <int RM, int RN>
struct Q4KTile {
  static void run(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
    const block_q4_K* x[RM];
    const block_q8_K* y[RN];
    for (int i = 0; i < RM; ++i) x[i] = reinterpret_cast<const block_q4_K*>(w + i * ws);
    for (int j = 0; j < RN; ++j) y[j] = reinterpret_cast<const block_q8_K*>(a + j * as);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512 acc[RM][RN];
    for (int i = 0; i < RM; ++i)
      for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
      __m512i sc16[RM];  // [32] int16: this block's 8 scales in lanes 0..7 (the rest unused)
      __m128i mins[RM];  // [8] int16
      __m512 dd[RM], dm[RM];
      for (int i = 0; i < RM; ++i) {
        const __m128i sm = q4_K_scales_mins(x[i][b].scales);
        sc16[i] = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(sm));
        mins[i] = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
        dd[i] = _mm512_set1_ps(h2f(x[i][b].d));
        dm[i] = _mm512_set1_ps(-h2f(x[i][b].dmin));
      }
      __m512i sumi[RM][RN];
      for (int i = 0; i < RM; ++i)
        for (int j = 0; j < RN; ++j) sumi[i][j] = _mm512_setzero_si512();
      for (int g = 0; g < 4; ++g) {
        __m512i u[RM], sc[RM];
        for (int i = 0; i < RM; ++i) {
          const __m256i bytes = loadu256(x[i][b].qs + 32 * g);
          u[i] = _mm512_and_si512(join256(bytes, _mm256_srli_epi16(bytes, 4)), m4);  // sub-blocks 2g, 2g+1
          sc[i] = _mm512_permutexvar_epi16(_mm512_load_si512(kQ4KIdx.v[g]), sc16[i]);
        }
        for (int j = 0; j < RN; ++j) {
          const __m512i av = _mm512_loadu_si512(y[j][b].qs + 64 * g);
          for (int i = 0; i < RM; ++i)
            sumi[i][j] = _mm512_dpwssd_epi32(sumi[i][j], _mm512_maddubs_epi16(u[i], av), sc[i]);
        }
      }
      for (int j = 0; j < RN; ++j) {
        const __m256i bs = loadu256(y[j][b].bsums);
        // [8] int16: activation sums of the 32-element sub-blocks.
        const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        const __m512 da = _mm512_set1_ps(y[j][b].d);
        for (int i = 0; i < RM; ++i) {
          const __m512 m = _mm512_cvtepi32_ps(_mm512_zextsi128_si512(_mm_madd_epi16(mins[i], q8s)));
          const __m512 f = _mm512_fmadd_ps(m, dm[i], _mm512_mul_ps(_mm512_cvtepi32_ps(sumi[i][j]), dd[i]));
          acc[i][j] = _mm512_fmadd_ps(f, da, acc[i][j]);
        }
      }
    }
    for (int j = 0; j < RN; ++j)
      for (int i = 0; i < RM; ++i) out[j * ldo + i] = reduce_ps(acc[i][j]);
  }
};

template <int RM, int RN>
struct Q6KTile {
  static void run(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
    const block_q6_K* x[RM];
    const block_q8_K* y[RN];
    for (int i = 0; i < RM; ++i) x[i] = reinterpret_cast<const block_q6_K*>(w + i * ws);
    for (int j = 0; j < RN; ++j) y[j] = reinterpret_cast<const block_q8_K*>(a + j * as);
    const __m512i m4 = _mm512_set1_epi8(0x0F), m2 = _mm512_set1_epi8(0x30);
    __m512 acc[RM][RN];
    for (int i = 0; i < RM; ++i)
      for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
      __m512i sc16[RM];   // [16] int16 scales in lanes 0..15
      __m256i nsc32[RM];  // [16] int16: -32 * scale
      __m512 dd[RM];
      for (int i = 0; i < RM; ++i) {
        const __m256i s = _mm256_cvtepi8_epi16(loadu128(x[i][b].scales));
        sc16[i] = _mm512_castsi256_si512(s);
        nsc32[i] = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(s, 5));
        dd[i] = _mm512_set1_ps(h2f(x[i][b].d));
      }
      __m512i sumi[RM][RN];
      for (int j = 0; j < RN; ++j) {
        const __m256i bs = loadu256(y[j][b].bsums);
        for (int i = 0; i < RM; ++i) sumi[i][j] = _mm512_zextsi256_si512(_mm256_madd_epi16(nsc32[i], bs));
      }
      for (int h = 0; h < 2; ++h) {
        for (int c = 0; c < 2; ++c) {  // chunk g = 2h + c: elements 128h + 64c .. + 63
          __m512i q[RM], sc[RM];
          for (int i = 0; i < RM; ++i) {
            const __m512i ql = _mm512_loadu_si512(x[i][b].ql + 64 * h);  // [ql0 | ql1]
            const __m256i qh = loadu256(x[i][b].qh + 32 * h);
            const __m512i hi = c == 0 ? join256(_mm256_slli_epi16(qh, 4), _mm256_slli_epi16(qh, 2))
                                      : join256(qh, _mm256_srli_epi16(qh, 2));
            const __m512i lo = c == 0 ? ql : _mm512_srli_epi16(ql, 4);
            q[i] = _mm512_or_si512(_mm512_and_si512(lo, m4), _mm512_and_si512(hi, m2));
            sc[i] = _mm512_permutexvar_epi16(_mm512_load_si512(kQ6KIdx.v[2 * h + c]), sc16[i]);
          }
          for (int j = 0; j < RN; ++j) {
            const __m512i av = _mm512_loadu_si512(y[j][b].qs + 128 * h + 64 * c);
            for (int i = 0; i < RM; ++i)
              sumi[i][j] = _mm512_dpwssd_epi32(sumi[i][j], _mm512_maddubs_epi16(q[i], av), sc[i]);
          }
        }
      }
      for (int j = 0; j < RN; ++j) {
        const __m512 da = _mm512_set1_ps(y[j][b].d);
        for (int i = 0; i < RM; ++i)
          acc[i][j] = _mm512_fmadd_ps(_mm512_mul_ps(dd[i], da), _mm512_cvtepi32_ps(sumi[i][j]), acc[i][j]);
      }
    }
    for (int j = 0; j < RN; ++j)
      for (int i = 0; i < RM; ++i) out[j * ldo + i] = reduce_ps(acc[i][j]);
  }
};

}  // namespace

float dot_q4_K(const void* w, const void* act, int64_t n) { return dot1<Q4KTile>(w, act, n); }
float dot_q6_K(const void* w, const void* act, int64_t n) { return dot1<Q6KTile>(w, act, n); }

void tile_q4_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
               int64_t ldo) {
  tile<Q4KTile>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q6_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
               int64_t ldo) {
  tile<Q6KTile>(w, ws, nr, a, as, nt, n, out, ldo);
}

}  // namespace kvs::kernels::avx512

#include "kernels/cpu/avx512_end.h"
