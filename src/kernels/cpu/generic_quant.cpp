// Portable (non-SIMD-intrinsic) kernels for the weight formats: activation quantisation,
// row dequantisation, weight-row dot products and dot tiles. Integer sums per block, float
// accumulation across blocks; written so the compiler can vectorise the inner loops.
//
// Dimension legend: n = row length, nb = blocks per row, j = element in a block,
// s = sub-block (32 elements for Q4_K, 16 for Q6_K).
#include <cstring>

#include "core/fp16.h"
#include "kernels/cpu/generic_fp16.h"
#include "kernels/cpu/impl.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/quant.h"

namespace kvs::kernels::generic {

void quant_act_q8_0(const float* x, void* y, int64_t n) { prepare_act_q8_0(x, y, n); }
void quant_kv_q8_0(const float* x, void* y, int64_t n) { quantize_row_q8_0(x, static_cast<block_q8_0*>(y), n); }
void quant_kv_q4_0(const float* x, void* y, int64_t n) { quantize_row_q4_0(x, static_cast<block_q4_0*>(y), n); }
void quant_act_q8_K(const float* x, void* y, int64_t n) {
  quantize_act_q8_K(x, static_cast<block_q8_K*>(y), n);
}

void dequant_f16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = h2f_vec(s[i]);
}

void dequant_bf16(const void* src, float* dst, int64_t n) {
  const auto* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(s[i]);
}

void dequant_q8_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q8_0*>(src);
  for (int64_t b = 0; b < n / QK8_0; ++b, dst += QK8_0) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < QK8_0; ++j) dst[j] = d * x[b].qs[j];
  }
}

void dequant_q4_0(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q4_0*>(src);
  for (int64_t b = 0; b < n / QK4_0; ++b, dst += QK4_0) {
    const float d = fp16_to_fp32(x[b].d);
    for (int j = 0; j < 16; ++j) {
      dst[j] = d * ((x[b].qs[j] & 0xF) - 8);
      dst[j + 16] = d * ((x[b].qs[j] >> 4) - 8);
    }
  }
}

void dequant_q4_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q4_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d), dmin = fp16_to_fp32(x[b].dmin);
    const uint8_t* q = x[b].qs;
    for (int g = 0; g < 4; ++g, q += 32, dst += 64) {  // 64-element groups
      uint8_t sc0, m0, sc1, m1;
      q4_K_scale_min(2 * g, x[b].scales, &sc0, &m0);
      q4_K_scale_min(2 * g + 1, x[b].scales, &sc1, &m1);
      const float d0 = d * sc0, dm0 = dmin * m0, d1 = d * sc1, dm1 = dmin * m1;
      for (int l = 0; l < 32; ++l) dst[l] = d0 * (q[l] & 0xF) - dm0;
      for (int l = 0; l < 32; ++l) dst[l + 32] = d1 * (q[l] >> 4) - dm1;
    }
  }
}

void dequant_q6_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q6_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const float d = fp16_to_fp32(x[b].d);
    const uint8_t* ql = x[b].ql;
    const uint8_t* qh = x[b].qh;
    const int8_t* sc = x[b].scales;
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, sc += 8, dst += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        dst[l] = d * sc[is] * (((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32);
        dst[l + 32] = d * sc[is + 2] * (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
        dst[l + 64] = d * sc[is + 4] * (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
        dst[l + 96] = d * sc[is + 6] * (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
      }
    }
  }
}

float dot_f32(const void* w, const void* act, int64_t n) {
  const auto* a = static_cast<const float*>(w);
  const auto* b = static_cast<const float*>(act);
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

float dot_f16(const void* w, const void* act, int64_t n) {
  return dot_f32_f16(static_cast<const float*>(act), static_cast<const uint16_t*>(w), n);
}

float dot_bf16(const void* w, const void* act, int64_t n) {
  const auto* a = static_cast<const uint16_t*>(w);
  const auto* b = static_cast<const float*>(act);
  constexpr int64_t kChunk = 256;  // widen into a buffer so both loops vectorise
  float buf[kChunk];
  float acc[8] = {};
  int64_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    for (int64_t j = 0; j < kChunk; ++j) buf[j] = bf16_to_fp32(a[i + j]);
    for (int64_t j = 0; j < kChunk; j += 8)
      for (int k = 0; k < 8; ++k) acc[k] += buf[j + k] * b[i + j + k];
  }
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += bf16_to_fp32(a[i]) * b[i];
  return s;
}

float dot_q8_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const block_q8_0*>(w);
  const auto* y = static_cast<const block_q8_0*>(act);
  const float* dy = act_q8_0_scales(act, n);
  float s = 0;
  for (int64_t b = 0; b < n / QK8_0; ++b) {
    int32_t is = 0;
    for (int j = 0; j < QK8_0; ++j) is += x[b].qs[j] * y[b].qs[j];
    s += h2f_vec(x[b].d) * dy[b] * static_cast<float>(is);
  }
  return s;
}

float dot_q4_0(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const block_q4_0*>(w);
  const auto* y = static_cast<const block_q8_0*>(act);
  const float* dy = act_q8_0_scales(act, n);
  float s = 0;
  for (int64_t b = 0; b < n / QK4_0; ++b) {
    int32_t is = 0;
    for (int j = 0; j < 16; ++j)
      is += ((x[b].qs[j] & 0xF) - 8) * y[b].qs[j] + ((x[b].qs[j] >> 4) - 8) * y[b].qs[j + 16];
    s += h2f_vec(x[b].d) * dy[b] * static_cast<float>(is);
  }
  return s;
}

float dot_q4_K(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const block_q4_K*>(w);
  const auto* y = static_cast<const block_q8_K*>(act);
  float s = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const uint8_t* q = x[b].qs;
    const int8_t* a = y[b].qs;
    int32_t sum_scaled = 0, sum_mins = 0;
    for (int g = 0; g < 4; ++g, q += 32, a += 64) {
      uint8_t sc0, m0, sc1, m1;
      q4_K_scale_min(2 * g, x[b].scales, &sc0, &m0);
      q4_K_scale_min(2 * g + 1, x[b].scales, &sc1, &m1);
      int32_t lo = 0, hi = 0;
      for (int l = 0; l < 32; ++l) {
        lo += (q[l] & 0xF) * a[l];
        hi += (q[l] >> 4) * a[l + 32];
      }
      sum_scaled += sc0 * lo + sc1 * hi;
      sum_mins += m0 * (y[b].bsums[4 * g] + y[b].bsums[4 * g + 1]) +
                  m1 * (y[b].bsums[4 * g + 2] + y[b].bsums[4 * g + 3]);
    }
    s += y[b].d * (fp16_to_fp32(x[b].d) * static_cast<float>(sum_scaled) -
                   fp16_to_fp32(x[b].dmin) * static_cast<float>(sum_mins));
  }
  return s;
}

float dot_q6_K(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const block_q6_K*>(w);
  const auto* y = static_cast<const block_q8_K*>(act);
  float s = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    const uint8_t* ql = x[b].ql;
    const uint8_t* qh = x[b].qh;
    const int8_t* a = y[b].qs;
    int32_t sums[16] = {};  // [sub-block] integer dot of (q - 32) with the activation
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, a += 128) {
      for (int is = 0; is < 2; ++is) {  // 16-element halves of each 32-element quarter
        int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int l = 16 * is; l < 16 * is + 16; ++l) {
          s0 += (((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32) * a[l];
          s1 += (((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32) * a[l + 32];
          s2 += (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32) * a[l + 64];
          s3 += (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32) * a[l + 96];
        }
        int32_t* sh = sums + 8 * h + is;
        sh[0] += s0;
        sh[2] += s1;
        sh[4] += s2;
        sh[6] += s3;
      }
    }
    int32_t total = 0;
    for (int k = 0; k < 16; ++k) total += x[b].scales[k] * sums[k];
    s += fp16_to_fp32(x[b].d) * y[b].d * static_cast<float>(total);
  }
  return s;
}

void tile_f32(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
              float* out, int64_t ldo) {
  dot_tile_by_rows<dot_f32>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_f16(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
              float* out, int64_t ldo) {
  dot_tile_by_rows<dot_f16>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_bf16(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  dot_tile_by_rows<dot_bf16>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q8_0(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  dot_tile_by_rows<dot_q8_0>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q4_0(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  dot_tile_by_rows<dot_q4_0>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q4_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  dot_tile_by_rows<dot_q4_K>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q6_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  dot_tile_by_rows<dot_q6_K>(w, ws, nr, a, as, nt, n, out, ldo);
}

}  // namespace kvs::kernels::generic
