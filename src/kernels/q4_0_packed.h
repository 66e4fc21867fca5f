// Q4_0 weights repacked at load time for the AVX-512 VNNI packed tile (what packing is
// for, the activation format and the registry: packed_weights.h). Same bytes as the GGUF tensor
// (18 per 32 weights), plus zero padding to whole 16-row groups and block pairs.
//
// Layout (rows padded to ngroups * 16 with zero rows, blocks to an even count with zero blocks):
//   group g (rows 16g .. 16g+15) = npairs block pairs of kQ4PackPairBytes = 576 bytes each, in order;
//   block pair p (blocks b = 2p, 2p+1):
//     [0, 256)    block 2p   nibbles: 4 vectors of 64 bytes; vector k holds, at bytes 4r..4r+3,
//                 row r's qs[4k .. 4k+3] (low nibbles: elements 4k..4k+3, high nibbles: elements
//                 16+4k .. 16+4k+3; the stored nibble u = q + 8, unsigned as vpdpbusd wants it)
//     [256, 512)  block 2p+1 nibbles, the same way
//     [512, 544)  block 2p   fp16 scales, row r at bytes 2r
//     [544, 576)  block 2p+1 fp16 scales
//   576 = 9 cache lines, so a 64-byte-aligned group stays aligned and decode reads one group as
//   one sequential stream.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/packed_weights.h"

namespace kvs::kernels {

inline constexpr size_t kQ4PackBlockBytes = 256;  // nibbles of one block, 16 rows
inline constexpr size_t kQ4PackPairBytes = 576;   // two blocks' nibbles + their scales

// The layout as packed_weights.cpp's pack / unpack / reference read it.
const PackedLayout& q4_0_packed_layout();
// The unsigned quant u = q + 8 of element e (0..31) of row r in the packed block at `blk` (a
// pair's first or second 256 bytes), as the scalar reference reads it.
inline int q4_0_packed_u(const uint8_t* blk, int r, int e) {
  const uint8_t byte = blk[64 * ((e % 16) / 4) + 4 * r + e % 4];
  return e < 16 ? (byte & 15) : (byte >> 4);
}

}  // namespace kvs::kernels
