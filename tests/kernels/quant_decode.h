// A test-side decoder for every block type kvshrink writes, written from the value formulas in
// kernels/quant_blocks.h (ggml-common.h's layouts) one element at a time, independently of the
// library's dequantisers: the oracle for the quantiser tests, and a second reading of the layouts
// to check kernels::ref::dequantize_row against where it supports a type.
#pragma once
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fp16.h"
#include "kernels/quant_blocks.h"

namespace kvs::kernels::test {

inline float h2f(uint16_t h) { return fp16_to_fp32(h); }

// Nibble of element j (0..31) of a 32-element block: j < 16 low nibble of qs[j], else high of qs[j-16].
inline int nib32(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4); }

inline int fifth_bit(const uint8_t qh[4], int j) { return (qh[j / 8] >> (j % 8)) & 1; }

// Quant of element j of a Q4_K/Q5_K qs array (4 low bits).
inline int k_nibble(const uint8_t* qs, int j) {
  const int s = j / 32;
  const uint8_t byte = qs[32 * (s / 2) + j % 32];
  return s % 2 == 0 ? (byte & 0xF) : (byte >> 4);
}

// Decodes element j of block `blk` (of type t).
inline float decode_element(DType t, const void* blk, int j) {
  switch (t) {
    case DType::Q8_0: {
      const auto& b = *static_cast<const block_q8_0*>(blk);
      return h2f(b.d) * b.qs[j];
    }
    case DType::Q4_0: {
      const auto& b = *static_cast<const block_q4_0*>(blk);
      return h2f(b.d) * (nib32(b.qs, j) - 8);
    }
    case DType::Q4_1: {
      const auto& b = *static_cast<const block_q4_1*>(blk);
      return h2f(b.d) * nib32(b.qs, j) + h2f(b.m);
    }
    case DType::Q5_0: {
      const auto& b = *static_cast<const block_q5_0*>(blk);
      return h2f(b.d) * ((nib32(b.qs, j) | (fifth_bit(b.qh, j) << 4)) - 16);
    }
    case DType::Q5_1: {
      const auto& b = *static_cast<const block_q5_1*>(blk);
      return h2f(b.d) * (nib32(b.qs, j) | (fifth_bit(b.qh, j) << 4)) + h2f(b.m);
    }
    case DType::IQ4_NL: {
      const auto& b = *static_cast<const block_iq4_nl*>(blk);
      return h2f(b.d) * kIQ4NLValues[nib32(b.qs, j)];
    }
    case DType::Q2_K: {
      const auto& b = *static_cast<const block_q2_K*>(blk);
      const int s = j / 16;
      return h2f(b.d) * (b.scales[s] & 0xF) * q2_K_quant(b.qs, j) - h2f(b.dmin) * (b.scales[s] >> 4);
    }
    case DType::Q3_K: {
      const auto& b = *static_cast<const block_q3_K*>(blk);
      const int hbit = (b.hmask[j % 32] >> (j / 32)) & 1;
      return h2f(b.d) * (q3_K_scale(j / 16, b.scales) - 32) * (q2_K_quant(b.qs, j) - (hbit ? 0 : 4));
    }
    case DType::Q4_K: {
      const auto& b = *static_cast<const block_q4_K*>(blk);
      uint8_t sc, m;
      q4_K_scale_min(j / 32, b.scales, &sc, &m);
      return h2f(b.d) * sc * k_nibble(b.qs, j) - h2f(b.dmin) * m;
    }
    case DType::Q5_K: {
      const auto& b = *static_cast<const block_q5_K*>(blk);
      uint8_t sc, m;
      q4_K_scale_min(j / 32, b.scales, &sc, &m);
      const int q = k_nibble(b.qs, j) | (((b.qh[j % 32] >> (j / 32)) & 1) << 4);
      return h2f(b.d) * sc * q - h2f(b.dmin) * m;
    }
    case DType::Q6_K: {
      const auto& b = *static_cast<const block_q6_K*>(blk);
      const int h = j / 128, r = j % 128, quarter = r / 32, l = r % 32;
      const uint8_t lo = b.ql[64 * h + l + 32 * (quarter % 2)];
      const int low4 = quarter < 2 ? (lo & 0xF) : (lo >> 4);
      const int high2 = (b.qh[32 * h + l] >> (2 * quarter)) & 3;
      return h2f(b.d) * b.scales[j / 16] * ((low4 | (high2 << 4)) - 32);
    }
    case DType::IQ4_XS: {
      const auto& b = *static_cast<const block_iq4_xs*>(blk);
      const int s = j / 32, i = j % 32;
      const uint8_t byte = b.qs[16 * s + i % 16];
      const int idx = i < 16 ? (byte & 0xF) : (byte >> 4);
      return h2f(b.d) * (iq4_xs_scale(s, b) - 32) * kIQ4NLValues[idx];
    }
    default: fail("decode_element: no decoder for {}", dtype_name(t));
  }
}

// Decodes a row of n elements of type t.
inline void decode_row(DType t, const void* row, float* y, int64_t n) {
  const auto& info = dtype_info(t);
  const auto* p = static_cast<const uint8_t*>(row);
  for (int64_t i = 0; i < n; ++i)
    y[i] = decode_element(t, p + (i / info.block_size) * info.type_size, static_cast<int>(i % info.block_size));
}

}  // namespace kvs::kernels::test
