// Portable kernels for the 32-element formats beyond Q8_0/Q4_0: Q4_1, Q5_0, Q5_1 and IQ4_NL
// (layouts in quant_blocks.h). Row dequantisation (the reference's float operations, so bit-exact) and
// weight-row dots against the activation format ggml pairs them with: Q8_0 for Q5_0/IQ4_NL,
// Q8_1 (Q8_0 + block sums) for Q4_1/Q5_1, whose offset m multiplies the activation's block sum.
// Integer sums per block, float accumulation across blocks; loops the compiler can vectorise.
//
// Dimension legend: n = row length, b = block, j = element in a block (0..31), l = byte (0..15).
#include <cstring>

#include "core/fp16.h"
#include "kernels/cpu/generic_fp16.h"
#include "kernels/cpu/impl.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/quant.h"

namespace kvs::kernels::generic {
namespace {

// The 32 quants of a 5-bit block in [0, 31], element order.
inline void unpack_q5(const uint8_t* qs, const uint8_t* qh, uint8_t q[32]) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  for (int l = 0; l < 16; ++l) {
    q[l] = static_cast<uint8_t>((qs[l] & 0xF) | (((h >> l) & 1) << 4));
    q[l + 16] = static_cast<uint8_t>((qs[l] >> 4) | (((h >> (l + 16)) & 1) << 4));
  }
}

inline void unpack_q4(const uint8_t* qs, uint8_t q[32]) {
  for (int l = 0; l < 16; ++l) {
    q[l] = qs[l] & 0xF;
    q[l + 16] = qs[l] >> 4;
  }
}

inline int32_t idot_u8(const uint8_t* q, const int8_t* a) {
  int32_t s = 0;
  for (int j = 0; j < 32; ++j) s += q[j] * a[j];
  return s;
}

}  // namespace

void quant_act_q8_1(const float* x, void* y, int64_t n) { prepare_act_q8_1(x, y, n); }

void dequant_q4_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q4_1*>(src);
  for (int64_t b = 0; b < n / QK4_1; ++b, dst += QK4_1) {
    const float d = fp16_to_fp32(x[b].d), m = fp16_to_fp32(x[b].m);
    uint8_t q[32];
    unpack_q4(x[b].qs, q);
    for (int j = 0; j < 32; ++j) dst[j] = d * q[j] + m;
  }
}

void dequant_q5_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q5_0*>(src);
  for (int64_t b = 0; b < n / QK5_0; ++b, dst += QK5_0) {
    const float d = fp16_to_fp32(x[b].d);
    uint8_t q[32];
    unpack_q5(x[b].qs, x[b].qh, q);
    for (int j = 0; j < 32; ++j) dst[j] = d * (q[j] - 16);
  }
}

void dequant_q5_1(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q5_1*>(src);
  for (int64_t b = 0; b < n / QK5_1; ++b, dst += QK5_1) {
    const float d = fp16_to_fp32(x[b].d), m = fp16_to_fp32(x[b].m);
    uint8_t q[32];
    unpack_q5(x[b].qs, x[b].qh, q);
    for (int j = 0; j < 32; ++j) dst[j] = d * q[j] + m;
  }
}

void dequant_iq4_nl(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_iq4_nl*>(src);
  for (int64_t b = 0; b < n / QK4_NL; ++b, dst += QK4_NL) {
    const float d = fp16_to_fp32(x[b].d);
    for (int l = 0; l < 16; ++l) {
      dst[l] = d * kIQ4NLValues[x[b].qs[l] & 0xF];
      dst[l + 16] = d * kIQ4NLValues[x[b].qs[l] >> 4];
    }
  }
}

float dot_q4_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const block_q4_1*>(w);
  const auto* y = static_cast<const block_q8_0*>(act);
  const float* dy = act_q8_0_scales(act, n);
  const float* sy = act_q8_1_sums(act, n);
  float s = 0;
  for (int64_t b = 0; b < n / QK4_1; ++b) {
    uint8_t q[32];
    unpack_q4(x[b].qs, q);
    s += h2f_vec(x[b].d) * dy[b] * static_cast<float>(idot_u8(q, y[b].qs)) + h2f_vec(x[b].m) * sy[b];
  }
  return s;
}

float dot_q5_1(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const block_q5_1*>(w);
  const auto* y = static_cast<const block_q8_0*>(act);
  const float* dy = act_q8_0_scales(act, n);
  const float* sy = act_q8_1_sums(act, n);
  float s = 0;
  for (int64_t b = 0; b < n / QK5_1; ++b) {
    uint8_t q[32];
    unpack_q5(x[b].qs, x[b].qh, q);
    s += h2f_vec(x[b].d) * dy[b] * static_cast<float>(idot_u8(q, y[b].qs)) + h2f_vec(x[b].m) * sy[b];
  }
  return s;
}

float dot_q5_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const block_q5_0*>(w);
  const auto* y = static_cast<const block_q8_0*>(act);
  const float* dy = act_q8_0_scales(act, n);
  float s = 0;
  for (int64_t b = 0; b < n / QK5_0; ++b) {
    uint8_t q[32];
    unpack_q5(x[b].qs, x[b].qh, q);
    int32_t sa = 0;  // the -16 offset: sum(q a) - 16 sum(a)
    for (int j = 0; j < 32; ++j) sa += y[b].qs[j];
    s += h2f_vec(x[b].d) * dy[b] * static_cast<float>(idot_u8(q, y[b].qs) - 16 * sa);
  }
  return s;
}

float dot_iq4_nl(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const block_iq4_nl*>(w);
  const auto* y = static_cast<const block_q8_0*>(act);
  const float* dy = act_q8_0_scales(act, n);
  float s = 0;
  for (int64_t b = 0; b < n / QK4_NL; ++b) {
    int32_t is = 0;
    for (int l = 0; l < 16; ++l)
      is += kIQ4NLValues[x[b].qs[l] & 0xF] * y[b].qs[l] + kIQ4NLValues[x[b].qs[l] >> 4] * y[b].qs[l + 16];
    s += h2f_vec(x[b].d) * dy[b] * static_cast<float>(is);
  }
  return s;
}

void tile_q4_1(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  dot_tile_by_rows<dot_q4_1>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q5_0(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  dot_tile_by_rows<dot_q5_0>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q5_1(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  dot_tile_by_rows<dot_q5_1>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_iq4_nl(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
                 float* out, int64_t ldo) {
  dot_tile_by_rows<dot_iq4_nl>(w, ws, nr, a, as, nt, n, out, ldo);
}

}  // namespace kvs::kernels::generic
