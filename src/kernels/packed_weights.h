// Weight matrices repacked at load time for the AVX-512 VNNI packed tiles (Q4_0 and
// Q8_0): 16 rows interleaved per 32-weight block, so that one 64-byte load holds 4
// weights of each of the 16 rows and feeds one vpdpbusd against 4 activation bytes broadcast to
// every lane; lane r of the accumulator is row r's output (no horizontal sums), and the 16 rows'
// block scales are stored together as one vector. Each type's byte layout is in its own header
// (q4_0_packed.h, q8_0_packed.h); both store groups of 16 rows as a sequence of block pairs whose
// size is a multiple of 64 bytes, so a group is one aligned sequential stream. Same bytes as the
// GGUF tensor plus zero padding to whole 16-row groups and block pairs.
//
// Activation format of the packed tiles ("packed activation"): the prepared Q8_0 activation
// (prepare_act_q8_0: blocks, then float scales) followed by nb int32 corrections,
// -offset * (sum of the block's 32 int8 values), where the packed weights store u = q + offset
// (unsigned, as vpdpbusd's first operand must be: offset 8 for Q4_0's nibbles, 128 for Q8_0's
// bytes): the integer dot starts at the correction and sum(u * a) + corr = sum(q * a) exactly.
//
// Packed tensors are found by matmul through a process-wide registry keyed by the tensor's data
// pointer (the GGUF mapping): the TensorView keeps pointing at the original bytes, which every
// other reader (embedding rows, export, fingerprint, sgemm prefill) uses unchanged.
//
// Dimension legend: n = cols (a multiple of 32), nb = n / 32 blocks, npairs = ceil(nb / 2),
// ngroups = ceil(rows / 16), r = row within a group.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "core/dtype.h"
#include "kernels/quant.h"

namespace kvs::kernels {

inline constexpr int kPackRows = 16;

struct PackedWeights {
  DType type = DType::Q4_0;      // the GGUF type packed (Q4_0 or Q8_0)
  int64_t rows = 0, cols = 0, nb = 0, ngroups = 0;
  size_t group_stride = 0;       // bytes per 16-row group: npairs * the type's pair bytes
  uint8_t* data = nullptr;       // [ngroups][npairs][pair bytes], 64-byte aligned, inside storage
  std::shared_ptr<uint8_t> storage;  // owns data: the tensor's own block or a model's shared one
  const uint8_t* group(int64_t g) const { return data + static_cast<size_t>(g) * group_stride; }
  size_t bytes() const { return static_cast<size_t>(ngroups) * group_stride; }
};

// Bytes a packed copy of rows x cols weights of type t takes (a multiple of 64).
size_t packed_bytes(DType t, int64_t rows, int64_t cols);
// A block of `bytes` for packed weights; from 2 MiB on, 2 MiB-aligned and advised as transparent
// huge pages (MADV_HUGEPAGE) before anything touches it: the decode tile streams every matrix once
// a step, and on 4 KiB pages it crosses a page (a TLB miss, and the L2 streamer stops) every 64
// lines. The model's matrices share one such block (model/repack.cpp), so that the small
// per-layer ones sit on huge pages too (docs/benchmarks/issue25-server-step-5-intel-2026-11-30.md,
// "Guided chunks; packed weights on huge pages").
std::shared_ptr<uint8_t> alloc_packed_storage(size_t bytes);

// True when the active kernel table has the packed tile of `t` and KVS_NO_REPACK is unset or "0"
// (the model loader then repacks its matrices of that type; KVS_NO_REPACK=1 is for A/B
// measurements). False for types without a packed layout.
bool packing_active(DType t);

// A packed type's byte layout (its header: q4_0_packed.h, q8_0_packed.h): a group is npairs block
// pairs of pair_bytes = [block 2p quants][block 2p+1 quants][block 2p scales][block 2p+1 scales],
// block_bytes of quants per block and 32 bytes of 16 fp16 scales (row r at 2r). The GGUF block
// (gguf_block_bytes) is an fp16 scale then its quants; put writes row r's quants of one
// GGUF block into a packed block, get reads them back, u is the unsigned quant (q + offset) of
// element e (0..31) of row r, as the scalar reference reads it.
struct PackedLayout {
  DType type;
  int32_t offset;  // u = q + offset (8 for Q4_0, 128 for Q8_0)
  size_t block_bytes, pair_bytes, gguf_block_bytes;
  void (*put)(uint8_t* blk, int r, const uint8_t* quants);
  void (*get)(const uint8_t* blk, int r, uint8_t* quants);
  int (*u)(const uint8_t* blk, int r, int e);
};
// The layout of a packed type (Q4_0, Q8_0); fails for others.
const PackedLayout& packed_layout(DType t);

// Repacks rows x cols weights of a packed type ([rows][cols / 32] GGUF blocks); cols % 32 == 0.
// Tensors of 8 MiB and more are packed on a few threads (load time: reading the file pages and
// faulting in the copy).
std::shared_ptr<PackedWeights> pack_weights(DType t, const void* src, int64_t rows, int64_t cols);
// The same into storage at byte offset `offset` (a multiple of 64, packed_bytes(t, rows, cols)
// bytes free there); the result shares the storage's ownership.
std::shared_ptr<PackedWeights> pack_weights_into(DType t, const void* src, int64_t rows, int64_t cols,
                                                 std::shared_ptr<uint8_t> storage, size_t offset);
// One matrix for pack_weights_in_one_block: its GGUF bytes and shape.
struct PackSource {
  DType type;
  const void* src;
  int64_t rows, cols;
};
// Packs every source into one alloc_packed_storage block, back to back in the given order (as a
// model's matrices are packed: model/repack.cpp), handing each result to done(i, packed) as soon
// as it is packed (so that the caller can release source i before the next one is packed).
void pack_weights_in_one_block(std::span<const PackSource> sources,
                               const std::function<void(size_t, std::shared_ptr<PackedWeights>)>& done);
// Row r of p back in its GGUF blocks ([cols / 32]); pack then unpack is the identity (for tests).
void unpack_row(const PackedWeights& p, int64_t r, void* gguf_blocks);

// The packed activation of one row: bytes, and the corrections' position in it.
inline size_t act_packed_bytes(int64_t n) { return act_q8_0_bytes(n) + static_cast<size_t>(n / QK8_0) * sizeof(int32_t); }
inline const int32_t* act_packed_corr(const void* act, int64_t n) {
  return reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(act) + act_q8_0_bytes(n));
}
// Writes the corrections -offset * sum(block) of an already prepared Q8_0 activation row (act
// holds act_packed_bytes(n)).
void finish_act_packed(void* act, int64_t n, int32_t offset);

// Scalar reference of the packed tiles: out[t * ldo + 16(g - g0) + r] for the groups
// [g0, g0 + ng), the valid rows only, tokens t < nt; act rows act_stride bytes apart in the packed
// activation format (with p.type's offset).
void tile_packed_ref(const PackedWeights& p, int64_t g0, int64_t ng, const uint8_t* act, size_t act_stride, int nt,
                     float* out, int64_t ldo);

// Registry (thread-safe). register replaces an entry for the same key; find checks the shape.
void register_packed(const void* key, std::shared_ptr<const PackedWeights> p);
void unregister_packed(const void* key);
std::shared_ptr<const PackedWeights> find_packed(const void* key, int64_t rows, int64_t cols);

}  // namespace kvs::kernels
