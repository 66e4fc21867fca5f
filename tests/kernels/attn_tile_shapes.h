// The shapes the attention tile tests run, f32 (attn_tiles_test.cpp) and BF16
// (attn_tiles_bf16_test.cpp) alike: rows not a multiple of the 6-row micro-tile, keys not a
// multiple of 16 or 64 (and odd, for the BF16 value pairs), head dims with a remainder past the
// last whole vector.
#pragma once
#include <cstdint>
#include <initializer_list>

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

}  // namespace kvs::kernels::test
