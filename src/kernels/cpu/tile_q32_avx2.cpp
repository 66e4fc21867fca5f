// AVX2 kernels for the 32-element formats Q4_1, Q5_0, Q5_1 and IQ4_NL (layouts in quant_blocks.h):
// row dequantisers (exact with the scalar reference: the same float operations) and dot tiles of
// one weight row against up to kNT tokens per pass, each block decoded once for all tokens.
//   Q5_0 / IQ4_NL x Q8_0: the block's signed levels (q - 16, or the IQ4_NL grid value looked up
//     by vpshufb) -> sign trick + maddubs/madd -> 8 int32, scaled by d_w * d_a.
//   Q4_1 / Q5_1 x Q8_1: maddubs(q in [0, 31], q8) -> madd -> 8 int32, scaled by d_w * d_a, plus
//     m_w * (the activation block's sum, prepared with the activation).
// Integer parts are exact, so results differ from the reference only by float summation order.
//
// Dimension legend: n = row length, nt = tokens in the tile, NT = tokens per pass (1..kNT),
// b = block (32 elements), l = byte of the 16 nibble bytes.
#include <cstring>

#include "kernels/cpu/impl.h"
#include "kernels/cpu/simd_avx2.h"
#include "kernels/quant.h"

namespace kvs::kernels::avx2 {
namespace {

// The 32 nibbles of a 32-element block in element order (low nibbles 0..15, high 16..31).
inline __m256i unpack_nib32(const uint8_t* qs) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0F));
}

// 32 bytes, 0xFF where bit j of the little-endian 32-bit word at p is set (byte j), else 0.
inline __m256i bytes_from_bits(const uint8_t* p) {
  uint32_t x;
  std::memcpy(&x, p, 4);
  // Byte j takes byte j / 8 of x (each 128-bit lane holds x four times), then tests bit j % 8.
  const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3,
                                        3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ULL));
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)), shuf), bit);
  return _mm256_cmpeq_epi8(v, bit);
}

// 5-bit quants in [0, 31]: nibble | bit 4 from qh.
inline __m256i unpack_q5(const uint8_t* qs, const uint8_t* qh) {
  return _mm256_or_si256(unpack_nib32(qs), _mm256_and_si256(bytes_from_bits(qh), _mm256_set1_epi8(0x10)));
}

inline __m256i iq4nl_table() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIQ4NLValues)));
}

// ---- weight formats: signed levels (Q8_0 activations) or unsigned quants + offset (Q8_1) -------
struct LevelsQ5_0 {
  using Block = block_q5_0;
  static __m256i q(const Block& b) { return _mm256_sub_epi8(unpack_q5(b.qs, b.qh), _mm256_set1_epi8(16)); }
};
struct LevelsIQ4_NL {
  using Block = block_iq4_nl;
  static __m256i q(const Block& b) { return _mm256_shuffle_epi8(iq4nl_table(), unpack_nib32(b.qs)); }
};
struct QuantsQ4_1 {
  using Block = block_q4_1;
  static __m256i q(const Block& b) { return unpack_nib32(b.qs); }
};
struct QuantsQ5_1 {
  using Block = block_q5_1;
  static __m256i q(const Block& b) { return unpack_q5(b.qs, b.qh); }
};

// Signed levels in [-127, 127] against Q8_0 activations.
template <class U>
struct SignedRow {
  template <int NT>
  struct K {
    static void run(const uint8_t* w, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
      using Block = typename U::Block;
      const auto* x = reinterpret_cast<const Block*>(w);
      const block_q8_0* y[NT];
      const float* dy[NT];  // float copies of the activation block scales
      for (int t = 0; t < NT; ++t) {
        y[t] = reinterpret_cast<const block_q8_0*>(a + t * as);
        dy[t] = act_q8_0_scales(a + t * as, n);
      }
      const int64_t nb = n / 32;
      const __m256i ones = _mm256_set1_epi16(1);
      __m256 acc0[NT], acc1[NT];
      for (int t = 0; t < NT; ++t) acc0[t] = acc1[t] = _mm256_setzero_ps();
      auto step = [&](int64_t b, __m256* acc) {
        const __m256i qx = U::q(x[b]);
        const __m256i ax = _mm256_sign_epi8(qx, qx);
        const __m256 dx = h2f_bcast(&x[b].d);
        for (int t = 0; t < NT; ++t) {
          const __m256i sy = _mm256_sign_epi8(loadu256(y[t][b].qs), qx);
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), ones);
          acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_broadcast_ss(dy[t] + b)), _mm256_cvtepi32_ps(p), acc[t]);
        }
      };
      int64_t b = 0;
      for (; b + 2 <= nb; b += 2) {
        step(b, acc0);
        step(b + 1, acc1);
      }
      if (b < nb) step(b, acc0);
      for (int t = 0; t < NT; ++t) out[t * ldo] = hsum_ps(_mm256_add_ps(acc0[t], acc1[t]));
    }
  };
};

// Unsigned quants in [0, 31] with a per-block offset m against Q8_1 activations.
template <class U>
struct OffsetRow {
  template <int NT>
  struct K {
    static void run(const uint8_t* w, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
      using Block = typename U::Block;
      const auto* x = reinterpret_cast<const Block*>(w);
      const block_q8_0* y[NT];
      const float *dy[NT], *sy[NT];  // activation block scales and sums
      for (int t = 0; t < NT; ++t) {
        y[t] = reinterpret_cast<const block_q8_0*>(a + t * as);
        dy[t] = act_q8_0_scales(a + t * as, n);
        sy[t] = act_q8_1_sums(a + t * as, n);
      }
      const int64_t nb = n / 32;
      const __m256i ones = _mm256_set1_epi16(1);
      __m256 acc[NT];
      float accm[NT];  // sum_b m_w * s_a
      for (int t = 0; t < NT; ++t) {
        acc[t] = _mm256_setzero_ps();
        accm[t] = 0.0f;
      }
      for (int64_t b = 0; b < nb; ++b) {
        const __m256i qx = U::q(x[b]);
        const __m256 dx = h2f_bcast(&x[b].d);
        const float mx = h2f(x[b].m);
        for (int t = 0; t < NT; ++t) {
          const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(qx, loadu256(y[t][b].qs)), ones);
          acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_broadcast_ss(dy[t] + b)), _mm256_cvtepi32_ps(p), acc[t]);
          accm[t] += mx * sy[t][b];
        }
      }
      for (int t = 0; t < NT; ++t) out[t * ldo] = hsum_ps(acc[t]) + accm[t];
    }
  };
};

template <int NT>
using Q5_0K = SignedRow<LevelsQ5_0>::K<NT>;
template <int NT>
using IQ4_NLK = SignedRow<LevelsIQ4_NL>::K<NT>;
template <int NT>
using Q4_1K = OffsetRow<QuantsQ4_1>::K<NT>;
template <int NT>
using Q5_1K = OffsetRow<QuantsQ5_1>::K<NT>;

// out[0..31] = the 32 signed bytes of q converted to float, times d, plus m (when Add).
template <bool Add>
inline void store_block(float* out, __m256i q, __m256 d, __m256 m) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; ++k) {
    const __m256 v = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k])));
    _mm256_storeu_ps(out + 8 * k, Add ? _mm256_add_ps(v, m) : v);
  }
}

}  // namespace

void quant_act_q8_1(const float* x, void* y, int64_t n) {
  quant_act_q8_0(x, y, n);
  finish_act_q8_1(y, n);
}

void dequant_q4_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q4_1*>(src);
  for (int64_t b = 0; b < n / 32; ++b, dst += 32)
    store_block<true>(dst, QuantsQ4_1::q(x[b]), _mm256_set1_ps(h2f(x[b].d)), _mm256_set1_ps(h2f(x[b].m)));
}

void dequant_q5_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q5_1*>(src);
  for (int64_t b = 0; b < n / 32; ++b, dst += 32)
    store_block<true>(dst, QuantsQ5_1::q(x[b]), _mm256_set1_ps(h2f(x[b].d)), _mm256_set1_ps(h2f(x[b].m)));
}

void dequant_q5_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q5_0*>(src);
  for (int64_t b = 0; b < n / 32; ++b, dst += 32)
    store_block<false>(dst, LevelsQ5_0::q(x[b]), _mm256_set1_ps(h2f(x[b].d)), _mm256_setzero_ps());
}

void dequant_iq4_nl(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_iq4_nl*>(src);
  for (int64_t b = 0; b < n / 32; ++b, dst += 32)
    store_block<false>(dst, LevelsIQ4_NL::q(x[b]), _mm256_set1_ps(h2f(x[b].d)), _mm256_setzero_ps());
}

float dot_q4_1(const void* w, const void* act, int64_t n) { return dot1<Q4_1K>(w, act, n); }
float dot_q5_0(const void* w, const void* act, int64_t n) { return dot1<Q5_0K>(w, act, n); }
float dot_q5_1(const void* w, const void* act, int64_t n) { return dot1<Q5_1K>(w, act, n); }
float dot_iq4_nl(const void* w, const void* act, int64_t n) { return dot1<IQ4_NLK>(w, act, n); }

void tile_q4_1(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
               int64_t ldo) {
  tile_by_tokens<Q4_1K>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q5_0(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
               int64_t ldo) {
  tile_by_tokens<Q5_0K>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q5_1(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
               int64_t ldo) {
  tile_by_tokens<Q5_1K>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_iq4_nl(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
                 int64_t ldo) {
  tile_by_tokens<IQ4_NLK>(w, ws, nr, a, as, nt, n, out, ldo);
}

}  // namespace kvs::kernels::avx2
