// The scalar quantisers that define how kvshrink writes the GGUF block formats (the formats
// themselves: quant_blocks.h).
//
// Dimension legend: n = elements in a row (a multiple of the block size), nb = n / block size.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "kernels/quant_blocks.h"

namespace kvs::kernels {

// ---- weight quantisers: the definition of what kvshrink writes --------------------------------
// Offline (the GGUF writer, `make-model`). n is a multiple of the type's block size. Each one is
// llama.cpp's reference algorithm for files made without an importance matrix (ggml-quants.c of
// the Feb 2025 snapshot: quantize_row_*_ref; for IQ4_NL/IQ4_XS quantize_iq4_nl/_xs with no
// weights, the path llama-quantize takes), written anew with the same floating-point operations
// in the same order, so that one float row gives the same bytes as llama-quantize writes. The
// algorithms (x = the block's values, "round" = to nearest, ties to even, unless noted):
//   Q8_0:   d = amax / 127, q = round_half_away(x / d)        (ggml: roundf)
//   Q4_0:   d = max / -8 (max = value of largest magnitude), q = min(15, trunc(x / d + 8.5))
//   Q5_0:   d = max / -16, q = min(31, trunc(x / d + 16.5))
//   Q4_1:   d = (hi - lo) / 15, m = lo, q = min(15, trunc((x - lo) / d + 0.5))
//   Q5_1:   d = (hi - lo) / 31, m = lo, q = trunc((x - lo) / d + 0.5)
//   Q2_K, Q4_K, Q5_K: per sub-block (16 / 32 / 32 values) a weighted least-squares fit of
//           x ~ scale * q - min over a grid of candidate scales (ggml make_qkx2_quants; weights
//           |x| for Q2_K, rms(sub-block) + |x| for Q4_K/Q5_K; Q2_K minimises the weighted
//           absolute error), the scales and mins quantised to 4 (Q2_K) or 6 bits against the
//           super-block maxima, then every value re-quantised with the stored scales.
//   Q3_K:   per 16 values a symmetric fit with weights x^2 and up to 5 coordinate-descent passes
//           (make_q3_quants), 6-bit scales against -32 / max scale, re-quantised.
//   Q6_K:   per 16 values a symmetric fit with weights x^2 over 19 candidate scales around
//           -32 / max (make_qx_quants), int8 scales against -128 / max scale, re-quantised.
//   IQ4_NL: per 32 values the scale that best fits x ~ d * level over 16 candidate grids
//           (weights x^2), then each value mapped to its nearest of the 16 levels.
//   IQ4_XS: IQ4_NL's fit per 32 values, then 6-bit sub-block scales against d = -max / 32.
// Non-finite input gives unspecified (but memory-safe) blocks; the GGUF writer refuses it first.
void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n);
void quantize_row_q4_0(const float* x, block_q4_0* y, int64_t n);
void quantize_row_q4_1(const float* x, block_q4_1* y, int64_t n);
void quantize_row_q5_0(const float* x, block_q5_0* y, int64_t n);
void quantize_row_q5_1(const float* x, block_q5_1* y, int64_t n);
void quantize_row_q2_K(const float* x, block_q2_K* y, int64_t n);
void quantize_row_q3_K(const float* x, block_q3_K* y, int64_t n);
void quantize_row_q4_K(const float* x, block_q4_K* y, int64_t n);
void quantize_row_q5_K(const float* x, block_q5_K* y, int64_t n);
void quantize_row_q6_K(const float* x, block_q6_K* y, int64_t n);
void quantize_row_iq4_nl(const float* x, block_iq4_nl* y, int64_t n);
void quantize_row_iq4_xs(const float* x, block_iq4_xs* y, int64_t n);

// True for the types quantize_weights writes: F32, F16, BF16 and the twelve block types above
// (whether or not kvshrink can compute with them yet).
bool weights_writable(DType t);
// n floats -> type t (n a multiple of t's block size; kvs::Error otherwise or for other types).
void quantize_weights(DType t, const float* x, void* y, int64_t n);

// Activations (hot path; the AVX2 versions must reproduce these bit for bit):
//   Q8_0 (prepared activation for Q8_0/Q4_0 weights): nb Q8_0 blocks (as quantize_row_q8_0 but
//         q = round_half_even(x * (1/d)), the rounding of llama.cpp's activation path), then
//         at act_q8_0_scales_offset(n) the nb block scales as floats (= fp16_to_fp32(d)), so the
//         dot kernels need no fp16 conversion per weight row. act_q8_0_bytes(n) bytes in all.
//   Q8_1 (prepared activation for Q4_1/Q5_1 weights, whose offset m needs the activation's block
//         sums, as ggml's Q8_1): the Q8_0 activation, then at act_q8_0_bytes(n) nb floats
//         s[b] = scale[b] * sum_j qs[b][j] (the float scale times the exact integer sum).
//         act_q8_1_bytes(n) bytes in all. finish_act_q8_1 appends the sums to a Q8_0 activation.
//   Q8_K: iscale = 127 / amax, q = round_half_even(x * iscale) clamped to [-127, 127],
//         d = 1 / iscale (float); bsums from the stored q.
//   All-zero input gives d = 0 and q = 0.
void prepare_act_q8_0(const float* x, void* act, int64_t n);
void prepare_act_q8_1(const float* x, void* act, int64_t n);
void finish_act_q8_1(void* act, int64_t n);
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
// For a quantizer about to write act's blocks: zeroes the padding between the blocks and the
// scales (so that buffers stay deterministic) and returns the scales [n / 32] to fill.
inline float* act_q8_0_pad_and_scales(void* act, int64_t n) {
  const size_t off = act_q8_0_scales_offset(n), end = static_cast<size_t>(n / QK8_0) * sizeof(block_q8_0);
  std::memset(static_cast<uint8_t*>(act) + end, 0, off - end);
  return reinterpret_cast<float*>(static_cast<uint8_t*>(act) + off);
}
inline size_t act_q8_1_bytes(int64_t n) {
  return act_q8_0_bytes(n) + static_cast<size_t>(n / QK8_0) * sizeof(float);
}
inline const float* act_q8_1_sums(const void* act, int64_t n) {
  return reinterpret_cast<const float*>(static_cast<const uint8_t*>(act) + act_q8_0_bytes(n));
}

}  // namespace kvs::kernels
