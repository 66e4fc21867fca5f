// Q4_0 repacking (layout in q4_0_packed.h), its scalar reference tile and the registry of packed
// tensors.
#include "kernels/q4_0_packed.h"

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

namespace kvs::kernels {

bool q4_0_packing_active() {
  const char* e = std::getenv("KVS_NO_REPACK");
  return active_kernels().tile_q4_0p != nullptr && !(e && *e && std::strcmp(e, "0") != 0);
}

namespace {

// Groups [g0, g1) of p from the Q4_0 rows at src ([rows][nb]).
void pack_groups(PackedQ4_0& p, const block_q4_0* src, int64_t g0, int64_t g1) {
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* dst = p.data.data() + static_cast<size_t>(g) * p.group_stride;  // [npairs][576]
    std::memset(dst, 0, p.group_stride);  // padding rows/blocks: zero nibbles, zero scales
    const int nr = static_cast<int>(std::min<int64_t>(kQ4PackRows, p.rows - g * kQ4PackRows));
    for (int r = 0; r < nr; ++r) {
      const block_q4_0* row = src + (g * kQ4PackRows + r) * p.nb;
      for (int64_t b = 0; b < p.nb; ++b) {
        uint8_t* pair = dst + static_cast<size_t>(b / 2) * kQ4PackPairBytes;
        uint8_t* q = pair + static_cast<size_t>(b % 2) * kQ4PackBlockBytes;  // [4][16 rows][4]
        for (int k = 0; k < 4; ++k) std::memcpy(q + 64 * k + 4 * r, row[b].qs + 4 * k, 4);
        std::memcpy(pair + 2 * kQ4PackBlockBytes + 32 * (b % 2) + 2 * r, &row[b].d, 2);
      }
    }
  }
}

}  // namespace

std::shared_ptr<PackedQ4_0> pack_q4_0(const void* q4_0, int64_t rows, int64_t cols) {
  KVS_ASSERT(rows > 0 && cols > 0 && cols % QK4_0 == 0);
  auto p = std::make_shared<PackedQ4_0>();
  p->rows = rows;
  p->cols = cols;
  p->nb = cols / QK4_0;
  p->ngroups = (rows + kQ4PackRows - 1) / kQ4PackRows;
  const int64_t npairs = (p->nb + 1) / 2;
  p->group_stride = static_cast<size_t>(npairs) * kQ4PackPairBytes;
  p->data.resize(p->bytes());
  const auto* src = static_cast<const block_q4_0*>(q4_0);
  // Large tensors on a few threads (load time: reading the file pages and faulting in the copy).
  const int64_t nth = p->bytes() < (size_t{8} << 20)
                          ? 1
                          : std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 4);
  if (nth == 1) {
    pack_groups(*p, src, 0, p->ngroups);
    return p;
  }
  std::vector<std::thread> workers;
  for (int64_t i = 1; i < nth; ++i)
    workers.emplace_back([&, i] { pack_groups(*p, src, p->ngroups * i / nth, p->ngroups * (i + 1) / nth); });
  pack_groups(*p, src, 0, p->ngroups / nth);
  for (auto& w : workers) w.join();
  return p;
}

void unpack_q4_0_row(const PackedQ4_0& p, int64_t r, block_q4_0* out) {
  KVS_ASSERT(r >= 0 && r < p.rows);
  const uint8_t* grp = p.group(r / kQ4PackRows);
  const int ri = static_cast<int>(r % kQ4PackRows);
  for (int64_t b = 0; b < p.nb; ++b) {
    const uint8_t* pair = grp + static_cast<size_t>(b / 2) * kQ4PackPairBytes;
    const uint8_t* q = pair + static_cast<size_t>(b % 2) * kQ4PackBlockBytes;
    for (int k = 0; k < 4; ++k) std::memcpy(out[b].qs + 4 * k, q + 64 * k + 4 * ri, 4);
    std::memcpy(&out[b].d, pair + 2 * kQ4PackBlockBytes + 32 * (b % 2) + 2 * ri, 2);
  }
}

void finish_act_q4_0p(void* act, int64_t n) {
  const auto* blocks = static_cast<const block_q8_0*>(act);  // [nb]
  auto* corr = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(act) + act_q8_0_bytes(n));  // [nb]
  for (int64_t b = 0; b < n / QK8_0; ++b) {
    int32_t s = 0;
    for (int i = 0; i < QK8_0; ++i) s += blocks[b].qs[i];
    corr[b] = -8 * s;
  }
}

void tile_q4_0p_ref(const PackedQ4_0& p, int64_t g0, int64_t ng, const uint8_t* act, size_t act_stride, int nt,
                    float* out, int64_t ldo) {
  const int64_t n = p.cols;
  for (int64_t g = g0; g < g0 + ng; ++g) {
    const uint8_t* grp = p.group(g);
    const int nr = static_cast<int>(std::min<int64_t>(kQ4PackRows, p.rows - g * kQ4PackRows));
    for (int t = 0; t < nt; ++t) {
      const uint8_t* a = act + static_cast<size_t>(t) * act_stride;
      const auto* ab = reinterpret_cast<const block_q8_0*>(a);
      const float* sa = act_q8_0_scales(a, n);
      const int32_t* corr = act_q4_0p_corr(a, n);
      for (int r = 0; r < nr; ++r) {
        float sum = 0;
        for (int64_t b = 0; b < p.nb; ++b) {
          const uint8_t* pair = grp + static_cast<size_t>(b / 2) * kQ4PackPairBytes;
          const uint8_t* q = pair + static_cast<size_t>(b % 2) * kQ4PackBlockBytes;
          int32_t dot = corr[b];
          for (int k = 0; k < 4; ++k)
            for (int j = 0; j < 4; ++j) {
              const uint8_t byte = q[64 * k + 4 * r + j];
              dot += (byte & 15) * ab[b].qs[4 * k + j] + (byte >> 4) * ab[b].qs[16 + 4 * k + j];
            }
          uint16_t d;
          std::memcpy(&d, pair + 2 * kQ4PackBlockBytes + 32 * (b % 2) + 2 * r, 2);
          sum += fp16_to_fp32(d) * sa[b] * static_cast<float>(dot);
        }
        out[t * ldo + (g - g0) * kQ4PackRows + r] = sum;
      }
    }
  }
}

namespace {
struct Registry {
  std::shared_mutex mu;
  std::unordered_map<const void*, std::shared_ptr<const PackedQ4_0>> map;
};
Registry& registry() {
  static Registry r;
  return r;
}
}  // namespace

void register_packed_q4_0(const void* key, std::shared_ptr<const PackedQ4_0> p) {
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  r.map[key] = std::move(p);
}

void unregister_packed_q4_0(const void* key) {
  Registry& r = registry();
  std::unique_lock lock(r.mu);
  r.map.erase(key);
}

std::shared_ptr<const PackedQ4_0> find_packed_q4_0(const void* key, int64_t rows, int64_t cols) {
  Registry& r = registry();
  std::shared_lock lock(r.mu);
  if (r.map.empty()) return nullptr;
  auto it = r.map.find(key);
  if (it == r.map.end() || it->second->rows != rows || it->second->cols != cols) return nullptr;
  return it->second;
}

}  // namespace kvs::kernels
