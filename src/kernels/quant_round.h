// Rounding helpers shared by the weight quantisers (quant.cpp, quant_k.cpp, quant_iq4.cpp).
// Internal to kernels/.
#pragma once
#include <cstdint>
#include <cstring>

namespace kvs::kernels::detail {

// Round to nearest, ties to even, the way ggml's quantisers do it (ggml-quants.c nearest_int):
// adding 1.5 * 2^23 leaves the rounded integer in the low mantissa bits. Equal to
// std::nearbyint for |x| < 2^22; beyond that both wrap the same way, which keeps even degenerate
// blocks byte-identical with llama-quantize's.
inline int round_nearest(float x) {
  const float v = x + 12582912.0f;
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return static_cast<int>(bits & 0x007fffffu) - 0x00400000;
}

// (int8_t)(f) as C writes it for the f in [-128, 128) that the 32-element formats produce:
// truncation toward zero. Out-of-range f (only from non-finite input, which the writer refuses)
// is clamped instead of being undefined.
inline int truncate_to_int8(float f) {
  if (!(f > -129.0f)) return -128;
  if (!(f < 128.0f)) return 127;
  return static_cast<int>(f);
}

}  // namespace kvs::kernels::detail
