// Q4_0's packed layout (q4_0_packed.h): where one row's 16 quant bytes of a block go.
#include "kernels/q4_0_packed.h"

#include <cstring>

namespace kvs::kernels {
namespace {

// Vector k of the block holds row r's qs[4k .. 4k+3] at bytes 4r..4r+3.
void put(uint8_t* blk, int r, const uint8_t* qs) {
  for (int k = 0; k < 4; ++k) std::memcpy(blk + 64 * k + 4 * r, qs + 4 * k, 4);
}
void get(const uint8_t* blk, int r, uint8_t* qs) {
  for (int k = 0; k < 4; ++k) std::memcpy(qs + 4 * k, blk + 64 * k + 4 * r, 4);
}

}  // namespace

const PackedLayout& q4_0_packed_layout() {
  static const PackedLayout l{DType::Q4_0, 8, kQ4PackBlockBytes, kQ4PackPairBytes, sizeof(block_q4_0),
                              put,          get, q4_0_packed_u};
  return l;
}

}  // namespace kvs::kernels
