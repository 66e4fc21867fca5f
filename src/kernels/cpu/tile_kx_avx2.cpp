// AVX2 kernels for the 256-element formats Q2_K, Q3_K, Q5_K and IQ4_XS (layouts in quant_blocks.h), all
// against Q8_K activations: row dequantisers (exact with the scalar reference: the same float
// operations) and dot tiles of one weight row against up to kNT tokens per pass.
//   Q2_K: maddubs(q in [0, 3], q8) * 4-bit scale per 16 elements; the mins through the bsums.
//   Q3_K: maddubs(q + 4 in [0, 7], q8) * (6-bit scale - 32) per 16 elements; the -4 offset as
//         -4 * sum_s scale_s * bsum_s, the starting value of the integer sum.
//   Q5_K: as Q4_K with the fifth bit from qh: maddubs(q in [0, 31], q8) * 6-bit scale; mins
//         through the bsums.
//   IQ4_XS: grid levels by vpshufb, sign trick + maddubs, * (6-bit scale - 32) per 32 elements.
// Integer parts are exact, so results differ from the reference only by float summation order.
//
// Dimension legend: n = row length, NT = tokens per pass (1..kNT), b = super-block (256),
// h = 128-element half, k = 32-element quarter of a half, g = 64-element group, s = sub-block.
#include <cstring>

#include "kernels/cpu/impl.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/quant.h"

namespace kvs::kernels::avx2 {
namespace {

// Byte shuffles broadcasting int16 element 2k (low 128-bit lane) and 2k+1 (high lane).
inline __m256i pair_shuffle(int k) {
  const char a = static_cast<char>(4 * k), b = static_cast<char>(4 * k + 1), c = static_cast<char>(4 * k + 2),
             d = static_cast<char>(4 * k + 3);
  return _mm256_setr_epi8(a, b, a, b, a, b, a, b, a, b, a, b, a, b, a, b, c, d, c, d, c, d, c, d, c, d, c, d, c, d, c,
                          d);
}

// The 16 Q3_K scales minus 32 (signed bytes): low 4 bits from bytes 0-7 (j < 8 low nibble of
// byte j, j >= 8 high nibble of byte j - 8), high 2 bits from bytes 8-11 (bits 2 (j / 4)).
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

inline int iq4_xs_ls(const block_iq4_xs& x, int s) {
  return (((x.scales_l[s / 2] >> (4 * (s % 2))) & 0xF) | (((x.scales_h >> (2 * s)) & 3) << 4)) - 32;
}

inline __m256i iq4nl_table() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
}

// The 32 nibbles at qs (16 bytes) in element order: low nibbles then high nibbles.
inline __m256i unpack_nib32(const uint8_t* qs) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}

// Horizontal sum of the 4 lanes of an __m128.
inline float hsum128(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  v = _mm_add_ss(v, _mm_movehdup_ps(v));
  return _mm_cvtss_f32(v);
}

// ---- Q2_K ---------------------------------------------------------------------------------------
template <int NT>
struct Q2KRow {
  static void run(const uint8_t* w, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
    const auto* x = reinterpret_cast<const block_q2_K*>(w);
    const block_q8_K* y[NT];
    for (int t = 0; t < NT; ++t) y[t] = reinterpret_cast<const block_q8_K*>(a + t * as);
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc[NT], acc_m[NT];
    for (int t = 0; t < NT; ++t) acc[t] = acc_m[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
      const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].scales));
      const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sm, _mm_set1_epi8(0x0F)));  // [16] scales
      const __m256i mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0x0F)));
      const float dx = h2f(x[b].d), dmx = h2f(x[b].dmin);
      __m256i sumi[NT];
      for (int t = 0; t < NT; ++t) {
        const __m256i mins = _mm256_madd_epi16(mn16, loadu256(y[t][b].bsums));
        acc_m[t] = _mm256_fmadd_ps(_mm256_set1_ps(-dmx * y[t][b].d), _mm256_cvtepi32_ps(mins), acc_m[t]);
        sumi[t] = _mm256_setzero_si256();
      }
      for (int h = 0; h < 2; ++h) {
        const __m256i qs = loadu256(x[b].qs + 32 * h);
        const __m256i sch = h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                                   : _mm256_permute2x128_si256(sc16, sc16, 0x11);
        for (int k = 0; k < 4; ++k) {
          const __m256i q = _mm256_and_si256(k == 0 ? qs : _mm256_srli_epi16(qs, 2 * k), m3);
          const __m256i scl = _mm256_shuffle_epi8(sch, pair_shuffle(k));
          for (int t = 0; t < NT; ++t) {
            const __m256i p = _mm256_maddubs_epi16(q, loadu256(y[t][b].qs + 128 * h + 32 * k));
            sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, scl));
          }
        }
      }
      for (int t = 0; t < NT; ++t)
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y[t][b].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
    for (int t = 0; t < NT; ++t) out[t * ldo] = hsum_ps(_mm256_add_ps(acc[t], acc_m[t]));
  }
};

// ---- Q3_K ---------------------------------------------------------------------------------------
template <int NT>
struct Q3KRow {
  static void run(const uint8_t* w, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
    const auto* x = reinterpret_cast<const block_q3_K*>(w);
    const block_q8_K* y[NT];
    for (int t = 0; t < NT; ++t) y[t] = reinterpret_cast<const block_q8_K*>(a + t * as);
    const __m256i m3 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    __m256 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
      const __m256i sc16 = _mm256_cvtepi8_epi16(q3_K_scales(x[b].scales));  // [16] scale - 32
      __m256i sumi[NT];
      for (int t = 0; t < NT; ++t)  // the -4 offset: -4 * sum_s scale_s * bsum_s
        sumi[t] = _mm256_sub_epi32(_mm256_setzero_si256(),
                                   _mm256_slli_epi32(_mm256_madd_epi16(sc16, loadu256(y[t][b].bsums)), 2));
      __m256i hm = loadu256(x[b].hmask);  // bit 0 of each byte: the high bit of quarter 4h + k
      for (int h = 0; h < 2; ++h) {
        const __m256i qs = loadu256(x[b].qs + 32 * h);
        const __m256i sch = h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                                   : _mm256_permute2x128_si256(sc16, sc16, 0x11);
        for (int k = 0; k < 4; ++k) {
          const __m256i lo = _mm256_and_si256(k == 0 ? qs : _mm256_srli_epi16(qs, 2 * k), m3);
          const __m256i q = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hm, 2), four));  // [0, 7]
          hm = _mm256_srli_epi16(hm, 1);
          const __m256i scl = _mm256_shuffle_epi8(sch, pair_shuffle(k));
          for (int t = 0; t < NT; ++t) {
            const __m256i p = _mm256_maddubs_epi16(q, loadu256(y[t][b].qs + 128 * h + 32 * k));
            sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(p, scl));
          }
        }
      }
      const float dx = h2f(x[b].d);
      for (int t = 0; t < NT; ++t)
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y[t][b].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
    for (int t = 0; t < NT; ++t) out[t * ldo] = hsum_ps(acc[t]);
  }
};

// ---- Q5_K ---------------------------------------------------------------------------------------
template <int NT>
struct Q5KRow {
  static void run(const uint8_t* w, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
    const auto* x = reinterpret_cast<const block_q5_K*>(w);
    const block_q8_K* y[NT];
    for (int t = 0; t < NT; ++t) y[t] = reinterpret_cast<const block_q8_K*>(a + t * as);
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    __m256 acc[NT];
    __m128 acc_m[NT];
    for (int t = 0; t < NT; ++t) {
      acc[t] = _mm256_setzero_ps();
      acc_m[t] = _mm_setzero_ps();
    }
    for (int64_t b = 0; b < n / QK_K; ++b) {
      alignas(16) uint8_t sm[16];  // [0..7] scales, [8..15] mins
      unpack_q4_K_scales(x[b].scales, sm);
      const float dxs = h2f(x[b].d), dxm = h2f(x[b].dmin);
      const __m256i sm16 = _mm256_cvtepu8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(sm)));
      const __m128i mins = _mm256_extracti128_si256(sm16, 1);
      const __m256i scales = _mm256_permute2x128_si256(sm16, sm16, 0x00);
      __m256i sumi[NT];
      for (int t = 0; t < NT; ++t) {
        const __m256i bs = loadu256(y[t][b].bsums);
        const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
        acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(-y[t][b].d * dxm), _mm_cvtepi32_ps(_mm_madd_epi16(mins, q8s)), acc_m[t]);
        sumi[t] = _mm256_setzero_si256();
      }
      __m256i hb = loadu256(x[b].qh);  // bits 0, 1 of each byte: the fifth bits of sub-blocks 2g, 2g+1
      for (int g = 0; g < 4; ++g) {
        const __m256i bytes = loadu256(x[b].qs + 32 * g);
        const __m256i lo = _mm256_or_si256(_mm256_and_si256(bytes, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), b4));
        const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4),
                                           _mm256_and_si256(_mm256_slli_epi16(hb, 3), b4));
        hb = _mm256_srli_epi16(hb, 2);
        const __m256i scl = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((4 * g) | ((4 * g + 1) << 8))));
        const __m256i sch =
            _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>((4 * g + 2) | ((4 * g + 3) << 8))));
        for (int t = 0; t < NT; ++t) {
          const int8_t* ya = y[t][b].qs + 64 * g;
          const __m256i pl = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, loadu256(ya)), scl);
          const __m256i ph = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, loadu256(ya + 32)), sch);
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(pl, ph));
        }
      }
      for (int t = 0; t < NT; ++t)
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][b].d * dxs), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
    for (int t = 0; t < NT; ++t) out[t * ldo] = hsum_ps(acc[t]) + hsum128(acc_m[t]);
  }
};

// ---- IQ4_XS -------------------------------------------------------------------------------------
template <int NT>
struct IQ4XSRow {
  static void run(const uint8_t* w, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
    const auto* x = reinterpret_cast<const block_iq4_xs*>(w);
    const block_q8_K* y[NT];
    for (int t = 0; t < NT; ++t) y[t] = reinterpret_cast<const block_q8_K*>(a + t * as);
    const __m256i table = iq4nl_table();
    __m256 acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
      __m256i sumi[NT];
      for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        const __m256i v = _mm256_shuffle_epi8(table, unpack_nib32(x[b].qs + 16 * s));  // levels
        const __m256i av = _mm256_sign_epi8(v, v);
        const __m256i sc = _mm256_set1_epi16(static_cast<short>(iq4_xs_ls(x[b], s)));
        for (int t = 0; t < NT; ++t) {
          const __m256i sy = _mm256_sign_epi8(loadu256(y[t][b].qs + 32 * s), v);
          sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_maddubs_epi16(av, sy), sc));
        }
      }
      const float dx = h2f(x[b].d);
      for (int t = 0; t < NT; ++t)
        acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(dx * y[t][b].d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
    for (int t = 0; t < NT; ++t) out[t * ldo] = hsum_ps(acc[t]);
  }
};

// out[0..n) = float(signed bytes q[0..n)) * d (- m when Sub), n a multiple of 8.
template <bool Sub>
inline void store_scaled(float* out, const int8_t* q, int n, float d, float m) {
  const __m256 dv = _mm256_set1_ps(d), mv = _mm256_set1_ps(m);
  for (int i = 0; i < n; i += 8) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i));
    const __m256 v = _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b)));
    _mm256_storeu_ps(out + i, Sub ? _mm256_sub_ps(v, mv) : v);
  }
}

}  // namespace

void dequant_q2_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q2_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b, dst += QK_K) {
    const float d = h2f(x[b].d), dmin = h2f(x[b].dmin);
    alignas(32) int8_t q[256];  // element order
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = loadu256(x[b].qs + 32 * h);
      for (int k = 0; k < 4; ++k)
        _mm256_store_si256(reinterpret_cast<__m256i*>(q + 128 * h + 32 * k),
                           _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(3)));
    }
    for (int s = 0; s < 16; ++s)
      store_scaled<true>(dst + 16 * s, q + 16 * s, 16, d * (x[b].scales[s] & 0xF), dmin * (x[b].scales[s] >> 4));
  }
}

void dequant_q3_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q3_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b, dst += QK_K) {
    const float d = h2f(x[b].d);
    alignas(16) int8_t sc[16];
    _mm_store_si128(reinterpret_cast<__m128i*>(sc), q3_K_scales(x[b].scales));
    alignas(32) int8_t q[256];  // element order, in [-4, 3]
    __m256i hm = loadu256(x[b].hmask);
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = loadu256(x[b].qs + 32 * h);
      for (int k = 0; k < 4; ++k) {
        const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * k)), _mm256_set1_epi8(3));
        const __m256i hi = _mm256_and_si256(_mm256_slli_epi16(hm, 2), _mm256_set1_epi8(4));
        hm = _mm256_srli_epi16(hm, 1);
        _mm256_store_si256(reinterpret_cast<__m256i*>(q + 128 * h + 32 * k),
                           _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(4)));
      }
    }
    for (int s = 0; s < 16; ++s) store_scaled<false>(dst + 16 * s, q + 16 * s, 16, d * sc[s], 0.0f);
  }
}

void dequant_q5_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q5_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b, dst += QK_K) {
    const float d = h2f(x[b].d), dmin = h2f(x[b].dmin);
    alignas(16) uint8_t sm[16];
    unpack_q4_K_scales(x[b].scales, sm);
    alignas(32) int8_t q[256];
    __m256i hb = loadu256(x[b].qh);
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    for (int g = 0; g < 4; ++g) {
      const __m256i bytes = loadu256(x[b].qs + 32 * g);
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 64 * g),
                         _mm256_or_si256(_mm256_and_si256(bytes, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), b4)));
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 64 * g + 32),
                         _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), m4),
                                         _mm256_and_si256(_mm256_slli_epi16(hb, 3), b4)));
      hb = _mm256_srli_epi16(hb, 2);
    }
    for (int s = 0; s < 8; ++s) store_scaled<true>(dst + 32 * s, q + 32 * s, 32, d * sm[s], dmin * sm[8 + s]);
  }
}

void dequant_iq4_xs(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_iq4_xs*>(src);
  const __m256i table = iq4nl_table();
  for (int64_t b = 0; b < n / QK_K; ++b, dst += QK_K) {
    const float d = h2f(x[b].d);
    for (int s = 0; s < 8; ++s) {
      alignas(32) int8_t v[32];
      _mm256_store_si256(reinterpret_cast<__m256i*>(v), _mm256_shuffle_epi8(table, unpack_nib32(x[b].qs + 16 * s)));
      store_scaled<false>(dst + 32 * s, v, 32, d * iq4_xs_ls(x[b], s), 0.0f);
    }
  }
}

float dot_q2_K(const void* w, const void* act, int64_t n) { return dot1<Q2KRow>(w, act, n); }
float dot_q3_K(const void* w, const void* act, int64_t n) { return dot1<Q3KRow>(w, act, n); }
float dot_q5_K(const void* w, const void* act, int64_t n) { return dot1<Q5KRow>(w, act, n); }
float dot_iq4_xs(const void* w, const void* act, int64_t n) { return dot1<IQ4XSRow>(w, act, n); }

void tile_q2_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
               int64_t ldo) {
  tile_by_tokens<Q2KRow>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q3_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
               int64_t ldo) {
  tile_by_tokens<Q3KRow>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q5_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
               int64_t ldo) {
  tile_by_tokens<Q5KRow>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_iq4_xs(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
                 int64_t ldo) {
  tile_by_tokens<IQ4XSRow>(w, ws, nr, a, as, nt, n, out, ldo);
}

}  // namespace kvs::kernels::avx2
