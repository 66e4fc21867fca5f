// AVX512_BF16 forms of the prefill attention's tiles (semantics in ops.h: qk_panels_bf16,
// pv_tile_bf16, to_bf16): VDPBF16PS multiplies 16 lanes of BF16 pairs and adds both products to
// an f32 lane, 32 multiply-adds per instruction where the f32 tiles' FMA does 16 (about twice the
// f32 tiles' rate with the operands in cache: docs/benchmarks/prefill-attention.md).
//  - qk: keys in panels of 16 with the dims in pairs (pack_key_panels_bf16), so one 64-byte load
//    is two dims of 16 keys and one 32-bit broadcast is the same two dims of a query row; a
//    micro-tile is 6 rows x 64 keys (24 accumulators), as the f32 tile.
//  - pv: values in key pairs (pack_value_pairs_bf16), so one load is two keys of 16 dims and one
//    32-bit broadcast is the same two keys' probabilities of a row; 6 rows x 64 dims.
// Only called when cpu_features().avx512bf16 (kernel_table.cpp). The functions are compiled for
// the avx512 table's ISA plus AVX512_BF16 (avx512_begin.h with KVS_AVX512_BF16).
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/fp16.h"
#include "kernels/cpu/impl.h"
#include "kernels/ops.h"

// clang-format off
#define KVS_AVX512_BF16
#include "kernels/cpu/avx512_begin.h"
#include "kernels/cpu/simd_avx512.h"
// clang-format on

namespace kvs::kernels::avx512bf16 {
namespace {

constexpr int kRows = 6, kVecs = 4;  // micro-tile: 6 rows x 4 vectors of 16 lanes

inline __m512bh as_bh(__m512i x) { return (__m512bh)x; }  // a vector cast: same 64 bytes, no aliasing
inline __m512bh load_bh(const uint16_t* p) { return as_bh(_mm512_loadu_si512(p)); }
// Two BF16 values at p (p[0] low) in every 32-bit lane.
inline __m512bh pair_bh(const uint16_t* p) {
  uint32_t w;
  std::memcpy(&w, p, sizeof w);
  return as_bh(_mm512_set1_epi32(static_cast<int>(w)));
}
// Only p[0] (the second of the pair 0): a row's last probability when n is odd.
inline __m512bh single_bh(const uint16_t* p) { return as_bh(_mm512_set1_epi32(static_cast<int>(*p))); }

// S[r][v * 16 + l] for RB rows and KV panels from panel base kt (Q rows of stride D).
template <int RB, int KV>
inline void qk_micro(const uint16_t* Q, int D, const uint16_t* kt, float* out, int64_t lds) {
  __m512 a[RB][KV];
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < KV; ++v) a[r][v] = _mm512_setzero_ps();
  for (int dp = 0; dp < D / 2; ++dp) {
    __m512bh k[KV];
#pragma GCC unroll 4
    for (int v = 0; v < KV; ++v) k[v] = load_bh(kt + static_cast<int64_t>(v) * 16 * D + dp * 32);
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) {
      const __m512bh b = pair_bh(Q + static_cast<int64_t>(r) * D + 2 * dp);
#pragma GCC unroll 4
      for (int v = 0; v < KV; ++v) a[r][v] = _mm512_dpbf16_ps(a[r][v], b, k[v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < KV; ++v) _mm512_storeu_ps(out + r * lds + v * 16, a[r][v]);
}

template <int KV>
inline void qk_rows_of(const uint16_t* Q, int rows, int D, const uint16_t* kt, float* out, int64_t lds) {
  int r = 0;
  for (; r + kRows <= rows; r += kRows) qk_micro<kRows, KV>(Q + static_cast<int64_t>(r) * D, D, kt, out + r * lds, lds);
  for (; r < rows; ++r) qk_micro<1, KV>(Q + static_cast<int64_t>(r) * D, D, kt, out + r * lds, lds);
}

// O[r][d0 + c * 16 + l] += sum_j P[r][j] V[j][...] for RB rows and NC dim vectors (O, Vp at dim d0).
template <int RB, int NC>
inline void pv_micro(const uint16_t* P, int64_t ldp, const uint16_t* Vp, int n, int D, float* O) {
  __m512 a[RB][NC];
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) a[r][c] = _mm512_loadu_ps(O + static_cast<int64_t>(r) * D + c * 16);
  const int pairs = n / 2;
  for (int kp = 0; kp <= pairs; ++kp) {
    if (kp == pairs && n % 2 == 0) break;
    __m512bh v[NC];
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) v[c] = load_bh(Vp + static_cast<int64_t>(kp) * 2 * D + c * 32);
#pragma GCC unroll 16
    for (int r = 0; r < RB; ++r) {
      const uint16_t* p = P + r * ldp + 2 * kp;
      const __m512bh b = kp < pairs ? pair_bh(p) : single_bh(p);
#pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) a[r][c] = _mm512_dpbf16_ps(a[r][c], b, v[c]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(O + static_cast<int64_t>(r) * D + c * 16, a[r][c]);
}

template <int NC>
inline void pv_rows_of(const uint16_t* P, int rows, int64_t ldp, const uint16_t* Vp, int n, int D, float* O) {
  int r = 0;
  for (; r + kRows <= rows; r += kRows) pv_micro<kRows, NC>(P + r * ldp, ldp, Vp, n, D, O + static_cast<int64_t>(r) * D);
  for (; r < rows; ++r) pv_micro<1, NC>(P + r * ldp, ldp, Vp, n, D, O + static_cast<int64_t>(r) * D);
}

// exp for probabilities that are rounded to BF16 next: n = round(x log2 e), r = x - n ln2 (one
// constant: an error below 3e-7 in r for |x| <= 88), exp(r) by its degree-5 Taylor polynomial
// (truncation error below 3.3e-6 relative on |r| <= ln2/2), times 2^n by VSCALEFPS: relative error
// below 4e-6, under BF16's half-ulp 2^-9 by three orders of magnitude. 11 vector operations
// against the f32 exp's 17 (simd_avx512.h: Cody-Waite ln2, Cephes degree-6). Lanes below -87.3
// (and -inf) give 0; the smallest kept value is normal (exp(-87.3) > 2^-126).
inline __m512 exp_bf16_grade(__m512 x) {
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693147180559945309f), x);
  __m512 p = _mm512_set1_ps(1.0f / 120);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

}  // namespace

void qk_panels_bf16(const uint16_t* Q, int rows, int D, const uint16_t* Kt, int n_panels, float* S, int64_t lds) {
  int p = 0;
  for (; p + kVecs <= n_panels; p += kVecs)
    qk_rows_of<kVecs>(Q, rows, D, Kt + static_cast<int64_t>(p) * 16 * D, S + p * 16, lds);
  for (; p < n_panels; ++p) qk_rows_of<1>(Q, rows, D, Kt + static_cast<int64_t>(p) * 16 * D, S + p * 16, lds);
}

void pv_tile_bf16(const uint16_t* P, int rows, int64_t ldp, const uint16_t* Vp, int n, int D, float* O) {
  int d0 = 0;
  for (; d0 + kVecs * 16 <= D; d0 += kVecs * 16) pv_rows_of<kVecs>(P, rows, ldp, Vp + 2 * d0, n, D, O + d0);
  for (; d0 + 16 <= D; d0 += 16) pv_rows_of<1>(P, rows, ldp, Vp + 2 * d0, n, D, O + d0);
  if (d0 < D) {  // the dims past the last whole vector (no supported model has any)
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < n; ++j) {
        const float p = bf16_to_fp32(P[r * ldp + j]);
        const uint16_t* v = Vp + static_cast<int64_t>(j / 2) * 2 * D + j % 2;
        for (int d = d0; d < D; ++d) O[static_cast<int64_t>(r) * D + d] += p * bf16_to_fp32(v[2 * d]);
      }
  }
}

void to_bf16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), reinterpret_cast<const __m256i&>(h));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i));
    _mm256_mask_storeu_epi16(y + i, m, reinterpret_cast<const __m256i&>(h));
  }
}

float exp_sub_sum_bf16(const float* x, uint16_t* y, int64_t n, float sub) {
  const __m512 vs = _mm512_set1_ps(sub);
  __m512 sum = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp_bf16_grade(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs));
    sum = _mm512_add_ps(sum, e);
    const __m256bh h = _mm512_cvtneps_pbh(e);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + i), reinterpret_cast<const __m256i&>(h));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 e = _mm512_maskz_mov_ps(m, exp_bf16_grade(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vs)));
    sum = _mm512_add_ps(sum, e);
    const __m256bh h = _mm512_cvtneps_pbh(e);
    _mm256_mask_storeu_epi16(y + i, m, reinterpret_cast<const __m256i&>(h));
  }
  return _mm512_reduce_add_ps(sum);
}

// The BF16 packings (ops.h), once per key block and query block in the prefill attention: 16 keys
// x 16 dims transposed in registers (avx512::transpose16) and dim pairs interleaved, or two value
// rows interleaved, then rounded by VCVTNE2PS2BF16 (round to nearest even, as to_bf16). The
// element loops of the portable versions made the BF16 prefill 25% slower once they ran per query
// block (docs/benchmarks/prefill-attention.md).
namespace {
// out[2i] = a[i], out[2i + 1] = b[i] for i < 16, in BF16.
inline void store_interleaved_bf16(uint16_t* out, __m512 a, __m512 b) {
  const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i hi = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
  const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_permutex2var_ps(a, hi, b), _mm512_permutex2var_ps(a, lo, b));
  _mm512_storeu_si512(out, reinterpret_cast<const __m512i&>(h));
}
}  // namespace

void pack_key_panels_bf16(const float* K, int n, int D, uint16_t* Kt) {
  constexpr int KP = kKeyPanel;
  static_assert(KP == 16);
  if (D % 2 != 0) return generic::pack_key_panels_bf16(K, n, D, Kt);  // (its message)
  const int np = (n + KP - 1) / KP;
  for (int p = 0; p < np; ++p) {
    const float* src = K + static_cast<int64_t>(p) * KP * D;  // [m][D]
    uint16_t* dst = Kt + static_cast<int64_t>(p) * KP * D;     // [D / 2][16][2]
    const int m = std::min(KP, n - p * KP);
    int d = 0;
    for (; d + 16 <= D; d += 16) {
      __m512 r[16];
      for (int l = 0; l < 16; ++l) r[l] = l < m ? _mm512_loadu_ps(src + static_cast<int64_t>(l) * D + d) : _mm512_setzero_ps();
      avx512::transpose16(r);  // r[c]: dim d + c of the 16 keys
      for (int c = 0; c < 16; c += 2) store_interleaved_bf16(dst + static_cast<int64_t>(d + c) * KP, r[c], r[c + 1]);
    }
    for (; d < D; ++d)
      for (int l = 0; l < KP; ++l)
        dst[(d / 2) * 2 * KP + 2 * l + d % 2] = l < m ? fp32_to_bf16(src[static_cast<int64_t>(l) * D + d]) : uint16_t{0};
  }
}

void pack_value_pairs_bf16(const float* V, int n, int D, uint16_t* Vp) {
  if (D % 2 != 0) return generic::pack_value_pairs_bf16(V, n, D, Vp);
  for (int j = 0; j < n; j += 2) {
    const float* a = V + static_cast<int64_t>(j) * D;
    const float* b = j + 1 < n ? a + D : nullptr;  // odd n: the last pair's second key is 0
    uint16_t* dst = Vp + static_cast<int64_t>(j) * D;  // pair j / 2: [D][2]
    int d = 0;
    for (; d + 16 <= D; d += 16)
      store_interleaved_bf16(dst + 2 * d, _mm512_loadu_ps(a + d), b ? _mm512_loadu_ps(b + d) : _mm512_setzero_ps());
    for (; d < D; ++d) {
      dst[2 * d] = fp32_to_bf16(a[d]);
      dst[2 * d + 1] = b ? fp32_to_bf16(b[d]) : uint16_t{0};
    }
  }
}

}  // namespace kvs::kernels::avx512bf16

#include "kernels/cpu/avx512_end.h"
