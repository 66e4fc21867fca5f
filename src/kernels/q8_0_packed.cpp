// Q8_0 repacking (layout in q8_0_packed.h).
#include "kernels/q8_0_packed.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace kvs::kernels {
namespace {

// Groups [g0, g1) of p from the Q8_0 rows at src ([rows][nb]); p.data is zeroed (the padding).
void pack_groups(PackedWeights& p, const void* src_v, int64_t g0, int64_t g1) {
  const auto* src = static_cast<const block_q8_0*>(src_v);
  for (int64_t g = g0; g < g1; ++g) {
    uint8_t* dst = p.data.data() + static_cast<size_t>(g) * p.group_stride;  // [npairs][1088]
    const int nr = static_cast<int>(std::min<int64_t>(kPackRows, p.rows - g * kPackRows));
    for (int r = 0; r < nr; ++r) {
      const block_q8_0* row = src + (g * kPackRows + r) * p.nb;
      for (int64_t b = 0; b < p.nb; ++b) {
        uint8_t* pair = dst + static_cast<size_t>(b / 2) * kQ8PackPairBytes;
        uint8_t* q = pair + static_cast<size_t>(b % 2) * kQ8PackBlockBytes;  // [8][16 rows][4]
        for (int k = 0; k < 8; ++k)
          for (int j = 0; j < 4; ++j) q[64 * k + 4 * r + j] = static_cast<uint8_t>(row[b].qs[4 * k + j]) ^ 0x80u;
        std::memcpy(pair + 2 * kQ8PackBlockBytes + 32 * (b % 2) + 2 * r, &row[b].d, 2);
      }
    }
  }
}

}  // namespace

std::shared_ptr<PackedWeights> pack_q8_0(const void* q8_0, int64_t rows, int64_t cols) {
  return pack_in_groups(DType::Q8_0, rows, cols, kQ8PackPairBytes, pack_groups, q8_0);
}

void unpack_q8_0_row(const PackedWeights& p, int64_t r, block_q8_0* out) {
  KVS_ASSERT(p.type == DType::Q8_0 && r >= 0 && r < p.rows);
  const uint8_t* grp = p.group(r / kPackRows);
  const int ri = static_cast<int>(r % kPackRows);
  for (int64_t b = 0; b < p.nb; ++b) {
    const uint8_t* pair = grp + static_cast<size_t>(b / 2) * kQ8PackPairBytes;
    const uint8_t* q = pair + static_cast<size_t>(b % 2) * kQ8PackBlockBytes;
    for (int e = 0; e < 32; ++e) out[b].qs[e] = static_cast<int8_t>(q8_0_packed_u(q, ri, e) - 128);
    std::memcpy(&out[b].d, pair + 2 * kQ8PackBlockBytes + 32 * (b % 2) + 2 * ri, 2);
  }
}

}  // namespace kvs::kernels
