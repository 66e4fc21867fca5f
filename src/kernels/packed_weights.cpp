// Packed weights (packed_weights.h): which types pack and when, the group-parallel packing, the
// packed activation's corrections, the scalar reference tile and the registry.
#include "kernels/packed_weights.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
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

bool packable(DType t) { return t == DType::Q4_0 || t == DType::Q8_0; }

bool packing_active(DType t) {
  const char* e = std::getenv("KVS_NO_REPACK");
  return packed_tile_fn(active_kernels(), t) != nullptr && !(e && *e && std::strcmp(e, "0") != 0);
}

std::shared_ptr<PackedWeights> pack_weights(DType t, const void* src, int64_t rows, int64_t cols) {
  switch (t) {
    case DType::Q4_0: return pack_q4_0(src, rows, cols);
    case DType::Q8_0: return pack_q8_0(src, rows, cols);
    default: fail("pack_weights: {} has no packed layout", dtype_name(t));
  }
}

std::shared_ptr<PackedWeights> pack_in_groups(DType t, int64_t rows, int64_t cols, size_t pair_bytes,
                                              void (*fill)(PackedWeights& p, const void* src, int64_t g0, int64_t g1),
                                              const void* src) {
  KVS_ASSERT(rows > 0 && cols > 0 && cols % QK8_0 == 0);
  auto p = std::make_shared<PackedWeights>();
  p->type = t;
  p->rows = rows;
  p->cols = cols;
  p->nb = cols / QK8_0;
  p->ngroups = (rows + kPackRows - 1) / kPackRows;
  p->group_stride = static_cast<size_t>((p->nb + 1) / 2) * pair_bytes;
  p->data.resize(p->bytes());
  const int64_t nth = p->bytes() < (size_t{8} << 20)
                          ? 1
                          : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 4);
  // Each worker zeroes its own groups first (padding rows / blocks: zero quants, zero scales), so
  // the copy's first touch is shared too.
  auto work = [&](int64_t g0, int64_t g1) {
    std::memset(p->data.data() + static_cast<size_t>(g0) * p->group_stride, 0, static_cast<size_t>(g1 - g0) * p->group_stride);
    fill(*p, src, g0, g1);
  };
  std::vector<std::thread> workers;
  for (int64_t i = 1; i < nth; ++i)
    workers.emplace_back([&, i] { work(p->ngroups * i / nth, p->ngroups * (i + 1) / nth); });
  work(0, p->ngroups / nth);
  for (auto& w : workers) w.join();
  return p;
}

int32_t packed_offset(DType t) {
  switch (t) {
    case DType::Q4_0: return 8;
    case DType::Q8_0: return 128;
    default: fail("packed_offset: {} has no packed layout", dtype_name(t));
  }
}

void finish_act_packed(void* act, int64_t n, int32_t offset) {
  const auto* blocks = static_cast<const block_q8_0*>(act);  // [nb]
  auto* corr = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(act) + act_q8_0_bytes(n));  // [nb]
  for (int64_t b = 0; b < n / QK8_0; ++b) {
    int32_t s = 0;
    for (int i = 0; i < QK8_0; ++i) s += blocks[b].qs[i];
    corr[b] = -offset * s;
  }
}

void tile_packed_ref(const PackedWeights& p, int64_t g0, int64_t ng, const uint8_t* act, size_t act_stride, int nt,
                     float* out, int64_t ldo) {
  const bool q8 = p.type == DType::Q8_0;
  KVS_ASSERT(q8 || p.type == DType::Q4_0);
  const size_t block_bytes = q8 ? kQ8PackBlockBytes : kQ4PackBlockBytes;
  const size_t pair_bytes = q8 ? kQ8PackPairBytes : kQ4PackPairBytes;
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
          const uint8_t* pair = grp + static_cast<size_t>(b / 2) * pair_bytes;
          const uint8_t* blk = pair + static_cast<size_t>(b % 2) * block_bytes;
          int32_t dot = corr[b];
          for (int e = 0; e < QK8_0; ++e)
            dot += (q8 ? q8_0_packed_u(blk, r, e) : q4_0_packed_u(blk, r, e)) * ab[b].qs[e];
          uint16_t d;
          std::memcpy(&d, pair + 2 * block_bytes + 32 * (b % 2) + 2 * r, 2);
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
