// AVX-512 VNNI tiles over repacked Q4_0 / Q8_0 weights (layouts in kernels/q4_0_packed.h,
// kernels/q8_0_packed.h; the packed activation in kernels/packed_weights.h): 16 rows per 512-bit
// accumulator, RN tokens (up to 8) per pass.
//
// Per 32-weight block and 16 rows the format yields eight vectors whose 32-bit lane r holds 4
// unsigned weights u of row r: Q4_0 from four 64-byte loads of nibbles split into low and high
// halves (and / shift + and), Q8_0 from eight 64-byte loads as they are (stored as q + 128). Vector
// k < 4 holds elements 4k..4k+3, vector 4 + k elements 16+4k..16+4k+3; each meets the matching 4
// activation bytes broadcast to all lanes in one vpdpbusd. The dot of each row starts at the
// activation's correction -offset * sum(a) (exact, integers), so the sum is sum((u - offset) * a);
// it is then scaled by d_w (16 fp16 scales in one load) * d_a and accumulated in fp32. No
// horizontal sums: lane r of the accumulator is row r's output. The 8 vectors are loaded once per
// block for the RN tokens of a pass.
//
// Dimension legend: n = row length, nb = n / 32, ng = 16-row groups, nr = valid rows from the
// first group, RN = tokens of a pass, b = block.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/impl.h"
#include "kernels/q4_0_packed.h"
#include "kernels/q8_0_packed.h"
#include "kernels/quant.h"
// clang-format off
#include "kernels/cpu/avx512_begin.h"
#include "kernels/cpu/simd_avx512.h"
// clang-format on

namespace kvs::kernels::avx512 {
namespace {

using i32_unaligned = int32_t __attribute__((may_alias, aligned(1)));

// acc + vpdpbusd(u, the 4 activation bytes at p broadcast to every lane), with the broadcast
// folded into the instruction's memory operand ({1to16}). Written as asm because GCC 12 does not
// fold it from the intrinsic (set1 of a plain load or of a memcpy alike): it emits a vpbroadcastd
// per vpdpbusd, and that pair issues fewer vpdpbusd a cycle than the folded form
// (docs/benchmarks/issue25-server-step-4-intel-2026-11-29.md, "The weight tile's broadcasts").
inline __m512i dpbusd_bcast(__m512i acc, __m512i u, const int8_t* p) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*reinterpret_cast<const i32_unaligned*>(p)));
  return acc;
}

// Packed formats: kBlockBytes (quants of one block, 16 rows), kPairBytes, unsigned(q, v) = the
// eight vectors of the block at q.
struct Q4_0P {
  static constexpr size_t kBlockBytes = kQ4PackBlockBytes, kPairBytes = kQ4PackPairBytes;
  static inline void unsigned_quants(const uint8_t* q, __m512i (&v)[8]) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    for (int k = 0; k < 4; ++k) {
      const __m512i x = _mm512_load_si512(reinterpret_cast<const __m512i*>(q + 64 * k));
      v[k] = _mm512_and_si512(x, m4);
      v[4 + k] = _mm512_and_si512(_mm512_srli_epi16(x, 4), m4);
    }
  }
};
struct Q8_0P {
  static constexpr size_t kBlockBytes = kQ8PackBlockBytes, kPairBytes = kQ8PackPairBytes;
  static inline void unsigned_quants(const uint8_t* q, __m512i (&v)[8]) {
    for (int k = 0; k < 8; ++k) v[k] = _mm512_load_si512(reinterpret_cast<const __m512i*>(q + 64 * k));
  }
};

template <class F, int RN>
struct PackedTile {
  // One block b of one group: q = its quants, s = its 16 fp16 scales. Token j's activation row
  // starts at a + j * as; in it, block b's int8 values at qoff, its float scale at soff, its
  // correction at coff. (Offsets from one base pointer rather than arrays of RN pointers, which
  // GCC keeps in vector registers and extracts every block.)
  static inline void block(const uint8_t* q, const uint8_t* s, const uint8_t* a, size_t as, size_t qoff, size_t soff,
                           size_t coff, __m512 (&acc)[RN]) {
    __m512i v[8];
    F::unsigned_quants(q, v);
    const __m512 dw = _mm512_cvtph_ps(loadu256(s));
    for (int j = 0; j < RN; ++j) {
      const uint8_t* aj = a + j * as;
      const auto* x = reinterpret_cast<const int8_t*>(aj + qoff);
      // Two independent chains (elements 0..15 / 16..31) for the vpdpbusd latency.
      __m512i s0 = _mm512_set1_epi32(*reinterpret_cast<const i32_unaligned*>(aj + coff));
      __m512i s1 = _mm512_setzero_si512();
      for (int k = 0; k < 4; ++k) {
        s0 = dpbusd_bcast(s0, v[k], x + 4 * k);
        s1 = dpbusd_bcast(s1, v[4 + k], x + 16 + 4 * k);
      }
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(*reinterpret_cast<const float*>(aj + soff)));
      acc[j] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), acc[j]);
    }
  }

  // One group (16 rows, nr of them valid) against RN tokens; pf: the next group, whose cache lines
  // [pf_lo, pf_hi) of every block pair are prefetched pair by pair as this one is read (null: none).
  static void run(const uint8_t* g, int nr, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo,
                  const uint8_t* pf, int pf_lo, int pf_hi) {
    const int64_t nb = n / QK8_0;
    const size_t sbase = act_q8_0_scales_offset(n), cbase = act_q8_0_bytes(n);
    constexpr size_t kQs = offsetof(block_q8_0, qs), kBlk = sizeof(block_q8_0);
    __m512 acc[RN];
    for (int j = 0; j < RN; ++j) acc[j] = _mm512_setzero_ps();
    constexpr size_t B = F::kBlockBytes;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2, g += F::kPairBytes) {
      if (pf) {
        for (int l = pf_lo; l < pf_hi; ++l) _mm_prefetch(reinterpret_cast<const char*>(pf + 64 * l), _MM_HINT_T0);
        pf += F::kPairBytes;
      }
      block(g, g + 2 * B, a, as, b * kBlk + kQs, sbase + 4 * b, cbase + 4 * b, acc);
      block(g + B, g + 2 * B + 32, a, as, (b + 1) * kBlk + kQs, sbase + 4 * (b + 1), cbase + 4 * (b + 1), acc);
    }
    if (b < nb) block(g, g + 2 * B, a, as, b * kBlk + kQs, sbase + 4 * b, cbase + 4 * b, acc);
    if (nr >= kPackRows) {
      for (int j = 0; j < RN; ++j) _mm512_storeu_ps(out + j * ldo, acc[j]);
    } else {
      const __mmask16 m = static_cast<__mmask16>((1u << nr) - 1);
      for (int j = 0; j < RN; ++j) _mm512_mask_storeu_ps(out + j * ldo, m, acc[j]);
    }
  }
};

// One group against nt tokens, 8 at a time (the group's weights stay in L1 between passes).
// The passes share the next group's prefetch (pf, or null): pass i of np asks for lines
// [i L / np, (i + 1) L / np) of each block pair (L lines a pair), so that the requests go out
// through the whole group's time rather than in the first pass's half of it while the core's
// fill buffers wait idle in the second (same journal section).
template <class F>
void group_tokens(const uint8_t* g, int rows, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
                  int64_t ldo, const uint8_t* pf) {
  constexpr int L = static_cast<int>(F::kPairBytes / 64);
  const int np = (nt + 7) / 8;
  int t = 0, i = 0;
  for (; t + 8 <= nt; t += 8, ++i)
    PackedTile<F, 8>::run(g, rows, a + t * as, as, n, out + t * ldo, ldo, pf, i * L / np, (i + 1) * L / np);
  const uint8_t* at = a + t * as;
  float* ot = out + t * ldo;
  const int lo = i * L / np, hi = (i + 1) * L / np;
  switch (nt - t) {
    case 7: PackedTile<F, 7>::run(g, rows, at, as, n, ot, ldo, pf, lo, hi); break;
    case 6: PackedTile<F, 6>::run(g, rows, at, as, n, ot, ldo, pf, lo, hi); break;
    case 5: PackedTile<F, 5>::run(g, rows, at, as, n, ot, ldo, pf, lo, hi); break;
    case 4: PackedTile<F, 4>::run(g, rows, at, as, n, ot, ldo, pf, lo, hi); break;
    case 3: PackedTile<F, 3>::run(g, rows, at, as, n, ot, ldo, pf, lo, hi); break;
    case 2: PackedTile<F, 2>::run(g, rows, at, as, n, ot, ldo, pf, lo, hi); break;
    case 1: PackedTile<F, 1>::run(g, rows, at, as, n, ot, ldo, pf, lo, hi); break;
    default: break;
  }
}

template <class F>
void tile(const uint8_t* w, size_t gs, int ng, int64_t nr, const uint8_t* a, size_t as, int nt, int64_t n,
          float* out, int64_t ldo, const uint8_t* pf_after) {
  for (int g = 0; g < ng; ++g) {
    const int rows = static_cast<int>(std::min<int64_t>(kPackRows, nr - int64_t{g} * kPackRows));
    // The next group's prefetch pays with several tokens; with one token the hardware prefetcher
    // alone keeps up.
    // After the last group: the caller's next chunk (pf_after), not what lies past this one (another
    // thread's chunk, or the end).
    group_tokens<F>(w + g * gs, rows, a, as, nt, n, out + g * kPackRows, ldo,
                    nt > 1 ? (g + 1 < ng ? w + (g + 1) * gs : pf_after) : nullptr);
  }
}

}  // namespace

void tile_q4_0p(const uint8_t* w, size_t gs, int ng, int64_t nr, const uint8_t* a, size_t as, int nt, int64_t n,
                float* out, int64_t ldo, const uint8_t* pf_after) {
  tile<Q4_0P>(w, gs, ng, nr, a, as, nt, n, out, ldo, pf_after);
}

void tile_q8_0p(const uint8_t* w, size_t gs, int ng, int64_t nr, const uint8_t* a, size_t as, int nt, int64_t n,
                float* out, int64_t ldo, const uint8_t* pf_after) {
  tile<Q8_0P>(w, gs, ng, nr, a, as, nt, n, out, ldo, pf_after);
}

}  // namespace kvs::kernels::avx512

#include "kernels/cpu/avx512_end.h"
