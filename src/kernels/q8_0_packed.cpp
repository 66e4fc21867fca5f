// Q8_0's packed layout (q8_0_packed.h): where one row's 32 quants of a block go, as q + 128.
#include "kernels/q8_0_packed.h"

namespace kvs::kernels {
namespace {

// Vector k of the block holds row r's qs[4k .. 4k+3] + 128 (q xor 0x80) at bytes 4r..4r+3.
void put(uint8_t* blk, int r, const uint8_t* qs) {
  for (int e = 0; e < QK8_0; ++e) blk[64 * (e / 4) + 4 * r + e % 4] = qs[e] ^ 0x80u;
}
void get(const uint8_t* blk, int r, uint8_t* qs) {
  for (int e = 0; e < QK8_0; ++e) qs[e] = static_cast<uint8_t>(q8_0_packed_u(blk, r, e)) ^ 0x80u;
}

}  // namespace

const PackedLayout& q8_0_packed_layout() {
  static const PackedLayout l{DType::Q8_0, 128, kQ8PackBlockBytes, kQ8PackPairBytes, sizeof(block_q8_0),
                              put,          get, q8_0_packed_u};
  return l;
}

}  // namespace kvs::kernels
