// Q4_0 weights repacked at load time for the AVX-512 VNNI tile (issue 14): 16 rows interleaved so
// one 64-byte load feeds one vpdpbusd for 16 rows, the 16 rows' block scales stored together as
// one vector. Same bytes as the GGUF tensor (18 per 32 weights), plus zero padding to whole
// 16-row groups and block pairs.
//
// Layout (rows padded to ngroups * 16 with zero rows, blocks to an even count with zero blocks):
//   group g (rows 16g .. 16g+15) = npairs block pairs of kPairBytes = 576 bytes each, in order;
//   block pair p (blocks b = 2p, 2p+1):
//     [0, 256)    block 2p   nibbles: 4 vectors of 64 bytes; vector k holds, at bytes 4r..4r+3,
//                 row r's qs[4k .. 4k+3] (low nibbles: elements 4k..4k+3, high nibbles: elements
//                 16+4k .. 16+4k+3; the stored nibble u = q + 8, unsigned as vpdpbusd wants it)
//     [256, 512)  block 2p+1 nibbles, the same way
//     [512, 544)  block 2p   fp16 scales, row r at bytes 2r
//     [544, 576)  block 2p+1 fp16 scales
//   576 = 9 cache lines, so a 64-byte-aligned group stays aligned and decode reads one group as
//   one sequential stream.
//
// Activation format of the packed tile ("q4_0p activation"): the prepared Q8_0 activation
// (prepare_act_q8_0: blocks, then float scales) followed by nb int32 corrections, -8 * (sum of the
// block's 32 int8 values): the integer dot then starts at the correction and sum(u * a) + corr =
// sum((u - 8) * a) exactly.
//
// Packed tensors are found by the matmul through a process-wide registry keyed by the tensor's
// data pointer (the GGUF mapping): the TensorView keeps pointing at the original Q4_0 bytes, which
// every other reader (embedding rows, export, fingerprint, sgemm prefill) uses unchanged.
//
// Dimension legend: n = cols (a multiple of 32), nb = n / 32 blocks, npairs = ceil(nb / 2),
// ngroups = ceil(rows / 16), r = row within a group.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/aligned_buffer.h"
#include "kernels/quant.h"

namespace kvs::kernels {

inline constexpr int kQ4PackRows = 16;
inline constexpr size_t kQ4PackBlockBytes = 256;  // nibbles of one block, 16 rows
inline constexpr size_t kQ4PackPairBytes = 576;   // two blocks' nibbles + their scales

struct PackedQ4_0 {
  int64_t rows = 0, cols = 0, nb = 0, ngroups = 0;
  size_t group_stride = 0;       // bytes per 16-row group: npairs * 576
  AlignedBuffer<uint8_t> data;   // [ngroups][npairs][576]
  const uint8_t* group(int64_t g) const { return data.data() + static_cast<size_t>(g) * group_stride; }
  size_t bytes() const { return static_cast<size_t>(ngroups) * group_stride; }
};

// True when the active kernel table has the packed tile and KVS_NO_REPACK is unset or "0" (the
// model loader then repacks its Q4_0 matrices; KVS_NO_REPACK=1 is for A/B measurements).
bool q4_0_packing_active();

// Repacks rows x cols Q4_0 weights ([rows][cols / 32] block_q4_0). cols % 32 == 0.
std::shared_ptr<PackedQ4_0> pack_q4_0(const void* q4_0, int64_t rows, int64_t cols);
// Row r back in Q4_0 blocks ([cols / 32]); pack_q4_0 then unpack is the identity (for tests).
void unpack_q4_0_row(const PackedQ4_0& p, int64_t r, block_q4_0* out);

// q4_0p activation of one row: bytes, and the corrections' position in it.
inline size_t act_q4_0p_bytes(int64_t n) { return act_q8_0_bytes(n) + static_cast<size_t>(n / QK8_0) * sizeof(int32_t); }
inline const int32_t* act_q4_0p_corr(const void* act, int64_t n) {
  return reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(act) + act_q8_0_bytes(n));
}
// Writes the corrections of an already prepared Q8_0 activation row (act holds act_q4_0p_bytes).
void finish_act_q4_0p(void* act, int64_t n);

// Scalar reference of the packed tile: out[t * ldo + 16g + r] for the groups [g0, g0 + ng), the
// valid rows only, tokens t < nt; act rows act_stride bytes apart in q4_0p format.
void tile_q4_0p_ref(const PackedQ4_0& p, int64_t g0, int64_t ng, const uint8_t* act, size_t act_stride, int nt,
                    float* out, int64_t ldo);

// Registry (thread-safe). register replaces an entry for the same key; find checks the shape.
void register_packed_q4_0(const void* key, std::shared_ptr<const PackedQ4_0> p);
void unregister_packed_q4_0(const void* key);
std::shared_ptr<const PackedQ4_0> find_packed_q4_0(const void* key, int64_t rows, int64_t cols);

}  // namespace kvs::kernels
