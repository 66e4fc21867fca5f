// Q8_0 weights repacked at load time for the AVX-512 VNNI packed tile (what packing is
// for, the activation format and the registry: packed_weights.h). Same bytes as the GGUF tensor
// (34 per 32 weights), plus zero padding to whole 16-row groups and block pairs.
//
// Layout (rows padded to ngroups * 16 with zero rows, blocks to an even count with zero blocks):
//   group g (rows 16g .. 16g+15) = npairs block pairs of kQ8PackPairBytes = 1,088 bytes each;
//   block pair p (blocks b = 2p, 2p+1):
//     [0, 512)      block 2p   quants: 8 vectors of 64 bytes; vector k holds, at bytes 4r..4r+3,
//                   row r's qs[4k .. 4k+3] stored as u = q + 128 (q xor 0x80: unsigned, as
//                   vpdpbusd's first operand must be)
//     [512, 1024)   block 2p+1 quants, the same way
//     [1024, 1056)  block 2p   fp16 scales, row r at bytes 2r
//     [1056, 1088)  block 2p+1 fp16 scales
//   1,088 = 17 cache lines, so a 64-byte-aligned group stays aligned and decode reads one group as
//   one sequential stream. (The padding: u = 0 with scale 0, nothing.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/packed_weights.h"

namespace kvs::kernels {

inline constexpr size_t kQ8PackBlockBytes = 512;   // quants of one block, 16 rows
inline constexpr size_t kQ8PackPairBytes = 1088;   // two blocks' quants + their scales

// The layout as packed_weights.cpp's pack / unpack / reference read it.
const PackedLayout& q8_0_packed_layout();
// The unsigned quant u = q + 128 of element e (0..31) of row r in the packed block at `blk`.
inline int q8_0_packed_u(const uint8_t* blk, int r, int e) { return blk[64 * (e / 4) + 4 * r + e % 4]; }

}  // namespace kvs::kernels
