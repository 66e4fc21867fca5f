// The scalar quantisers that define how kvshrink writes the GGUF block formats (the formats
// themselves: quant_blocks.h).
//
// Dimension legend: n = elements in a row (a multiple of the block size), nb = n / block size.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/quant_blocks.h"

namespace kvs::kernels {

// ---- scalar quantisers (the definition of what kvshrink writes) -------------------------------
// Weights (offline; used by quantize_row and the GGUF writer). n is a multiple of the block size.
//
// Q8_0: d = amax / 127, q = round_half_even(x * (1/d)), stored d = fp16(d) (ggml rounds ties
//   away from zero -- same format, differs only on exact .5 products). Also the block part of
//   prepared Q8_0 activations, so the AVX2 version must reproduce it bit for bit.
// Q4_0: ggml's reference algorithm (signed-max scale d = max / -8, q = min(15, (int)(x/d + 8.5))).
// Q4_K: per 32-element sub-block, an RMSE search over a few candidate (scale, min) pairs derived
//   from the sub-block's min/max (the min is clamped to <= 0 as ggml does); the 8 scales and
//   8 mins are then quantised to 6 bits against super-block d = max_scale/63, dmin = max_min/63
//   and the values re-quantised with the final 6-bit scales. Simpler than ggml's make_qkx2_quants
//   (no weighted iterative refinement): somewhat higher error, identical format.
// Q6_K: per 16-element sub-block, an RMSE search over candidate scales around maxabs/32 (signed
//   so that the extreme value maps to -32, as ggml); the 16 scales are quantised to int8 against
//   d = max|scale|/127 and the values re-quantised with the final scales.
void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n);
void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n);
void quantize_row_q4_K(const float* x, block_q4_K* y, int64_t n);
void quantize_row_q6_K(const float* x, block_q6_K* y, int64_t n);

// Activations (hot path; the AVX2 versions must reproduce these bit for bit):
//   Q8_0 (prepared activation for Q8_0/Q4_0 weights): nb Q8_0 blocks (quantize_row_q8_0), then
//         at act_q8_0_scales_offset(n) the nb block scales as floats (= fp16_to_fp32(d)), so the
//         dot kernels need no fp16 conversion per weight row. act_q8_0_bytes(n) bytes in all.
//   Q8_K: iscale = 127 / amax, q = round_half_even(x * iscale) clamped to [-127, 127],
//         d = 1 / iscale (float); bsums from the stored q.
//   All-zero input gives d = 0 and q = 0.
void prepare_act_q8_0(const float* x, void* act, int64_t n);
void quantize_act_q8_K(const float* x, block_q8_K* y, int64_t n);

inline size_t act_q8_0_scales_offset(int64_t n) {
  return (static_cast<size_t>(n / QK8_0) * sizeof(block_q8_0) + 31) / 32 * 32;
}
inline size_t act_q8_0_bytes(int64_t n) {
  return act_q8_0_scales_offset(n) + static_cast<size_t>(n / QK8_0) * sizeof(float);
}
inline const float* act_q8_0_scales(const void* act, int64_t n) {
  return reinterpret_cast<const float*>(static_cast<const uint8_t*>(act) + act_q8_0_scales_offset(n));
}

}  // namespace kvs::kernels
