// AVX-512 dot tiles of F32 / F16 / BF16 weight rows against F32 activations: RM rows x RN tokens
// per pass (up to 4 x 4), 16 elements per FMA, masked loads for the last partial step (any n).
// One accumulator per pair (a second set for small passes, to hide the FMA latency, changed the
// summation order enough to flip many more F16 roundings in the llama.cpp-numerics reference test,
// tests/runtime/stories_reference_test.cpp; decode is memory-bound anyway).
// F16 rows against one token (decode) take their own path, row_f16_decode (see there).
//
// Dimension legend: n = row length, RM/RN = rows/tokens of a pass, k = element index.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/impl.h"
// clang-format off
#include "kernels/cpu/avx512_begin.h"
#include "kernels/cpu/simd_avx512.h"
// clang-format on

namespace kvs::kernels::avx512 {
namespace {

constexpr size_t kPrefetchBytes = 4096;

inline void prefetch(const uint8_t* p, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}

// 16 weights from element k (the first `m` lanes only for a masked tail) as floats.
struct LoadF32 {
  static __m512 load(const uint8_t* w, int64_t k) { return _mm512_loadu_ps(reinterpret_cast<const float*>(w) + k); }
  static __m512 load(const uint8_t* w, int64_t k, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(w) + k);
  }
};
struct LoadF16 {
  static constexpr bool kDecodeRows = true;  // tile() runs one token with row_decode
  static __m512 load(const uint8_t* w, int64_t k) { return _mm512_cvtph_ps(loadu256(reinterpret_cast<const uint16_t*>(w) + k)); }
  static __m512 load(const uint8_t* w, int64_t k, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(w) + k));
  }
};
struct LoadBF16 {
  static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static __m512 load(const uint8_t* w, int64_t k) { return widen(loadu256(reinterpret_cast<const uint16_t*>(w) + k)); }
  static __m512 load(const uint8_t* w, int64_t k, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(w) + k));
  }
};

// Does loader L take the one-token path of tile() (row_decode)? F32/BF16 keep the 4-row passes:
// only F16 was measured.
template <class L>
constexpr bool decode_rows() {
  if constexpr (requires { L::kDecodeRows; })
    return L::kDecodeRows;
  else
    return false;
}

template <class L, int RM, int RN>
struct Tile {
  static void run(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t n, float* out, int64_t ldo) {
    const uint8_t* wr[RM];
    const float* x[RN];
    for (int i = 0; i < RM; ++i) wr[i] = w + i * ws;
    for (int j = 0; j < RN; ++j) x[j] = reinterpret_cast<const float*>(a + j * as);
    __m512 acc[RM][RN];
    for (int i = 0; i < RM; ++i)
      for (int j = 0; j < RN; ++j) acc[i][j] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
      __m512 wv[RM];
      for (int i = 0; i < RM; ++i) wv[i] = L::load(wr[i], k);
      for (int j = 0; j < RN; ++j) {
        const __m512 xv = _mm512_loadu_ps(x[j] + k);
        for (int i = 0; i < RM; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
      }
    }
    if (k < n) {  // masked tail
      const __mmask16 m = static_cast<__mmask16>((1u << (n - k)) - 1);
      __m512 wv[RM];
      for (int i = 0; i < RM; ++i) wv[i] = L::load(wr[i], k, m);
      for (int j = 0; j < RN; ++j) {
        const __m512 xv = _mm512_maskz_loadu_ps(m, x[j] + k);
        for (int i = 0; i < RM; ++i) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
      }
    }
    for (int j = 0; j < RN; ++j) {
      if constexpr (RM == 4) {
        _mm_storeu_ps(out + j * ldo, reduce4_ps(acc[0][j], acc[1][j], acc[2][j], acc[3][j]));
      } else {
        for (int i = 0; i < RM; ++i) out[j * ldo + i] = reduce_ps(acc[i][j]);
      }
    }
  }
};

template <class L, int RM>
void rows_pass(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int nt, int64_t n, float* out, int64_t ldo) {
  prefetch(w + kPrefetchBytes, RM * ws);  // may run past the weight: prefetches never fault
  int t = 0;
  for (; t + 4 <= nt; t += 4) Tile<L, RM, 4>::run(w, ws, a + t * as, as, n, out + t * ldo, ldo);
  switch (nt - t) {
    case 3: Tile<L, RM, 3>::run(w, ws, a + t * as, as, n, out + t * ldo, ldo); break;
    case 2: Tile<L, RM, 2>::run(w, ws, a + t * as, as, n, out + t * ldo, ldo); break;
    case 1: Tile<L, RM, 1>::run(w, ws, a + t * as, as, n, out + t * ldo, ldo); break;
    default: break;
  }
}

// One row against one token (decode), 2-byte weights: four accumulators (64 weights, two 64-byte
// lines per step) and a software prefetch kDecodePrefetchBytes ahead inside the loop, so the rows
// of a tile form one sequential stream that stays ahead of the loads: one accumulator is bound by
// the FMA chain, and 4 accumulators with a 4 KiB in-loop prefetch were the fastest of the variants
// measured (docs/benchmarks/issue14-vs-llamacpp.md).
constexpr size_t kDecodePrefetchBytes = 4096;

template <class L>
float row_decode(const uint8_t* w, const float* x, int64_t n) {
  constexpr int kAcc = 4;
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 * kAcc <= n; k += 16 * kAcc) {
    const uint8_t* p = w + 2 * k + kDecodePrefetchBytes;  // may run past the row: prefetches never fault
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + 64), _MM_HINT_T0);
    for (int i = 0; i < kAcc; ++i)
      acc[i] = _mm512_fmadd_ps(L::load(w, k + 16 * i), _mm512_loadu_ps(x + k + 16 * i), acc[i]);
  }
  for (; k + 16 <= n; k += 16) acc[0] = _mm512_fmadd_ps(L::load(w, k), _mm512_loadu_ps(x + k), acc[0]);
  if (k < n) {  // masked tail
    const __mmask16 m = static_cast<__mmask16>((1u << (n - k)) - 1);
    acc[0] = _mm512_fmadd_ps(L::load(w, k, m), _mm512_maskz_loadu_ps(m, x + k), acc[0]);
  }
  return reduce_ps(_mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
}

template <class L>
void tile(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
          int64_t ldo) {
  int r = 0;
  if constexpr (decode_rows<L>()) {
    if (nt == 1) {
      for (; r < nr; ++r) out[r] = row_decode<L>(w + r * ws, reinterpret_cast<const float*>(a), n);
      return;
    }
  }
  for (; r + 4 <= nr; r += 4) rows_pass<L, 4>(w + r * ws, ws, a, as, nt, n, out + r, ldo);
  switch (nr - r) {
    case 3: rows_pass<L, 3>(w + r * ws, ws, a, as, nt, n, out + r, ldo); break;
    case 2: rows_pass<L, 2>(w + r * ws, ws, a, as, nt, n, out + r, ldo); break;
    case 1: rows_pass<L, 1>(w + r * ws, ws, a, as, nt, n, out + r, ldo); break;
    default: break;
  }
}

template <class L>
float dot1(const void* w, const void* act, int64_t n) {
  float r;
  Tile<L, 1, 1>::run(static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(act), 0, n, &r, 0);
  return r;
}

}  // namespace

float dot_f32(const void* w, const void* act, int64_t n) { return dot1<LoadF32>(w, act, n); }
float dot_f16(const void* w, const void* act, int64_t n) { return dot1<LoadF16>(w, act, n); }
float dot_bf16(const void* w, const void* act, int64_t n) { return dot1<LoadBF16>(w, act, n); }

void tile_f32(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
              int64_t ldo) {
  tile<LoadF32>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_f16(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
              int64_t ldo) {
  tile<LoadF16>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_bf16(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
               int64_t ldo) {
  tile<LoadBF16>(w, ws, nr, a, as, nt, n, out, ldo);
}

}  // namespace kvs::kernels::avx512

#include "kernels/cpu/avx512_end.h"
