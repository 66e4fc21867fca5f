// AVX-512 VNNI dot tiles of the 32-element formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL) against
// Q8_0 / Q8_1 activations: RM rows x RN tokens per pass (up to 4 x 4), two 32-element blocks per
// 512-bit register.
//
// vpdpbusd multiplies unsigned by signed bytes, so the weights are made unsigned by an offset
// (Q8_0: u = q + 128, i.e. q xor 0x80; Q4_0: the stored nibble, u = q + 8; Q5_0: the 5-bit quant,
// u = q + 16; IQ4_NL: the grid level + 128 looked up by vpshufb) and the offset is taken back
// exactly in integers: the accumulator of each (row, token) pair starts at -offset * (sums of 4
// activation bytes), computed once per token with vpdpbusd(1, a). Q4_1 / Q5_1 store unsigned
// quants and an offset m instead: u = q needs no correction, and m_w * (the activation block's
// sum, prepared with the Q8_1 activation) is added in fp32. Each block's int32 sums are then
// scaled by d_w * d_a and accumulated in fp32 (FMA), as the AVX2 tiles do; only the float
// summation order differs from the reference.
//
// Dimension legend: n = row length, nb = n / 32 blocks, RM/RN = rows/tokens of a pass, b = block.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/impl.h"
#include "kernels/quant.h"
// clang-format off
#include "kernels/cpu/avx512_begin.h"
#include "kernels/cpu/simd_avx512.h"
// clang-format on

namespace kvs::kernels::avx512 {
namespace {

// Software prefetch distance for the weight stream (as the AVX2 tiles: decode reads weight rows
// back to back and the hardware prefetcher alone leaves bandwidth unused).
constexpr size_t kPrefetchBytes = 4096;

inline void prefetch(const uint8_t* p, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}

// Weight formats: Block, kShift (u = level + 2^kShift; 0 = unsigned quants, no correction), kMin
// (Block has an offset m that multiplies the activation block sums), u<Two>(x) = the unsigned
// weight bytes of blocks b, b+1 (Two) or b alone (upper half 0), in activation order.
struct Q8_0W {
  using Block = block_q8_0;
  static constexpr int kShift = 7;  // u = q + 2^7
  static constexpr bool kMin = false;
  template <bool Two>
  static __m512i u(const Block* x) {
    const __m256i lo = loadu256(x[0].qs);
    const __m256i hi = Two ? loadu256(x[1].qs) : _mm256_set1_epi8(-128);  // -> 0 after the xor
    return _mm512_xor_si512(join256(lo, hi), _mm512_set1_epi8(-128));
  }
};

// The nibbles of one or two 32-element blocks (16 bytes each at qs0, qs1) in element order:
// 128-bit lanes low nibbles (elements 0..15) then high nibbles (16..31) of each block.
template <bool Two>
inline __m512i nibbles(const uint8_t* qs0, const uint8_t* qs1) {
  const __m128i q0 = loadu128(qs0);
  const __m128i q1 = Two ? loadu128(qs1) : _mm_setzero_si128();
  const __m256i b0 = _mm256_set_m128i(_mm_srli_epi16(q0, 4), q0);
  const __m256i b1 = _mm256_set_m128i(_mm_srli_epi16(q1, 4), q1);
  return _mm512_and_si512(join256(b0, b1), _mm512_set1_epi8(0x0F));
}

// Bit 4 of the 5-bit quants: bit j of block b's qh (little-endian uint32) -> byte j, block b+1's
// -> byte 32 + j.
template <class Block, bool Two>
inline __m512i add_fifth_bit(__m512i nib, const Block* x) {
  uint32_t h0, h1 = 0;
  std::memcpy(&h0, x[0].qh, 4);
  if (Two) std::memcpy(&h1, x[1].qh, 4);
  const __mmask64 k = static_cast<__mmask64>(h0) | (static_cast<__mmask64>(h1) << 32);
  return _mm512_mask_add_epi8(nib, k, nib, _mm512_set1_epi8(16));
}

struct Q4_0W {
  using Block = block_q4_0;
  static constexpr int kShift = 3;  // u = q + 2^3 is the stored nibble
  static constexpr bool kMin = false;
  template <bool Two>
  static __m512i u(const Block* x) {
    return nibbles<Two>(x[0].qs, Two ? x[1].qs : nullptr);
  }
};
struct Q5_0W {
  using Block = block_q5_0;
  static constexpr int kShift = 4;  // u = q + 2^4 is the stored 5-bit quant
  static constexpr bool kMin = false;
  template <bool Two>
  static __m512i u(const Block* x) {
    return add_fifth_bit<Block, Two>(nibbles<Two>(x[0].qs, Two ? x[1].qs : nullptr), x);
  }
};
struct IQ4_NLW {
  using Block = block_iq4_nl;
  static constexpr int kShift = 7;  // u = grid level + 2^7
  static constexpr bool kMin = false;
  template <bool Two>
  static __m512i u(const Block* x) {
    // kIQ4NLValues + 128 in every 128-bit lane (vpshufb looks up within lanes).
    const __m128i t = _mm_add_epi8(loadu128(kIQ4NLValues), _mm_set1_epi8(-128));
    // (Block b alone: the upper half looks up nibble 0, harmless against the zero activations.)
    return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(t), nibbles<Two>(x[0].qs, Two ? x[1].qs : nullptr));
  }
};
struct Q4_1W {
  using Block = block_q4_1;
  static constexpr int kShift = 0;
  static constexpr bool kMin = true;
  template <bool Two>
  static __m512i u(const Block* x) {
    return nibbles<Two>(x[0].qs, Two ? x[1].qs : nullptr);
  }
};
struct Q5_1W {
  using Block = block_q5_1;
  static constexpr int kShift = 0;
  static constexpr bool kMin = true;
  template <bool Two>
  static __m512i u(const Block* x) {
    return add_fifth_bit<Block, Two>(nibbles<Two>(x[0].qs, Two ? x[1].qs : nullptr), x);
  }
};

template <class W, int RM, int RN>
struct Tile {
  using Block = typename W::Block;

  // One step over blocks b, b+1 (Two) or b alone. sy: activation block scales; ss: block sums
  // (Q8_1, kMin formats only).
  template <bool Two>
  static inline void step(const Block* const* x, const block_q8_0* const* y, const float* const* sy,
                          const float* const* ss, int64_t b, __m512 (&acc)[RM][RN]) {
    __m512i u[RM];
    __m512 dw[RM], mw[RM];
    for (int i = 0; i < RM; ++i) {
      u[i] = W::template u<Two>(x[i] + b);
      dw[i] = halves_ps(h2f(x[i][b].d), Two ? h2f(x[i][b + 1].d) : 0.0f);
      if constexpr (W::kMin)  // m in lanes 0 and 8 only: the block offset term is added once
        mw[i] = _mm512_maskz_mov_ps(0x0101, halves_ps(h2f(x[i][b].m), Two ? h2f(x[i][b + 1].m) : 0.0f));
    }
    const __m512i zero = _mm512_setzero_si512(), ones = _mm512_set1_epi8(1);
    for (int j = 0; j < RN; ++j) {
      const __m512i av = join256(loadu256(y[j][b].qs), Two ? loadu256(y[j][b + 1].qs) : _mm256_setzero_si256());
      // -offset * (sums of 4 activation bytes), the start of every pair's accumulator.
      __m512i corr = zero;
      if constexpr (W::kShift > 0)
        corr = _mm512_sub_epi32(zero, _mm512_slli_epi32(_mm512_dpbusd_epi32(zero, ones, av), W::kShift));
      const __m512 da = halves_ps(sy[j][b], Two ? sy[j][b + 1] : 0.0f);
      __m512 sa;
      if constexpr (W::kMin) sa = halves_ps(ss[j][b], Two ? ss[j][b + 1] : 0.0f);
      for (int i = 0; i < RM; ++i) {
        const __m512i dot = _mm512_dpbusd_epi32(corr, u[i], av);
        acc[i][j] = _mm512_fmadd_ps(_mm512_mul_ps(dw[i], da), _mm512_cvtepi32_ps(dot), acc[i][j]);
        if constexpr (W::kMin) acc[i][j] = _mm512_fmadd_ps(mw[i], sa, acc[i][j]);
      }
    }
  }

  // out[j * ldo + i] = dot(row i, token j) for i < RM, j < RN.
  static void run(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
    const int64_t nb = n / QK8_0;
    const Block* x[RM];
    const block_q8_0* y[RN];
    const float* sy[RN];  // float copies of the activation block scales (prepare_act_q8_0)
    const float* ss[RN];  // activation block sums (prepare_act_q8_1; kMin formats only)
    for (int i = 0; i < RM; ++i) x[i] = reinterpret_cast<const Block*>(w + i * ws);
    for (int j = 0; j < RN; ++j) {
      y[j] = reinterpret_cast<const block_q8_0*>(a + j * as);
      sy[j] = act_q8_0_scales(a + j * as, n);
      ss[j] = W::kMin ? act_q8_1_sums(a + j * as, n) : nullptr;
    }
    __m512 acc[RM][RN];
    for (int i = 0; i < RM; ++i)
      for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) step<true>(x, y, sy, ss, b, acc);
    if (b < nb) step<false>(x, y, sy, ss, b, acc);
    for (int j = 0; j < RN; ++j) {
      if constexpr (RM == 4) {
        _mm_storeu_ps(out + j * ldo, reduce4_ps(acc[0][j], acc[1][j], acc[2][j], acc[3][j]));
      } else {
        for (int i = 0; i < RM; ++i) out[j * ldo + i] = reduce_ps(acc[i][j]);
      }
    }
  }
};

// RM rows against all nt tokens, RN = 4 at a time.
template <class W, int RM>
void rows_pass(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int nt, int64_t n, float* out, int64_t ldo) {
  prefetch(w + kPrefetchBytes, RM * ws);  // may run past the weight: prefetches never fault
  int t = 0;
  for (; t + 4 <= nt; t += 4) Tile<W, RM, 4>::run(w, ws, a + t * as, as, n, out + t * ldo, ldo);
  switch (nt - t) {
    case 3: Tile<W, RM, 3>::run(w, ws, a + t * as, as, n, out + t * ldo, ldo); break;
    case 2: Tile<W, RM, 2>::run(w, ws, a + t * as, as, n, out + t * ldo, ldo); break;
    case 1: Tile<W, RM, 1>::run(w, ws, a + t * as, as, n, out + t * ldo, ldo); break;
    default: break;
  }
}

template <class W>
void tile(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
          int64_t ldo) {
  int r = 0;
  if (nt == 1) {
    // One token (decode): one row after the other, so the weights are read as one sequential
    // stream, which the hardware prefetcher follows. Four rows at once are four streams ws bytes
    // apart, slower even with the software prefetch (docs/benchmarks/issue14-vs-llamacpp.md).
    // Each row prefetched kPrefetchBytes ahead, as the AVX2 tiles do (docs/kernels-k-quants.md).
    for (; r < nr; ++r) {
      prefetch(w + r * ws + kPrefetchBytes, ws);  // may run past the weight: prefetches never fault
      Tile<W, 1, 1>::run(w + r * ws, ws, a, as, n, out + r, ldo);
    }
    return;
  }
  for (; r + 4 <= nr; r += 4) rows_pass<W, 4>(w + r * ws, ws, a, as, nt, n, out + r, ldo);
  switch (nr - r) {
    case 3: rows_pass<W, 3>(w + r * ws, ws, a, as, nt, n, out + r, ldo); break;
    case 2: rows_pass<W, 2>(w + r * ws, ws, a, as, nt, n, out + r, ldo); break;
    case 1: rows_pass<W, 1>(w + r * ws, ws, a, as, nt, n, out + r, ldo); break;
    default: break;
  }
}

template <class W>
float dot1(const void* w, const void* act, int64_t n) {
  float r;
  Tile<W, 1, 1>::run(static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(act), 0, n, &r, 0);
  return r;
}

}  // namespace

float dot_q8_0(const void* w, const void* act, int64_t n) { return dot1<Q8_0W>(w, act, n); }
float dot_q4_0(const void* w, const void* act, int64_t n) { return dot1<Q4_0W>(w, act, n); }
float dot_q4_1(const void* w, const void* act, int64_t n) { return dot1<Q4_1W>(w, act, n); }
float dot_q5_0(const void* w, const void* act, int64_t n) { return dot1<Q5_0W>(w, act, n); }
float dot_q5_1(const void* w, const void* act, int64_t n) { return dot1<Q5_1W>(w, act, n); }
float dot_iq4_nl(const void* w, const void* act, int64_t n) { return dot1<IQ4_NLW>(w, act, n); }

#define KVS_TILE_32(name, W)                                                                                  \
  void name(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out, \
            int64_t ldo) {                                                                                    \
    tile<W>(w, ws, nr, a, as, nt, n, out, ldo);                                                               \
  }
KVS_TILE_32(tile_q8_0, Q8_0W)
KVS_TILE_32(tile_q4_0, Q4_0W)
KVS_TILE_32(tile_q4_1, Q4_1W)
KVS_TILE_32(tile_q5_0, Q5_0W)
KVS_TILE_32(tile_q5_1, Q5_1W)
KVS_TILE_32(tile_iq4_nl, IQ4_NLW)
#undef KVS_TILE_32

}  // namespace kvs::kernels::avx512

#include "kernels/cpu/avx512_end.h"
