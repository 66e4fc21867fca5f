// Scalar reference: dequantisation, activation preparation and quantised dot products.
//
// Dimension legend: n = row length, b = block index, j = element within a block,
// s = sub-block (32 elements for Q4_K, 16 for Q6_K and Q8_K bsums).
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/quant.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels::ref {
namespace {

void dequant_q8_0(const block_q8_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK8_0; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < QK8_0; ++j) y[b * QK8_0 + j] = d * x[b].qs[j];
  }
}

void dequant_q4_0(const block_q4_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK4_0; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < 16; ++j) {
      y[b * QK4_0 + j] = d * ((x[b].qs[j] & 0xF) - 8);
      y[b * QK4_0 + j + 16] = d * ((x[b].qs[j] >> 4) - 8);
    }
  }
}

// Unpacked quant of element j of a Q4_K block, in [0, 15].
inline int q4_K_quant(const block_q4_K& x, int j) {
  const int s = j / 32, g = s / 2;
  const uint8_t byte = x.qs[32 * g + j % 32];
  return (s % 2 == 0) ? (byte & 0xF) : (byte >> 4);
}

// Unpacked quant of element j of a Q6_K block, in [0, 63] (value = q - 32). Each 128-element
// half h uses ql[64h..64h+63] and qh[32h..32h+31]; its quarter k (32 elements) takes the low
// (k < 2) or high nibble of ql[l + 32 * (k % 2)] and bits 2k..2k+1 of qh[l].
inline int q6_K_quant(const block_q6_K& x, int j) {
  const int h = j / 128, r = j % 128, quarter = r / 32, l = r % 32;
  const uint8_t* ql = x.ql + 64 * h;
  const uint8_t* qh = x.qh + 32 * h;
  const int low4 = (quarter == 0) ? (ql[l] & 0xF)
                   : (quarter == 1) ? (ql[l + 32] & 0xF)
                   : (quarter == 2) ? (ql[l] >> 4)
                                    : (ql[l + 32] >> 4);
  const int high2 = (qh[l] >> (2 * quarter)) & 3;
  return low4 | (high2 << 4);
}

void dequant_q4_K(const block_q4_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d), dmin = fp16_to_fp32(x[b].dmin);
    for (int j = 0; j < QK_K; ++j) {
      uint8_t sc, m;
      q4_K_scale_min(j / 32, x[b].scales, &sc, &m);
      y[b * QK_K + j] = d * sc * q4_K_quant(x[b], j) - dmin * m;
    }
  }
}

void dequant_q6_K(const block_q6_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < QK_K; ++j)
      y[b * QK_K + j] = d * x[b].scales[j / 16] * (q6_K_quant(x[b], j) - 32);
  }
}

double dot_q8_0_q8_0(const block_q8_0* w, const block_q8_0* a, int64_t n) {
  double sum = 0;
  for (int64_t b = 0; b < n / QK8_0; ++b) {
    int32_t s = 0;
    for (int j = 0; j < QK8_0; ++j) s += int32_t{w[b].qs[j]} * a[b].qs[j];
    sum += double(fp16_to_fp32(w[b].d)) * fp16_to_fp32(a[b].d) * s;
  }
  return sum;
}

double dot_q4_0_q8_0(const block_q4_0* w, const block_q8_0* a, int64_t n) {
  double sum = 0;
  for (int64_t b = 0; b < n / QK4_0; ++b) {
    int32_t s = 0;
    for (int j = 0; j < 16; ++j) {
      s += ((w[b].qs[j] & 0xF) - 8) * a[b].qs[j];
      s += ((w[b].qs[j] >> 4) - 8) * a[b].qs[j + 16];
    }
    sum += double(fp16_to_fp32(w[b].d)) * fp16_to_fp32(a[b].d) * s;
  }
  return sum;
}

// sum_s d*sc[s]*da*sum_j q*a  -  dmin*m[s]*da*sum_j a   (sum_j a from the Q8_K bsums)
double dot_q4_K_q8_K(const block_q4_K* w, const block_q8_K* a, int64_t n) {
  double sum = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const double d = double(fp16_to_fp32(w[b].d)) * a[b].d;
    const double dmin = double(fp16_to_fp32(w[b].dmin)) * a[b].d;
    int32_t sum_scaled = 0, sum_mins = 0;
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      q4_K_scale_min(s, w[b].scales, &sc, &m);
      int32_t qa = 0;
      for (int j = 32 * s; j < 32 * s + 32; ++j) qa += q4_K_quant(w[b], j) * a[b].qs[j];
      sum_scaled += sc * qa;
      sum_mins += m * (a[b].bsums[2 * s] + a[b].bsums[2 * s + 1]);
    }
    sum += d * sum_scaled - dmin * sum_mins;
  }
  return sum;
}

double dot_q6_K_q8_K(const block_q6_K* w, const block_q8_K* a, int64_t n) {
  double sum = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    int32_t sum_scaled = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t qa = 0;
      for (int j = 16 * s; j < 16 * s + 16; ++j) qa += (q6_K_quant(w[b], j) - 32) * a[b].qs[j];
      sum_scaled += w[b].scales[s] * qa;
    }
    sum += double(fp16_to_fp32(w[b].d)) * a[b].d * sum_scaled;
  }
  return sum;
}

}  // namespace

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case DType::F32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(static_cast<const uint16_t*>(src)[i]);
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(static_cast<const uint16_t*>(src)[i]);
      return;
    case DType::Q8_0: return dequant_q8_0(static_cast<const block_q8_0*>(src), dst, n);
    case DType::Q4_0: return dequant_q4_0(static_cast<const block_q4_0*>(src), dst, n);
    case DType::Q4_K: return dequant_q4_K(static_cast<const block_q4_K*>(src), dst, n);
    case DType::Q6_K: return dequant_q6_K(static_cast<const block_q6_K*>(src), dst, n);
    default: fail("ref::dequantize_row: unsupported type {}", dtype_name(t));
  }
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  // The weight quantisers are scalar already and define the formats (quant.h).
  quantize_weights(t, src, dst, n);
}

size_t act_row_bytes(DType wtype, int64_t n) {
  switch (wtype) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return static_cast<size_t>(n) * sizeof(float);
    case DType::Q8_0:
    case DType::Q4_0: return act_q8_0_bytes(n);
    case DType::Q4_K:
    case DType::Q6_K: return dtype_row_bytes(DType::Q8_K, n);
    default: fail("act_row_bytes: unsupported weight type {}", dtype_name(wtype));
  }
}

void prepare_act(DType wtype, const float* x, void* act, int64_t n) {
  switch (wtype) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      std::memcpy(act, x, n * sizeof(float));
      return;
    case DType::Q8_0:
    case DType::Q4_0: return prepare_act_q8_0(x, act, n);
    case DType::Q4_K:
    case DType::Q6_K: return quantize_act_q8_K(x, static_cast<block_q8_K*>(act), n);
    default: fail("prepare_act: unsupported weight type {}", dtype_name(wtype));
  }
}

float vec_dot(DType wtype, const void* w, const void* act, int64_t n) {
  const float* x = static_cast<const float*>(act);
  switch (wtype) {
    case DType::F32: return dot_f32(static_cast<const float*>(w), x, n);
    case DType::F16: return dot_f32_f16(x, static_cast<const uint16_t*>(w), n);
    case DType::BF16: {
      double s = 0;
      for (int64_t i = 0; i < n; ++i) s += double(bf16_to_fp32(static_cast<const uint16_t*>(w)[i])) * x[i];
      return static_cast<float>(s);
    }
    case DType::Q8_0:
      return float(dot_q8_0_q8_0(static_cast<const block_q8_0*>(w), static_cast<const block_q8_0*>(act), n));
    case DType::Q4_0:
      return float(dot_q4_0_q8_0(static_cast<const block_q4_0*>(w), static_cast<const block_q8_0*>(act), n));
    case DType::Q4_K:
      return float(dot_q4_K_q8_K(static_cast<const block_q4_K*>(w), static_cast<const block_q8_K*>(act), n));
    case DType::Q6_K:
      return float(dot_q6_K_q8_K(static_cast<const block_q6_K*>(w), static_cast<const block_q8_K*>(act), n));
    default: fail("vec_dot: unsupported weight type {}", dtype_name(wtype));
  }
}

}  // namespace kvs::kernels::ref
