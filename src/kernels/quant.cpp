// Activation quantisers, the 32-element weight formats (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) and the
// quantize_weights dispatch. The K-quants are in quant_k.cpp, IQ4_NL/IQ4_XS in quant_iq4.cpp;
// quant.h states the algorithms and where they come from.
//
// Dimension legend: n = row length, b = block index, j = element within a block.
#include "kernels/quant.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/quant_round.h"

namespace kvs::kernels {
namespace {

using detail::truncate_to_int8;

inline int nearest_even(float x) { return static_cast<int>(std::nearbyint(x)); }

// Q8_0 blocks of an activation: ties to even (what the AVX2 path's vcvtps2dq does).
void quantize_act_q8_0_blocks(const float* x, block_q8_0* y, int64_t n) {
  for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
    float amax = 0;
    for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < QK8_0; ++j) y[b].qs[j] = static_cast<int8_t>(nearest_even(x[j] * id));
  }
}

// Value of largest magnitude in a block (the first one on ties), as ggml's Q4_0/Q5_0 find it.
float signed_absmax(const float* x, int n) {
  float amax = 0, max = 0;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void block_range(const float* x, int n, float* lo, float* hi) {
  *lo = FLT_MAX;
  *hi = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *lo) *lo = x[j];
    if (x[j] > *hi) *hi = x[j];
  }
}

// Fifth bits of 32 quants (element j -> bit j), stored little-endian as ggml's memcpy does.
void store_fifth_bits(const int* q, uint8_t qh[4]) {
  uint32_t bits = 0;
  for (int j = 0; j < 32; ++j) bits |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  for (int k = 0; k < 4; ++k) qh[k] = static_cast<uint8_t>(bits >> (8 * k));
}

// Low nibbles of 32 quants: element j < 16 in the low nibble of qs[j], j >= 16 in the high one.
void store_nibbles(const int* q, uint8_t qs[16]) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
}

}  // namespace

// ---- activations ---------------------------------------------------------------------------------

void quantize_act_q8_K(const float* x, block_q8_K* y, int64_t n) {
  KVS_ASSERT(n % QK_K == 0);
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    float amax = 0;
    for (int j = 0; j < QK_K; ++j) amax = std::max(amax, std::fabs(x[j]));
    block_q8_K& o = y[b];
    if (amax == 0.0f) {
      o.d = 0;
      std::fill(o.qs, o.qs + QK_K, int8_t{0});
      std::fill(o.bsums, o.bsums + QK_K / 16, int16_t{0});
      continue;
    }
    const float iscale = 127.0f / amax;
    for (int j = 0; j < QK_K; ++j)
      o.qs[j] = static_cast<int8_t>(std::clamp(nearest_even(x[j] * iscale), -127, 127));
    for (int k = 0; k < QK_K / 16; ++k) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += o.qs[16 * k + j];
      o.bsums[k] = static_cast<int16_t>(s);
    }
    o.d = 1.0f / iscale;
  }
}

void prepare_act_q8_0(const float* x, void* act, int64_t n) {
  auto* blocks = static_cast<block_q8_0*>(act);
  quantize_act_q8_0_blocks(x, blocks, n);
  float* scales = act_q8_0_pad_and_scales(act, n);
  for (int64_t b = 0; b < n / QK8_0; ++b) scales[b] = fp16_to_fp32(blocks[b].d);
}

void finish_act_q8_1(void* act, int64_t n) {
  const auto* blocks = static_cast<const block_q8_0*>(act);
  const float* scales = act_q8_0_scales(act, n);
  auto* sums = reinterpret_cast<float*>(static_cast<uint8_t*>(act) + act_q8_0_bytes(n));  // [nb]
  for (int64_t b = 0; b < n / QK8_0; ++b) {
    int32_t s = 0;
    for (int j = 0; j < QK8_0; ++j) s += blocks[b].qs[j];
    sums[b] = scales[b] * static_cast<float>(s);
  }
}

void prepare_act_q8_1(const float* x, void* act, int64_t n) {
  prepare_act_q8_0(x, act, n);
  finish_act_q8_1(act, n);
}

// ---- 32-element weight formats (ggml-quants.c quantize_row_{q8_0,q4_0,q4_1,q5_0,q5_1}_ref) ------

void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n) {
  KVS_ASSERT(n % QK8_0 == 0);
  for (int64_t b = 0; b < n / QK8_0; ++b, x += QK8_0) {
    float amax = 0;
    for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    for (int j = 0; j < QK8_0; ++j) y[b].qs[j] = static_cast<int8_t>(truncate_to_int8(std::round(x[j] * id)));
  }
}

void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n) {
  KVS_ASSERT(n % QK4_0 == 0);
  for (int64_t b = 0; b < n / QK4_0; ++b, x += QK4_0) {
    const float d = signed_absmax(x, QK4_0) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    int q[QK4_0];
    for (int j = 0; j < QK4_0; ++j) q[j] = std::min(15, truncate_to_int8(x[j] * id + 8.5f));
    store_nibbles(q, y[b].qs);
  }
}

void quantize_row_q5_0(const float* x, block_q5_0* y, int64_t n) {
  KVS_ASSERT(n % QK5_0 == 0);
  for (int64_t b = 0; b < n / QK5_0; ++b, x += QK5_0) {
    const float d = signed_absmax(x, QK5_0) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    int q[QK5_0];
    for (int j = 0; j < QK5_0; ++j) q[j] = std::min(31, truncate_to_int8(x[j] * id + 16.5f));
    store_nibbles(q, y[b].qs);
    store_fifth_bits(q, y[b].qh);
  }
}

void quantize_row_q4_1(const float* x, block_q4_1* y, int64_t n) {
  KVS_ASSERT(n % QK4_1 == 0);
  for (int64_t b = 0; b < n / QK4_1; ++b, x += QK4_1) {
    float lo, hi;
    block_range(x, QK4_1, &lo, &hi);
    const float d = (hi - lo) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    y[b].m = fp32_to_fp16(lo);
    int q[QK4_1];
    for (int j = 0; j < QK4_1; ++j) q[j] = std::min(15, truncate_to_int8((x[j] - lo) * id + 0.5f));
    store_nibbles(q, y[b].qs);
  }
}

void quantize_row_q5_1(const float* x, block_q5_1* y, int64_t n) {
  KVS_ASSERT(n % QK5_1 == 0);
  for (int64_t b = 0; b < n / QK5_1; ++b, x += QK5_1) {
    float lo, hi;
    block_range(x, QK5_1, &lo, &hi);
    const float d = (hi - lo) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = fp32_to_fp16(d);
    y[b].m = fp32_to_fp16(lo);
    int q[QK5_1];  // ggml converts to uint8_t without a clamp; the value is at most 31 here
    for (int j = 0; j < QK5_1; ++j) q[j] = truncate_to_int8((x[j] - lo) * id + 0.5f) & 0xFF;
    store_nibbles(q, y[b].qs);
    store_fifth_bits(q, y[b].qh);
  }
}

// ---- dispatch ------------------------------------------------------------------------------------

bool weights_writable(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_NL:
    case DType::IQ4_XS: return true;
    default: return false;
  }
}

void quantize_weights(DType t, const float* x, void* y, int64_t n) {
  if (!weights_writable(t)) fail("quantize_weights: kvshrink does not write {} weights", dtype_name(t));
  const int64_t bs = dtype_info(t).block_size;
  if (n % bs != 0) fail("quantize_weights: length {} is not a multiple of the {} block size {}", n, dtype_name(t), bs);
  switch (t) {
    case DType::F32: std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(y)[i] = fp32_to_fp16(x[i]);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(y)[i] = fp32_to_bf16(x[i]);
      return;
    case DType::Q8_0: return quantize_row_q8_0(x, static_cast<block_q8_0*>(y), n);
    case DType::Q4_0: return quantize_row_q4_0(x, static_cast<block_q4_0*>(y), n);
    case DType::Q4_1: return quantize_row_q4_1(x, static_cast<block_q4_1*>(y), n);
    case DType::Q5_0: return quantize_row_q5_0(x, static_cast<block_q5_0*>(y), n);
    case DType::Q5_1: return quantize_row_q5_1(x, static_cast<block_q5_1*>(y), n);
    case DType::Q2_K: return quantize_row_q2_K(x, static_cast<block_q2_K*>(y), n);
    case DType::Q3_K: return quantize_row_q3_K(x, static_cast<block_q3_K*>(y), n);
    case DType::Q4_K: return quantize_row_q4_K(x, static_cast<block_q4_K*>(y), n);
    case DType::Q5_K: return quantize_row_q5_K(x, static_cast<block_q5_K*>(y), n);
    case DType::Q6_K: return quantize_row_q6_K(x, static_cast<block_q6_K*>(y), n);
    case DType::IQ4_NL: return quantize_row_iq4_nl(x, static_cast<block_iq4_nl*>(y), n);
    case DType::IQ4_XS: return quantize_row_iq4_xs(x, static_cast<block_iq4_xs*>(y), n);
    default: fail("quantize_weights: {}", dtype_name(t));  // unreachable: weights_writable
  }
}

}  // namespace kvs::kernels
