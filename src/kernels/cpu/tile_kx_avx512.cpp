// AVX-512 dot tiles of Q2_K, Q3_K, Q5_K and IQ4_XS weight rows against Q8_K activations: RM rows
// x RN tokens per pass, 64 elements (one chunk g) per 512-bit register.
//   Q5_K: as Q4_K (tile_k_avx512.cpp) with the fifth bit: bit 2g / 2g+1 of qh set -> +16 (masked
//         byte add); maddubs(q in [0, 31], q8), vpdpwssd with the 6-bit scale; mins via bsums.
//   Q2_K: maddubs(q in [0, 3], q8), vpdpwssd with the 4-bit scale per 16 elements; the mins as
//         -dmin * sum_s m_s * bsum_s.
//   Q3_K: u = q + 4 in [0, 7] (2 low bits + 4 where the hmask bit is set), maddubs(u, q8),
//         vpdpwssd with (6-bit scale - 32); the -4 offset as -4 * sum_s scale_s * bsum_s, the
//         accumulator's starting value.
//   IQ4_XS: u = grid level + 128 by vpshufb, vpdpbusd(u, q8) minus 128 * (sums of 4 activation
//         bytes) = exact int32 level . q8 per 4 elements, times (6-bit scale - 32) (vpmulld).
// Integer parts are exact, so results differ from the reference only by float summation order.
//
// Dimension legend: n = row length, QK_K = 256 elements per super-block b, h = 128-element half,
// g = 64-element chunk (g = 2h + c), RM/RN = rows/tokens of a pass.
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

// Bytes 0..31 = a, 32..63 = b (for the bit tests of one chunk's two 32-element halves).
inline __m512i bytes2(int a, int b) { return join256(_mm256_set1_epi8(static_cast<char>(a)), _mm256_set1_epi8(static_cast<char>(b))); }

// ---- Q5_K ---------------------------------------------------------------------------------------
template <int RM, int RN>
struct Q5KTile {
  static void run(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
    const block_q5_K* x[RM];
    const block_q8_K* y[RN];
    for (int i = 0; i < RM; ++i) x[i] = reinterpret_cast<const block_q5_K*>(w + i * ws);
    for (int j = 0; j < RN; ++j) y[j] = reinterpret_cast<const block_q8_K*>(a + j * as);
    const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
    __m512 acc[RM][RN];
    for (int i = 0; i < RM; ++i)
      for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
      __m512i sc16[RM];  // [32] int16: scales in lanes 0..7
      __m128i mins[RM];          // [8] int16
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
        const __m512i bits = bytes2(1 << (2 * g), 1 << (2 * g + 1));  // fifth bits of sub-blocks 2g, 2g+1
        for (int i = 0; i < RM; ++i) {
          const __m256i bytes = loadu256(x[i][b].qs + 32 * g);
          const __m512i nib = _mm512_and_si512(join256(bytes, _mm256_srli_epi16(bytes, 4)), m4);
          const __m512i qh = _mm512_broadcast_i64x4(loadu256(x[i][b].qh));  // (reloaded: registers are short)
          u[i] = _mm512_mask_add_epi8(nib, _mm512_test_epi8_mask(qh, bits), nib, b4);
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

// The 2 low bits of chunk g = 2h + c of a Q2_K / Q3_K block: quarters 2c, 2c+1 of half h (bits
// 4c..4c+1 and 4c+2..4c+3 of qs[32h + l]).
inline __m512i k2_chunk(const uint8_t* qs, int g) {
  const __m256i q = loadu256(qs + 32 * (g / 2));
  const int c = g % 2;
  const __m256i lo = c == 0 ? q : _mm256_srli_epi16(q, 4);
  return _mm512_and_si512(join256(lo, _mm256_srli_epi16(lo, 2)), _mm512_set1_epi8(3));
}

// ---- Q2_K ---------------------------------------------------------------------------------------
template <int RM, int RN>
struct Q2KTile {
  static void run(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
    const block_q2_K* x[RM];
    const block_q8_K* y[RN];
    for (int i = 0; i < RM; ++i) x[i] = reinterpret_cast<const block_q2_K*>(w + i * ws);
    for (int j = 0; j < RN; ++j) y[j] = reinterpret_cast<const block_q8_K*>(a + j * as);
    __m512 acc[RM][RN];
    for (int i = 0; i < RM; ++i)
      for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
      __m512i sc16[RM];  // [16] int16 4-bit scales in lanes 0..15
      __m256i mn16[RM];  // [16] int16 4-bit mins
      __m512 dd[RM], dm[RM];
      for (int i = 0; i < RM; ++i) {
        const __m128i s = loadu128(x[i][b].scales);
        sc16[i] = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(s, _mm_set1_epi8(0x0F))));
        mn16[i] = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0x0F)));
        dd[i] = _mm512_set1_ps(h2f(x[i][b].d));
        dm[i] = _mm512_set1_ps(-h2f(x[i][b].dmin));
      }
      __m512i sumi[RM][RN];
      for (int i = 0; i < RM; ++i)
        for (int j = 0; j < RN; ++j) sumi[i][j] = _mm512_setzero_si512();
      for (int g = 0; g < 4; ++g) {
        __m512i q[RM], sc[RM];
        for (int i = 0; i < RM; ++i) {
          q[i] = k2_chunk(x[i][b].qs, g);
          sc[i] = _mm512_permutexvar_epi16(_mm512_load_si512(kQ6KIdx.v[g]), sc16[i]);
        }
        for (int j = 0; j < RN; ++j) {
          const __m512i av = _mm512_loadu_si512(y[j][b].qs + 64 * g);
          for (int i = 0; i < RM; ++i)
            sumi[i][j] = _mm512_dpwssd_epi32(sumi[i][j], _mm512_maddubs_epi16(q[i], av), sc[i]);
        }
      }
      for (int j = 0; j < RN; ++j) {
        const __m256i bs = loadu256(y[j][b].bsums);
        const __m512 da = _mm512_set1_ps(y[j][b].d);
        for (int i = 0; i < RM; ++i) {
          const __m512 m = _mm512_cvtepi32_ps(_mm512_zextsi256_si512(_mm256_madd_epi16(mn16[i], bs)));
          const __m512 f = _mm512_fmadd_ps(m, dm[i], _mm512_mul_ps(_mm512_cvtepi32_ps(sumi[i][j]), dd[i]));
          acc[i][j] = _mm512_fmadd_ps(f, da, acc[i][j]);
        }
      }
    }
    for (int j = 0; j < RN; ++j)
      for (int i = 0; i < RM; ++i) out[j * ldo + i] = reduce_ps(acc[i][j]);
  }
};

// The 16 Q3_K scales minus 32 as signed bytes (layout in quant_blocks.h, q3_K_scale).
inline __m128i q3_K_scales(const uint8_t* s) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t m4 = 0x0F0F0F0F, m2 = 0x03030303;
  const __m128i v = _mm_setr_epi32(static_cast<int>((u[0] & m4) | ((u[2] & m2) << 4)),
                                   static_cast<int>((u[1] & m4) | (((u[2] >> 2) & m2) << 4)),
                                   static_cast<int>(((u[0] >> 4) & m4) | (((u[2] >> 4) & m2) << 4)),
                                   static_cast<int>(((u[1] >> 4) & m4) | (((u[2] >> 6) & m2) << 4)));
  return _mm_sub_epi8(v, _mm_set1_epi8(32));
}

// ---- Q3_K ---------------------------------------------------------------------------------------
template <int RM, int RN>
struct Q3KTile {
  static void run(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
    const block_q3_K* x[RM];
    const block_q8_K* y[RN];
    for (int i = 0; i < RM; ++i) x[i] = reinterpret_cast<const block_q3_K*>(w + i * ws);
    for (int j = 0; j < RN; ++j) y[j] = reinterpret_cast<const block_q8_K*>(a + j * as);
    const __m512i four = _mm512_set1_epi8(4);
    __m512 acc[RM][RN];
    for (int i = 0; i < RM; ++i)
      for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
      __m512i sc16[RM];  // [16] int16 scales - 32 in lanes 0..15
      __m256i nsc4[RM];          // [16] int16: -4 * (scale - 32)
      __m512 dd[RM];
      for (int i = 0; i < RM; ++i) {
        const __m256i s = _mm256_cvtepi8_epi16(q3_K_scales(x[i][b].scales));
        sc16[i] = _mm512_castsi256_si512(s);
        nsc4[i] = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(s, 2));
        dd[i] = _mm512_set1_ps(h2f(x[i][b].d));
      }
      __m512i sumi[RM][RN];
      for (int j = 0; j < RN; ++j) {
        const __m256i bs = loadu256(y[j][b].bsums);
        for (int i = 0; i < RM; ++i) sumi[i][j] = _mm512_zextsi256_si512(_mm256_madd_epi16(nsc4[i], bs));
      }
      for (int g = 0; g < 4; ++g) {
        __m512i u[RM], sc[RM];
        const __m512i bits = bytes2(1 << (2 * g), 1 << (2 * g + 1));  // hmask bits of quarters 2g, 2g+1
        for (int i = 0; i < RM; ++i) {
          const __m512i lo = k2_chunk(x[i][b].qs, g);
          const __m512i hm = _mm512_broadcast_i64x4(loadu256(x[i][b].hmask));
          u[i] = _mm512_mask_add_epi8(lo, _mm512_test_epi8_mask(hm, bits), lo, four);
          sc[i] = _mm512_permutexvar_epi16(_mm512_load_si512(kQ6KIdx.v[g]), sc16[i]);
        }
        for (int j = 0; j < RN; ++j) {
          const __m512i av = _mm512_loadu_si512(y[j][b].qs + 64 * g);
          for (int i = 0; i < RM; ++i)
            sumi[i][j] = _mm512_dpwssd_epi32(sumi[i][j], _mm512_maddubs_epi16(u[i], av), sc[i]);
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

// ---- IQ4_XS -------------------------------------------------------------------------------------
template <int RM, int RN>
struct IQ4XSTile {
  static void run(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
    const block_iq4_xs* x[RM];
    const block_q8_K* y[RN];
    for (int i = 0; i < RM; ++i) x[i] = reinterpret_cast<const block_iq4_xs*>(w + i * ws);
    for (int j = 0; j < RN; ++j) y[j] = reinterpret_cast<const block_q8_K*>(a + j * as);
    // Grid + 128 (unsigned) in every 128-bit lane.
    const __m512i table = _mm512_broadcast_i32x4(_mm_add_epi8(loadu128(kIQ4NLValues), _mm_set1_epi8(-128)));
    const __m512i m4 = _mm512_set1_epi8(0x0F), ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
    __m512 acc[RM][RN];
    for (int i = 0; i < RM; ++i)
      for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
      alignas(32) int32_t ls[RM][8];  // scales - 32
      __m512 dd[RM];
      for (int i = 0; i < RM; ++i) {
        const block_iq4_xs& xb = x[i][b];
        for (int s = 0; s < 8; ++s)
          ls[i][s] = (((xb.scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((xb.scales_h >> (2 * s)) & 3) << 4)) - 32;
        dd[i] = _mm512_set1_ps(h2f(xb.d));
      }
      __m512i sumi[RM][RN];
      for (int i = 0; i < RM; ++i)
        for (int j = 0; j < RN; ++j) sumi[i][j] = zero;
      for (int g = 0; g < 4; ++g) {  // sub-blocks 2g, 2g+1
        __m512i u[RM], sc[RM];
        for (int i = 0; i < RM; ++i) {
          const __m256i q = loadu256(x[i][b].qs + 32 * g);
          // 128-bit lanes: low nibbles of sub-block 2g, its high nibbles, then sub-block 2g+1's.
          const __m512i both = join256(q, _mm256_srli_epi16(q, 4));
          const __m512i nib = _mm512_and_si512(_mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0)), m4);
          u[i] = _mm512_shuffle_epi8(table, nib);
          sc[i] = _mm512_inserti64x4(_mm512_set1_epi32(ls[i][2 * g]), _mm256_set1_epi32(ls[i][2 * g + 1]), 1);
        }
        for (int j = 0; j < RN; ++j) {
          const __m512i av = _mm512_loadu_si512(y[j][b].qs + 64 * g);
          const __m512i corr = _mm512_sub_epi32(zero, _mm512_slli_epi32(_mm512_dpbusd_epi32(zero, ones, av), 7));
          for (int i = 0; i < RM; ++i)
            sumi[i][j] = _mm512_add_epi32(sumi[i][j], _mm512_mullo_epi32(_mm512_dpbusd_epi32(corr, u[i], av), sc[i]));
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

float dot_q2_K(const void* w, const void* act, int64_t n) { return dot1<Q2KTile>(w, act, n); }
float dot_q3_K(const void* w, const void* act, int64_t n) { return dot1<Q3KTile>(w, act, n); }
float dot_q5_K(const void* w, const void* act, int64_t n) { return dot1<Q5KTile>(w, act, n); }
float dot_iq4_xs(const void* w, const void* act, int64_t n) { return dot1<IQ4XSTile>(w, act, n); }

void tile_q2_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
               int64_t ldo) {
  tile<Q2KTile>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q3_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
               int64_t ldo) {
  tile<Q3KTile>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q5_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
               int64_t ldo) {
  tile<Q5KTile>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_iq4_xs(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
                 int64_t ldo) {
  tile<IQ4XSTile>(w, ws, nr, a, as, nt, n, out, ldo);
}

}  // namespace kvs::kernels::avx512

#include "kernels/cpu/avx512_end.h"
