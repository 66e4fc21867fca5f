#include "model/weight_check.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/quant_blocks.h"

namespace kvs {

namespace {

using namespace kernels;  // block_* layouts

// The fp16 fields a block's values are scaled by: byte offsets within the block and names.
struct ScaleFields {
  int n = 0;
  size_t off[2] = {0, 0};
  const char* name[2] = {"", ""};
};

ScaleFields scale_fields(DType t) {
  switch (t) {
    case DType::Q8_0: return {1, {offsetof(block_q8_0, d)}, {"d"}};
    case DType::Q4_0: return {1, {offsetof(block_q4_0, d)}, {"d"}};
    case DType::Q4_1: return {2, {offsetof(block_q4_1, d), offsetof(block_q4_1, m)}, {"d", "m"}};
    case DType::Q5_0: return {1, {offsetof(block_q5_0, d)}, {"d"}};
    case DType::Q5_1: return {2, {offsetof(block_q5_1, d), offsetof(block_q5_1, m)}, {"d", "m"}};
    case DType::IQ4_NL: return {1, {offsetof(block_iq4_nl, d)}, {"d"}};
    case DType::Q2_K: return {2, {offsetof(block_q2_K, d), offsetof(block_q2_K, dmin)}, {"d", "dmin"}};
    case DType::Q3_K: return {1, {offsetof(block_q3_K, d)}, {"d"}};
    case DType::Q4_K: return {2, {offsetof(block_q4_K, d), offsetof(block_q4_K, dmin)}, {"d", "dmin"}};
    case DType::Q5_K: return {2, {offsetof(block_q5_K, d), offsetof(block_q5_K, dmin)}, {"d", "dmin"}};
    case DType::Q6_K: return {1, {offsetof(block_q6_K, d)}, {"d"}};
    case DType::IQ4_XS: return {1, {offsetof(block_iq4_xs, d)}, {"d"}};
    default: return {};
  }
}

template <typename U>
U load(const uint8_t* p) {
  U v;
  std::memcpy(&v, p, sizeof(U));
  return v;
}

// An fp16 / bf16 / f32 bit pattern is not finite when its exponent bits are all ones, i.e. when
// its magnitude bits (sign cleared) are at least the exponent mask: the test is a maximum, which
// the compiler vectorises (pmaxuw / pmaxud) where an equality per element would not.
constexpr uint16_t kF16Exp = 0x7C00, kBf16Exp = 0x7F80;
constexpr uint32_t kF32Exp = 0x7F800000u;

// Index of the first element of [p, p + n) (each sizeof(U) bytes, `stride` bytes apart; 0:
// packed) whose magnitude bits reach `exp`; n when none. Chunks are scanned without a branch per
// element, then the chunk holding a hit is searched again.
template <typename U>
size_t first_nonfinite(const uint8_t* p, size_t n, U exp, size_t stride = 0) {
  constexpr U kAbs = static_cast<U>(static_cast<U>(~U{0}) >> 1);
  constexpr size_t kChunk = 8192;
  const size_t step = stride ? stride : sizeof(U);
  for (size_t c = 0; c < n; c += kChunk) {
    const size_t e = c + kChunk < n ? c + kChunk : n;
    U mx = 0;
    if (stride == 0) {  // a compile-time step: vectorised
      for (size_t i = c; i < e; ++i) mx = std::max<U>(mx, static_cast<U>(load<U>(p + i * sizeof(U)) & kAbs));
    } else {
      for (size_t i = c; i < e; ++i) mx = std::max<U>(mx, static_cast<U>(load<U>(p + i * step) & kAbs));
    }
    if (mx < exp) continue;
    for (size_t i = c; i < e; ++i)
      if (static_cast<U>(load<U>(p + i * step) & kAbs) >= exp) return i;
  }
  return n;
}

}  // namespace

void check_weights_finite(const TensorView& t, const std::string& src) {
  if (!t.valid()) return;
  const auto* p = static_cast<const uint8_t*>(t.data);
  const auto describe = [&] { return fmt::format("tensor '{}' ({} {})", t.name, dtype_name(t.type), shape_str(t)); };
  const auto plain = [&](size_t i, double v) {
    const int64_t cols = t.cols();
    fail("{}: {} holds a non-finite value, {}, at element {} (row {}, column {}): the file is damaged or was written "
         "from non-finite weights",
         src, describe(), v, i, static_cast<int64_t>(i) / cols, static_cast<int64_t>(i) % cols);
  };
  const size_t n_el = static_cast<size_t>(t.n_elements());
  switch (t.type) {
    case DType::F32:
      if (const size_t i = first_nonfinite<uint32_t>(p, n_el, kF32Exp); i < n_el)
        plain(i, fp32_from_bits(load<uint32_t>(p + i * 4)));
      return;
    case DType::F16:
      if (const size_t i = first_nonfinite<uint16_t>(p, n_el, kF16Exp); i < n_el)
        plain(i, fp16_to_fp32(load<uint16_t>(p + i * 2)));
      return;
    case DType::BF16:
      if (const size_t i = first_nonfinite<uint16_t>(p, n_el, kBf16Exp); i < n_el)
        plain(i, bf16_to_fp32(load<uint16_t>(p + i * 2)));
      return;
    default: break;
  }
  const ScaleFields f = scale_fields(t.type);
  if (f.n == 0) return;  // not a type the kernels compute with: check_matrix names it
  const DTypeInfo& info = dtype_info(t.type);
  const size_t bs = static_cast<size_t>(info.type_size);
  const size_t n_blocks = n_el / static_cast<size_t>(info.block_size);
  const int64_t per_row = t.cols() / info.block_size;
  for (int k = 0; k < f.n; ++k) {
    const size_t b = first_nonfinite<uint16_t>(p + f.off[k], n_blocks, kF16Exp, bs);
    if (b == n_blocks) continue;
    fail("{}: {} has a non-finite scale in block {} (row {}, block {} of the row): {} = {}; the file is damaged or "
         "was written from non-finite weights",
         src, describe(), b, static_cast<int64_t>(b) / per_row, static_cast<int64_t>(b) % per_row, f.name[k],
         fp16_to_fp32(load<uint16_t>(p + b * bs + f.off[k])));
  }
}

}  // namespace kvs
