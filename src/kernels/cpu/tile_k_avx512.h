// Internal helpers shared by the AVX-512 K-quant tiles (tile_k_avx512.cpp, tile_kx_avx512.cpp),
// included after avx512_begin.h and simd_avx512.h; internal linkage like them.
//
// Tile concept: K<RM, RN>::run(w, ws, a, as, n, out, ldo) writes out[j * ldo + i] = dot(weight
// row i, token j) for RM rows ws bytes apart and RN activation rows as bytes apart.
//
// Dimension legend: RM/RN = rows/tokens of a pass, g = 64-element chunk of a 256-element block.
// Includes nothing itself: the including file brings <immintrin.h>, <cstddef>, <cstdint> and
// <cstring> before avx512_begin.h (see there).
#pragma once

namespace kvs::kernels::avx512 {
namespace {

constexpr size_t kPrefetchBytes = 4096;

inline void prefetch(const uint8_t* p, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
}

// int16 lane indices for vpermw, one row per 64-element chunk g: lane l takes source lane
// step * g + l / per (the sub-block scale that covers the lane's two elements).
struct LaneIdx {
  alignas(64) int16_t v[4][32];
};
constexpr LaneIdx lane_index(int step, int per) {
  LaneIdx r{};
  for (int g = 0; g < 4; ++g)
    for (int l = 0; l < 32; ++l) r.v[g][l] = static_cast<int16_t>(step * g + l / per);
  return r;
}
constexpr LaneIdx kQ4KIdx = lane_index(2, 16);  // 2 sub-blocks of 32 per chunk
constexpr LaneIdx kQ6KIdx = lane_index(4, 8);   // 4 sub-blocks of 16 per chunk

// Q4_K 6-bit scales and mins of one block unpacked to bytes: out[0..7] scales, out[8..15] mins.
inline __m128i q4_K_scales_mins(const uint8_t* s) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
  return _mm_setr_epi32(static_cast<int>(u[0] & m6), static_cast<int>((u[2] & m4) | (((u[0] >> 6) & m2) << 4)),
                        static_cast<int>(u[1] & m6), static_cast<int>(((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4)));
}

// RM rows against all nt tokens: RN = 4 tokens per pass with 1 or 2 rows, 2 tokens with 4 rows
// (the pair accumulators must stay in registers).
template <template <int, int> class K, int RM>
void rows_pass(const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int nt, int64_t n, float* out, int64_t ldo) {
  prefetch(w + kPrefetchBytes, RM * ws);  // may run past the weight: prefetches never fault
  constexpr int RN = RM > 2 ? 2 : 4;
  int t = 0;
  for (; t + RN <= nt; t += RN) K<RM, RN>::run(w, ws, a + t * as, as, n, out + t * ldo, ldo);
  switch (nt - t) {
    case 3: K<RM, 3>::run(w, ws, a + t * as, as, n, out + t * ldo, ldo); break;
    case 2: K<RM, 2>::run(w, ws, a + t * as, as, n, out + t * ldo, ldo); break;
    case 1: K<RM, 1>::run(w, ws, a + t * as, as, n, out + t * ldo, ldo); break;
    default: break;
  }
}

// Decode (one or two tokens): one row after the other, so the weights are read as one sequential
// stream (each row prefetched kPrefetchBytes ahead, as the AVX2 tiles do); four rows per pass are
// four streams ws bytes apart, which DRAM serves slower (docs/kernels-k-quants.md). More tokens:
// 2 rows x 4 tokens, where each weight block is reused.
template <template <int, int> class K>
void tile(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out,
          int64_t ldo) {
  int r = 0;
  if (nt <= 2) {
    for (; r < nr; ++r) rows_pass<K, 1>(w + r * ws, ws, a, as, nt, n, out + r, ldo);
    return;
  }
  for (; r + 2 <= nr; r += 2) rows_pass<K, 2>(w + r * ws, ws, a, as, nt, n, out + r, ldo);
  if (r < nr) rows_pass<K, 1>(w + r * ws, ws, a, as, nt, n, out + r, ldo);
}

template <template <int, int> class K>
float dot1(const void* w, const void* act, int64_t n) {
  float r;
  K<1, 1>::run(static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(act), 0, n, &r, 0);
  return r;
}

}  // namespace
}  // namespace kvs::kernels::avx512
