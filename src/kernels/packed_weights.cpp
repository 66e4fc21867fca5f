// Packed weights (packed_weights.h): which types pack and when, the group-parallel packing, the
// packed activation's corrections, the scalar reference tile and the registry.
#include "kernels/packed_weights.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/q4_0_packed.h"
#include "kernels/q8_0_packed.h"

namespace kvs::kernels {

bool packing_active(DType t) {
  const char* e = std::getenv("KVS_NO_REPACK");
  return packed_tile_fn(active_kernels(), t) != nullptr && !(e && *e && std::strcmp(e, "0") != 0);
}

const PackedLayout& packed_layout(DType t) {
  switch (t) {
    case DType::Q4_0: return q4_0_packed_layout();
    case DType::Q8_0: return q8_0_packed_layout();
    default: fail("{} has no packed layout", dtype_name(t));
  }
}

namespace {

// The fp16 scale of row r of block b in a group (the pair's scales after its two blocks' quants).
inline size_t scale_at(const PackedLayout& l, int64_t b, int r) {
  return static_cast<size_t>(b / 2) * l.pair_bytes + 2 * l.block_bytes + 32 * static_cast<size_t>(b % 2) + 2 * r;
}
inline size_t quants_at(const PackedLayout& l, int64_t b) {
  return static_cast<size_t>(b / 2) * l.pair_bytes + static_cast<size_t>(b % 2) * l.block_bytes;
}

// Groups [g0, g1) of p from the GGUF rows at src ([rows][nb] blocks): zeroed first (padding rows
// and blocks: zero quants, zero scales), then every row's blocks put in place.
void pack_groups(const PackedLayout& l, PackedWeights& p, const uint8_t* src, int64_t g0, int64_t g1) {
  std::memset(p.data + static_cast<size_t>(g0) * p.group_stride, 0, static_cast<size_t>(g1 - g0) * p.group_stride);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* dst = p.data + static_cast<size_t>(g) * p.group_stride;  // [npairs][pair_bytes]
    const int nr = static_cast<int>(std::min<int64_t>(kPackRows, p.rows - g * kPackRows));
    for (int r = 0; r < nr; ++r) {
      const uint8_t* row = src + static_cast<size_t>(g * kPackRows + r) * p.nb * l.gguf_block_bytes;
      for (int64_t b = 0; b < p.nb; ++b) {
        const uint8_t* blk = row + static_cast<size_t>(b) * l.gguf_block_bytes;  // fp16 d, then the quants
        l.put(dst + quants_at(l, b), r, blk + 2);
        std::memcpy(dst + scale_at(l, b, r), blk, 2);
      }
    }
  }
}

}  // namespace

size_t packed_bytes(DType t, int64_t rows, int64_t cols) {
  KVS_ASSERT(rows > 0 && cols > 0 && cols % QK8_0 == 0);
  const int64_t ngroups = (rows + kPackRows - 1) / kPackRows, nb = cols / QK8_0;
  return static_cast<size_t>(ngroups) * static_cast<size_t>((nb + 1) / 2) * packed_layout(t).pair_bytes;
}

std::shared_ptr<uint8_t> alloc_packed_storage(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  // Under one huge page: ordinary 64-byte-aligned memory (a huge page would be mostly empty).
  const size_t align = bytes >= kHugePage ? kHugePage : 64;
  const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p == nullptr) throw std::bad_alloc();
  // Advice only: without THP (or with it off) the block is ordinary pages, nothing else changes.
  if (align == kHugePage) ::madvise(p, rounded, MADV_HUGEPAGE);
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
}

std::shared_ptr<PackedWeights> pack_weights_into(DType t, const void* src, int64_t rows, int64_t cols,
                                                 std::shared_ptr<uint8_t> storage, size_t offset) {
  const PackedLayout& l = packed_layout(t);
  KVS_ASSERT(rows > 0 && cols > 0 && cols % QK8_0 == 0 && storage && offset % 64 == 0);
  auto p = std::make_shared<PackedWeights>();
  p->type = t;
  p->rows = rows;
  p->cols = cols;
  p->nb = cols / QK8_0;
  p->ngroups = (rows + kPackRows - 1) / kPackRows;
  p->group_stride = static_cast<size_t>((p->nb + 1) / 2) * l.pair_bytes;
  p->data = storage.get() + offset;
  p->storage = std::move(storage);
  const auto* s = static_cast<const uint8_t*>(src);
  const int64_t nth = p->bytes() < (size_t{8} << 20)
                          ? 1
                          : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 4);
  // Each worker zeroes and fills its own groups, so the copy's first touch is shared too.
  std::vector<std::thread> workers;
  for (int64_t i = 1; i < nth; ++i)
    workers.emplace_back([&, i] { pack_groups(l, *p, s, p->ngroups * i / nth, p->ngroups * (i + 1) / nth); });
  pack_groups(l, *p, s, 0, p->ngroups / nth);
  for (auto& w : workers) w.join();
  return p;
}

std::shared_ptr<PackedWeights> pack_weights(DType t, const void* src, int64_t rows, int64_t cols) {
  return pack_weights_into(t, src, rows, cols, alloc_packed_storage(packed_bytes(t, rows, cols)), 0);
}

void pack_weights_in_one_block(std::span<const PackSource> sources,
                               const std::function<void(size_t, std::shared_ptr<PackedWeights>)>& done) {
  if (sources.empty()) return;
  size_t total = 0;
  for (const PackSource& s : sources) total += packed_bytes(s.type, s.rows, s.cols);
  const std::shared_ptr<uint8_t> storage = alloc_packed_storage(total);
  size_t off = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const PackSource& s = sources[i];
    auto p = pack_weights_into(s.type, s.src, s.rows, s.cols, storage, off);
    off += p->bytes();
    done(i, std::move(p));
  }
}

void unpack_row(const PackedWeights& p, int64_t r, void* gguf_blocks) {
  const PackedLayout& l = packed_layout(p.type);
  KVS_ASSERT(r >= 0 && r < p.rows);
  const uint8_t* grp = p.group(r / kPackRows);
  const int ri = static_cast<int>(r % kPackRows);
  auto* out = static_cast<uint8_t*>(gguf_blocks);
  for (int64_t b = 0; b < p.nb; ++b) {
    uint8_t* blk = out + static_cast<size_t>(b) * l.gguf_block_bytes;
    std::memcpy(blk, grp + scale_at(l, b, ri), 2);
    l.get(grp + quants_at(l, b), ri, blk + 2);
  }
}

void finish_act_packed(void* act, int64_t n, int32_t offset) {
  const auto* blocks = static_cast<const block_q8_0*>(act);  // [nb]
  auto* corr = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(act) + act_q8_0_bytes(n));  // [nb]
  for (int64_t b = 0; b < n / QK8_0; ++b) {
#if defined(__SSE2__)
    // sum(q) = sum(q ^ 0x80 as unsigned) - 32 * 128: two psadbw against zero per 16 bytes (the
    // compiler's own vectorization of the loop below sign-extended byte by byte, ~40 instructions
    // a block; a decode step prepares 120 activations of 16 tokens).
    const __m128i flip = _mm_set1_epi8(static_cast<char>(0x80));
    const __m128i lo = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].qs)), flip);
    const __m128i hi = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks[b].qs + 16)), flip);
    const __m128i sad = _mm_add_epi64(_mm_sad_epu8(lo, _mm_setzero_si128()), _mm_sad_epu8(hi, _mm_setzero_si128()));
    const int32_t s = _mm_cvtsi128_si32(_mm_add_epi64(sad, _mm_unpackhi_epi64(sad, sad))) - QK8_0 * 128;
#else
    int32_t s = 0;
    for (int i = 0; i < QK8_0; ++i) s += blocks[b].qs[i];
#endif
    corr[b] = -offset * s;
  }
}

void tile_packed_ref(const PackedWeights& p, int64_t g0, int64_t ng, const uint8_t* act, size_t act_stride, int nt,
                     float* out, int64_t ldo) {
  const PackedLayout& l = packed_layout(p.type);
  const int64_t n = p.cols;
  for (int64_t g = g0; g < g0 + ng; ++g) {
    const uint8_t* grp = p.group(g);
    const int nr = static_cast<int>(std::min<int64_t>(kPackRows, p.rows - g * kPackRows));
    for (int t = 0; t < nt; ++t) {
      const uint8_t* a = act + static_cast<size_t>(t) * act_stride;
      const auto* ab = reinterpret_cast<const block_q8_0*>(a);
      const float* sa = act_q8_0_scales(a, n);
      const int32_t* corr = act_packed_corr(a, n);
      for (int r = 0; r < nr; ++r) {
        float sum = 0;
        for (int64_t b = 0; b < p.nb; ++b) {
          const uint8_t* blk = grp + quants_at(l, b);
          int32_t dot = corr[b];
          for (int e = 0; e < QK8_0; ++e) dot += l.u(blk, r, e) * ab[b].qs[e];
          uint16_t d;
          std::memcpy(&d, grp + scale_at(l, b, r), 2);
          sum += fp16_to_fp32(d) * sa[b] * static_cast<float>(dot);
        }
        out[t * ldo + (g - g0) * kPackRows + r] = sum;
      }
    }
  }
}

namespace {
struct Registry {
  std::shared_mutex mu;
  std::unordered_map<const void*, std::shared_ptr<const PackedWeights>> map;
};
Registry& registry() {
  static Registry r;
  return r;
}
}  // namespace

void register_packed(const void* key, std::shared_ptr<const PackedWeights> p) {
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  r.map[key] = std::move(p);
}

void unregister_packed(const void* key) {
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  r.map.erase(key);
}

std::shared_ptr<const PackedWeights> find_packed(const void* key, int64_t rows, int64_t cols) {
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  if (r.map.empty()) return nullptr;
  auto it = r.map.find(key);
  if (it == r.map.end() || it->second->rows != rows || it->second->cols != cols) return nullptr;
  return it->second;
}

}  // namespace kvs::kernels
