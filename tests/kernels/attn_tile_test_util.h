// What the attention tile tests share, f32 (attn_tiles_test.cpp) and BF16 (attn_tiles_bf16_test.cpp)
// alike: the shapes — rows not a multiple of the 6-row micro-tile, keys not a multiple of 16 or 64
// (and odd, for the BF16 value pairs), head dims with a remainder past the last whole vector —, the
// probabilities a P.V test multiplies, and the comparisons against the scalar row references.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "kernel_test_util.h"

namespace kvs::kernels::test {

inline constexpr std::initializer_list<int> kTileHeadDims = {8, 12, 32, 64, 80, 96, 128, 256};
inline constexpr std::initializer_list<int> kTileRows = {1, 6, 7, 13, 40};
inline constexpr std::initializer_list<int> kQkKeys = {1, 16, 17, 70, 130};
inline constexpr std::initializer_list<int> kPvKeys = {1, 2, 16, 17, 70, 71};

// fn(D, n, rows, seed) for every head dim x key count in `keys` x row count; seed differs per
// shape (offset by `salt`).
template <class Fn>
void for_each_tile_shape(std::initializer_list<int> keys, uint32_t salt, Fn&& fn) {
  for (int D : kTileHeadDims)
    for (int n : keys)
      for (int rows : kTileRows) fn(D, n, rows, salt + static_cast<uint32_t>(D * 10000 + n * 100 + rows));
}

// rows x ldp probabilities: |randn|, the first of every other row an exact zero (masked).
inline std::vector<float> tile_probabilities(int rows, int ldp, uint32_t seed) {
  auto P = randn(static_cast<int64_t>(rows) * ldp, seed);
  for (auto& p : P) p = std::abs(p);
  for (int r = 0; r < rows; r += 2) P[static_cast<size_t>(r) * ldp] = 0.0f;
  return P;
}

// qk_panels' scores (rows of stride lds, -1 before the call) against the reference's for n keys in
// np = ceil(n / 16) panels: the padding keys score 0, nothing is written past the panels.
inline void expect_qk_scores(const std::vector<float>& got, const std::vector<float>& want, int D, int n, int rows,
                             int lds) {
  const int np = (n + 15) / 16;
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < lds; ++j) {
      const float w = j < n ? want[r * lds + j] : j < np * 16 ? 0.0f : -1.0f;
      ASSERT_NEAR(got[r * lds + j], w, 2e-6f * D * (1 + std::abs(w)))
          << "D=" << D << " n=" << n << " rows=" << rows << " r=" << r << " j=" << j;
    }
}

// pv_tile's accumulators against the reference's over n keys.
inline void expect_pv_acc(const std::vector<float>& got, const std::vector<float>& want, int D, int n, int rows) {
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-6f * n * (1 + std::abs(want[i])))
        << "D=" << D << " n=" << n << " rows=" << rows << " i=" << i;
}

}  // namespace kvs::kernels::test
