// Scalar reference: dequantisation, activation preparation and quantised dot products.
//
// Written from the layouts in quant_blocks.h (one accessor per format giving element j's integer quant,
// then the value formula), independently of the fast kernels. The float operations of each
// dequantiser are the ones the fast dequantisers must reproduce bit for bit (d * sc is rounded
// before multiplying by q, as in ggml).
//
// Dimension legend: n = row length, b = block index, j = element within a block,
// s = sub-block (32 elements for Q4_K/Q5_K/IQ4_XS, 16 for Q2_K/Q3_K/Q6_K and Q8_K bsums).
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/quant.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels::ref {
namespace {

// ---- element accessors -----------------------------------------------------------------------

// 32-element nibble order (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, IQ4_XS sub-blocks): element j < 16 is
// the low nibble of qs[j], element j >= 16 the high nibble of qs[j - 16].
inline int nib32(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4); }

// Q5_0 / Q5_1 quant of element j in [0, 31]: nibble | bit j of qh (little-endian uint32) << 4.
inline int q5_quant(const uint8_t* qs, const uint8_t* qh, int j) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return nib32(qs, j) | static_cast<int>(((h >> j) & 1) << 4);
}

// Q3_K quant of element j in [-4, 3]: the 2 low bits, minus 4 when the hmask bit is clear.
inline int q3_K_quant(const block_q3_K& x, int j) {
  const int hbit = (x.hmask[j % 32] >> (j / 32)) & 1;
  return q2_K_quant(x.qs, j) - (hbit ? 0 : 4);
}

// Q5_K quant of element j in [0, 31]: 4 low bits as Q4_K, bit 4 = bit s of qh[j % 32].
inline int q5_K_quant(const block_q5_K& x, int j) {
  const int s = j / 32, g = s / 2;
  const uint8_t byte = x.qs[32 * g + j % 32];
  const int low4 = (s % 2 == 0) ? (byte & 0xF) : (byte >> 4);
  return low4 | (((x.qh[j % 32] >> s) & 1) << 4);
}

// IQ4_XS grid index of element j: sub-block j / 32 owns qs[16 s .. 16 s + 15], nibble order nib32.
inline int iq4_xs_index(const block_iq4_xs& x, int j) { return nib32(x.qs + 16 * (j / 32), j % 32); }

// ---- dequantisers -----------------------------------------------------------------------------

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

void dequant_q4_1(const block_q4_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK4_1; ++b) {
    const float d = fp16_to_fp32(x[b].d), m = fp16_to_fp32(x[b].m);
    for (int j = 0; j < QK4_1; ++j) y[b * QK4_1 + j] = d * nib32(x[b].qs, j) + m;
  }
}

void dequant_q5_0(const block_q5_0* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK5_0; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < QK5_0; ++j) y[b * QK5_0 + j] = d * (q5_quant(x[b].qs, x[b].qh, j) - 16);
  }
}

void dequant_q5_1(const block_q5_1* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK5_1; ++b) {
    const float d = fp16_to_fp32(x[b].d), m = fp16_to_fp32(x[b].m);
    for (int j = 0; j < QK5_1; ++j) y[b * QK5_1 + j] = d * q5_quant(x[b].qs, x[b].qh, j) + m;
  }
}

void dequant_iq4_nl(const block_iq4_nl* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK4_NL; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < QK4_NL; ++j) y[b * QK4_NL + j] = d * kIQ4NLValues[nib32(x[b].qs, j)];
  }
}

void dequant_q2_K(const block_q2_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d), dmin = fp16_to_fp32(x[b].dmin);
    for (int j = 0; j < QK_K; ++j) {
      const int sc = x[b].scales[j / 16];
      y[b * QK_K + j] = d * (sc & 0xF) * q2_K_quant(x[b].qs, j) - dmin * (sc >> 4);
    }
  }
}

void dequant_q3_K(const block_q3_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < QK_K; ++j)
      y[b * QK_K + j] = d * (q3_K_scale(j / 16, x[b].scales) - 32) * q3_K_quant(x[b], j);
  }
}

void dequant_q5_K(const block_q5_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d), dmin = fp16_to_fp32(x[b].dmin);
    for (int j = 0; j < QK_K; ++j) {
      uint8_t sc, m;
      q4_K_scale_min(j / 32, x[b].scales, &sc, &m);
      y[b * QK_K + j] = d * sc * q5_K_quant(x[b], j) - dmin * m;
    }
  }
}

void dequant_iq4_xs(const block_iq4_xs* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < QK_K; ++j)
      y[b * QK_K + j] = d * (iq4_xs_scale(j / 32, x[b]) - 32) * kIQ4NLValues[iq4_xs_index(x[b], j)];
  }
}

// ---- dot products (integer sums per block or sub-block, scaled and accumulated in double) -----

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

// Q4_1 / Q5_1 x Q8_1: sum_b d_w d_a sum_j q a  +  m_w d_a sum_j a (the activation's block sum is
// recomputed here from its quants, not read from the prepared sums).
template <class Block, class Quant>
double dot_offset_q8_1(const Block* w, const block_q8_0* a, int64_t n, Quant quant) {
  double sum = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    int32_t qa = 0, sa = 0;
    for (int j = 0; j < 32; ++j) {
      qa += quant(w[b], j) * a[b].qs[j];
      sa += a[b].qs[j];
    }
    const double da = fp16_to_fp32(a[b].d);
    sum += double(fp16_to_fp32(w[b].d)) * da * qa + double(fp16_to_fp32(w[b].m)) * da * sa;
  }
  return sum;
}

// Q5_0 / IQ4_NL x Q8_0: sum_b d_w d_a sum_j v(j) a_j with v the signed integer level.
template <class Block, class Level>
double dot_scaled_q8_0(const Block* w, const block_q8_0* a, int64_t n, Level level) {
  double sum = 0;
  for (int64_t b = 0; b < n / 32; ++b) {
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += level(w[b], j) * a[b].qs[j];
    sum += double(fp16_to_fp32(w[b].d)) * fp16_to_fp32(a[b].d) * s;
  }
  return sum;
}

// sum_s d*sc[s]*da*sum_j q*a - dmin*m[s]*da*sum_j a over 16-element sub-blocks (bsums).
double dot_q2_K_q8_K(const block_q2_K* w, const block_q8_K* a, int64_t n) {
  double sum = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    int32_t sum_scaled = 0, sum_mins = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t qa = 0;
      for (int j = 16 * s; j < 16 * s + 16; ++j) qa += q2_K_quant(w[b].qs, j) * a[b].qs[j];
      sum_scaled += (w[b].scales[s] & 0xF) * qa;
      sum_mins += (w[b].scales[s] >> 4) * a[b].bsums[s];
    }
    sum += double(a[b].d) * (double(fp16_to_fp32(w[b].d)) * sum_scaled - double(fp16_to_fp32(w[b].dmin)) * sum_mins);
  }
  return sum;
}

double dot_q3_K_q8_K(const block_q3_K* w, const block_q8_K* a, int64_t n) {
  double sum = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    int32_t total = 0;
    for (int s = 0; s < 16; ++s) {
      int32_t qa = 0;
      for (int j = 16 * s; j < 16 * s + 16; ++j) qa += q3_K_quant(w[b], j) * a[b].qs[j];
      total += (q3_K_scale(s, w[b].scales) - 32) * qa;
    }
    sum += double(fp16_to_fp32(w[b].d)) * a[b].d * total;
  }
  return sum;
}

double dot_q5_K_q8_K(const block_q5_K* w, const block_q8_K* a, int64_t n) {
  double sum = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    int32_t sum_scaled = 0, sum_mins = 0;
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      q4_K_scale_min(s, w[b].scales, &sc, &m);
      int32_t qa = 0;
      for (int j = 32 * s; j < 32 * s + 32; ++j) qa += q5_K_quant(w[b], j) * a[b].qs[j];
      sum_scaled += sc * qa;
      sum_mins += m * (a[b].bsums[2 * s] + a[b].bsums[2 * s + 1]);
    }
    sum += double(a[b].d) * (double(fp16_to_fp32(w[b].d)) * sum_scaled - double(fp16_to_fp32(w[b].dmin)) * sum_mins);
  }
  return sum;
}

double dot_iq4_xs_q8_K(const block_iq4_xs* w, const block_q8_K* a, int64_t n) {
  double sum = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    int32_t total = 0;
    for (int s = 0; s < 8; ++s) {
      int32_t qa = 0;
      for (int j = 32 * s; j < 32 * s + 32; ++j) qa += kIQ4NLValues[iq4_xs_index(w[b], j)] * a[b].qs[j];
      total += (iq4_xs_scale(s, w[b]) - 32) * qa;
    }
    sum += double(fp16_to_fp32(w[b].d)) * a[b].d * total;
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
    case DType::Q4_1: return dequant_q4_1(static_cast<const block_q4_1*>(src), dst, n);
    case DType::Q5_0: return dequant_q5_0(static_cast<const block_q5_0*>(src), dst, n);
    case DType::Q5_1: return dequant_q5_1(static_cast<const block_q5_1*>(src), dst, n);
    case DType::IQ4_NL: return dequant_iq4_nl(static_cast<const block_iq4_nl*>(src), dst, n);
    case DType::Q2_K: return dequant_q2_K(static_cast<const block_q2_K*>(src), dst, n);
    case DType::Q3_K: return dequant_q3_K(static_cast<const block_q3_K*>(src), dst, n);
    case DType::Q5_K: return dequant_q5_K(static_cast<const block_q5_K*>(src), dst, n);
    case DType::IQ4_XS: return dequant_iq4_xs(static_cast<const block_iq4_xs*>(src), dst, n);
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
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::IQ4_NL: return act_q8_0_bytes(n);
    case DType::Q4_1:
    case DType::Q5_1: return act_q8_1_bytes(n);
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS: return dtype_row_bytes(DType::Q8_K, n);
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
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::IQ4_NL: return prepare_act_q8_0(x, act, n);
    case DType::Q4_1:
    case DType::Q5_1: return prepare_act_q8_1(x, act, n);
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS: return quantize_act_q8_K(x, static_cast<block_q8_K*>(act), n);
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
    case DType::Q4_1:
      return float(dot_offset_q8_1(static_cast<const block_q4_1*>(w), static_cast<const block_q8_0*>(act), n,
                                   [](const block_q4_1& x, int j) { return nib32(x.qs, j); }));
    case DType::Q5_1:
      return float(dot_offset_q8_1(static_cast<const block_q5_1*>(w), static_cast<const block_q8_0*>(act), n,
                                   [](const block_q5_1& x, int j) { return q5_quant(x.qs, x.qh, j); }));
    case DType::Q5_0:
      return float(dot_scaled_q8_0(static_cast<const block_q5_0*>(w), static_cast<const block_q8_0*>(act), n,
                                   [](const block_q5_0& x, int j) { return q5_quant(x.qs, x.qh, j) - 16; }));
    case DType::IQ4_NL:
      return float(dot_scaled_q8_0(static_cast<const block_iq4_nl*>(w), static_cast<const block_q8_0*>(act), n,
                                   [](const block_iq4_nl& x, int j) { return int{kIQ4NLValues[nib32(x.qs, j)]}; }));
    case DType::Q2_K:
      return float(dot_q2_K_q8_K(static_cast<const block_q2_K*>(w), static_cast<const block_q8_K*>(act), n));
    case DType::Q3_K:
      return float(dot_q3_K_q8_K(static_cast<const block_q3_K*>(w), static_cast<const block_q8_K*>(act), n));
    case DType::Q5_K:
      return float(dot_q5_K_q8_K(static_cast<const block_q5_K*>(w), static_cast<const block_q8_K*>(act), n));
    case DType::IQ4_XS:
      return float(dot_iq4_xs_q8_K(static_cast<const block_iq4_xs*>(w), static_cast<const block_q8_K*>(act), n));
    default: fail("vec_dot: unsupported weight type {}", dtype_name(wtype));
  }
}

}  // namespace kvs::kernels::ref
