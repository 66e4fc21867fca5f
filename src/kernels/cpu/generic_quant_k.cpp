// Portable kernels for the 256-element formats beyond Q4_K/Q6_K: Q2_K, Q3_K, Q5_K and IQ4_XS
// (layouts in quant_blocks.h), all against Q8_K activations as in ggml. Row dequantisation (the
// reference's float operations, so bit-exact) and weight-row dots with integer sums per
// sub-block, float accumulation across super-blocks.
//
// Dimension legend: n = row length, b = super-block, h = 128-element half, k = 32-element quarter
// of a half, s = sub-block (16 elements for Q2_K/Q3_K, 32 for Q5_K/IQ4_XS), l = byte.
#include <cstring>

#include "core/fp16.h"
#include "kernels/cpu/impl.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/quant.h"

namespace kvs::kernels::generic {
namespace {

// The 256 2-bit quants of a Q2_K / Q3_K block in element order: half h, quarter k, byte l ->
// element 128h + 32k + l, bits 2k..2k+1 of qs[32h + l].
inline void unpack_k2(const uint8_t* qs, uint8_t q[256]) {
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) q[128 * h + 32 * k + l] = (qs[32 * h + l] >> (2 * k)) & 3;
}

// Q3_K quants + 4, in [0, 7]: the 2 low bits plus 4 where the hmask bit (bit j / 32 of
// hmask[j % 32]) is set.
inline void unpack_q3_K(const block_q3_K& x, uint8_t q[256]) {
  unpack_k2(x.qs, q);
  for (int j = 0; j < 256; ++j) q[j] = static_cast<uint8_t>(q[j] + 4 * ((x.hmask[j % 32] >> (j / 32)) & 1));
}

// Q5_K quants in [0, 31].
inline void unpack_q5_K(const block_q5_K& x, uint8_t q[256]) {
  for (int g = 0; g < 4; ++g)
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = x.qs[32 * g + l];
      q[64 * g + l] = static_cast<uint8_t>((byte & 0xF) | (((x.qh[l] >> (2 * g)) & 1) << 4));
      q[64 * g + 32 + l] = static_cast<uint8_t>((byte >> 4) | (((x.qh[l] >> (2 * g + 1)) & 1) << 4));
    }
}

// IQ4_XS levels in element order.
inline void unpack_iq4_xs(const block_iq4_xs& x, int8_t v[256]) {
  for (int s = 0; s < 8; ++s)
    for (int l = 0; l < 16; ++l) {
      v[32 * s + l] = kIQ4NLValues[x.qs[16 * s + l] & 0xF];
      v[32 * s + l + 16] = kIQ4NLValues[x.qs[16 * s + l] >> 4];
    }
}

template <class T>
inline int32_t idot(const T* q, const int8_t* a, int len) {
  int32_t s = 0;
  for (int j = 0; j < len; ++j) s += q[j] * a[j];
  return s;
}

}  // namespace

void dequant_q2_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q2_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b, dst += QK_K) {
    const float d = fp16_to_fp32(x[b].d), dmin = fp16_to_fp32(x[b].dmin);
    uint8_t q[256];
    unpack_k2(x[b].qs, q);
    for (int s = 0; s < 16; ++s) {
      const float dl = d * (x[b].scales[s] & 0xF), ml = dmin * (x[b].scales[s] >> 4);
      for (int j = 16 * s; j < 16 * s + 16; ++j) dst[j] = dl * q[j] - ml;
    }
  }
}

void dequant_q3_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q3_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b, dst += QK_K) {
    const float d = fp16_to_fp32(x[b].d);
    uint8_t q[256];
    unpack_q3_K(x[b], q);
    for (int s = 0; s < 16; ++s) {
      const float dl = d * (q3_K_scale(s, x[b].scales) - 32);
      for (int j = 16 * s; j < 16 * s + 16; ++j) dst[j] = dl * (q[j] - 4);
    }
  }
}

void dequant_q5_K(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_q5_K*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b, dst += QK_K) {
    const float d = fp16_to_fp32(x[b].d), dmin = fp16_to_fp32(x[b].dmin);
    uint8_t q[256];
    unpack_q5_K(x[b], q);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      q4_K_scale_min(s, x[b].scales, &sc, &m);
      const float ds = d * sc, dm = dmin * m;
      for (int j = 32 * s; j < 32 * s + 32; ++j) dst[j] = ds * q[j] - dm;
    }
  }
}

void dequant_iq4_xs(const void* src, float* dst, int64_t n) {
  const auto* x = static_cast<const block_iq4_xs*>(src);
  for (int64_t b = 0; b < n / QK_K; ++b, dst += QK_K) {
    const float d = fp16_to_fp32(x[b].d);
    int8_t v[256];
    unpack_iq4_xs(x[b], v);
    for (int s = 0; s < 8; ++s) {
      const float dl = d * (iq4_xs_scale(s, x[b]) - 32);
      for (int j = 32 * s; j < 32 * s + 32; ++j) dst[j] = dl * v[j];
    }
  }
}

float dot_q2_K(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const block_q2_K*>(w);
  const auto* y = static_cast<const block_q8_K*>(act);
  float s = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    uint8_t q[256];
    unpack_k2(x[b].qs, q);
    int32_t sum_scaled = 0, sum_mins = 0;
    for (int k = 0; k < 16; ++k) {
      sum_scaled += (x[b].scales[k] & 0xF) * idot(q + 16 * k, y[b].qs + 16 * k, 16);
      sum_mins += (x[b].scales[k] >> 4) * y[b].bsums[k];
    }
    s += y[b].d * (fp16_to_fp32(x[b].d) * static_cast<float>(sum_scaled) -
                   fp16_to_fp32(x[b].dmin) * static_cast<float>(sum_mins));
  }
  return s;
}

float dot_q3_K(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const block_q3_K*>(w);
  const auto* y = static_cast<const block_q8_K*>(act);
  float s = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    uint8_t q[256];  // quant + 4
    unpack_q3_K(x[b], q);
    int32_t total = 0;
    for (int k = 0; k < 16; ++k)
      total += (q3_K_scale(k, x[b].scales) - 32) * (idot(q + 16 * k, y[b].qs + 16 * k, 16) - 4 * y[b].bsums[k]);
    s += fp16_to_fp32(x[b].d) * y[b].d * static_cast<float>(total);
  }
  return s;
}

float dot_q5_K(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const block_q5_K*>(w);
  const auto* y = static_cast<const block_q8_K*>(act);
  float s = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    uint8_t q[256];
    unpack_q5_K(x[b], q);
    int32_t sum_scaled = 0, sum_mins = 0;
    for (int k = 0; k < 8; ++k) {
      uint8_t sc, m;
      q4_K_scale_min(k, x[b].scales, &sc, &m);
      sum_scaled += sc * idot(q + 32 * k, y[b].qs + 32 * k, 32);
      sum_mins += m * (y[b].bsums[2 * k] + y[b].bsums[2 * k + 1]);
    }
    s += y[b].d * (fp16_to_fp32(x[b].d) * static_cast<float>(sum_scaled) -
                   fp16_to_fp32(x[b].dmin) * static_cast<float>(sum_mins));
  }
  return s;
}

float dot_iq4_xs(const void* w, const void* act, int64_t n) {
  const auto* x = static_cast<const block_iq4_xs*>(w);
  const auto* y = static_cast<const block_q8_K*>(act);
  float s = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    int8_t v[256];
    unpack_iq4_xs(x[b], v);
    int32_t total = 0;
    for (int k = 0; k < 8; ++k) total += (iq4_xs_scale(k, x[b]) - 32) * idot(v + 32 * k, y[b].qs + 32 * k, 32);
    s += fp16_to_fp32(x[b].d) * y[b].d * static_cast<float>(total);
  }
  return s;
}

void tile_q2_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  dot_tile_by_rows<dot_q2_K>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q3_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  dot_tile_by_rows<dot_q3_K>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_q5_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
               float* out, int64_t ldo) {
  dot_tile_by_rows<dot_q5_K>(w, ws, nr, a, as, nt, n, out, ldo);
}
void tile_iq4_xs(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
                 float* out, int64_t ldo) {
  dot_tile_by_rows<dot_iq4_xs>(w, ws, nr, a, as, nt, n, out, ldo);
}

}  // namespace kvs::kernels::generic
