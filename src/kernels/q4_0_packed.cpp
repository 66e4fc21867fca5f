// Q4_0 repacking (layout in q4_0_packed.h).
#include "kernels/q4_0_packed.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace kvs::kernels {
namespace {

// Groups [g0, g1) of p from the Q4_0 rows at src ([rows][nb]); p.data is zeroed (the padding).
void pack_groups(PackedWeights& p, const void* src_v, int64_t g0, int64_t g1) {
  const auto* src = static_cast<const block_q4_0*>(src_v);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* dst = p.data.data() + static_cast<size_t>(g) * p.group_stride;  // [npairs][576]
    const int nr = static_cast<int>(std::min<int64_t>(kPackRows, p.rows - g * kPackRows));
    for (int r = 0; r < nr; ++r) {
      const block_q4_0* row = src + (g * kPackRows + r) * p.nb;
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

std::shared_ptr<PackedWeights> pack_q4_0(const void* q4_0, int64_t rows, int64_t cols) {
  return pack_in_groups(DType::Q4_0, rows, cols, kQ4PackPairBytes, pack_groups, q4_0);
}

void unpack_q4_0_row(const PackedWeights& p, int64_t r, block_q4_0* out) {
  KVS_ASSERT(p.type == DType::Q4_0 && r >= 0 && r < p.rows);
  const uint8_t* grp = p.group(r / kPackRows);
  const int ri = static_cast<int>(r % kPackRows);
  for (int64_t b = 0; b < p.nb; ++b) {
    const uint8_t* pair = grp + static_cast<size_t>(b / 2) * kQ4PackPairBytes;
    const uint8_t* q = pair + static_cast<size_t>(b % 2) * kQ4PackBlockBytes;
    for (int k = 0; k < 4; ++k) std::memcpy(out[b].qs + 4 * k, q + 64 * k + 4 * ri, 4);
    std::memcpy(&out[b].d, pair + 2 * kQ4PackBlockBytes + 32 * (b % 2) + 2 * ri, 2);
  }
}

}  // namespace kvs::kernels
