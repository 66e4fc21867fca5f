#version 450
// y[r] = sum_c W[r][c] x[c]: one workgroup per weight row (decode). The weight type is chosen at
// compile time (WT_F32, WT_F16, WT_Q8_0, WT_Q4_0: ggml's GGUF layouts, kernels/quant_blocks.h);
// the weights are read as 32-bit words and unpacked here, so no 8/16-bit storage feature is
// needed. Quantised weights are dequantised and multiplied by the f32 activation (no activation
// quantisation: llama.cpp's Vulkan mat-vec does the same), partial sums reduced in shared memory.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Wb { uint w[]; };
layout(std430, binding = 1) readonly buffer Xb { float x[]; };
layout(std430, binding = 2) writeonly buffer Yb { float y[]; };
layout(push_constant) uniform Push {
  uint rows;
  uint cols;
} pc;

shared float part[WG];

// The 16-bit value at an even byte offset.
uint ld16(uint b) { return (w[b >> 2] >> ((b & 2u) * 8u)) & 0xFFFFu; }
float f16_at(uint b) { return unpackHalf2x16(ld16(b)).x; }

void main() {
  const uint row = group_index();
  if (row >= pc.rows) return;  // uniform over the workgroup
  const uint t = gl_LocalInvocationID.x;
  float acc = 0.0;
#if defined(WT_F32)
  const uint base = row * pc.cols;
  for (uint c = t; c < pc.cols; c += WG) acc += uintBitsToFloat(w[base + c]) * x[c];
#elif defined(WT_F16)
  const uint base = row * pc.cols * 2u;
  for (uint c = t; c < pc.cols; c += WG) acc += f16_at(base + 2u * c) * x[c];
#elif defined(WT_Q8_0)
  // block: f16 d, int8 qs[32] (34 bytes); value d * qs[j]
  const uint nb = pc.cols / 32u;
  const uint base = row * nb * 34u;
  for (uint b = t; b < nb; b += WG) {
    const uint o = base + b * 34u;
    const uint xo = b * 32u;
    float s = 0.0;
    for (uint k = 0; k < 16u; ++k) {
      const uint v = ld16(o + 2u + 2u * k);
      const int q0 = int(v << 24) >> 24;
      const int q1 = int(v << 16) >> 24;
      s += float(q0) * x[xo + 2u * k] + float(q1) * x[xo + 2u * k + 1u];
    }
    acc += f16_at(o) * s;
  }
#elif defined(WT_Q4_0)
  // block: f16 d, qs[16] (18 bytes); element j < 16 the low nibble of qs[j], 16 + j its high one;
  // value d * (nibble - 8)
  const uint nb = pc.cols / 32u;
  const uint base = row * nb * 18u;
  for (uint b = t; b < nb; b += WG) {
    const uint o = base + b * 18u;
    const uint xo = b * 32u;
    float s = 0.0;
    for (uint k = 0; k < 8u; ++k) {
      const uint v = ld16(o + 2u + 2u * k);  // qs[2k] | qs[2k + 1] << 8
      const uint j = 2u * k;
      s += float(int(v & 15u) - 8) * x[xo + j] + float(int((v >> 8) & 15u) - 8) * x[xo + j + 1u] +
           float(int((v >> 4) & 15u) - 8) * x[xo + 16u + j] + float(int((v >> 12) & 15u) - 8) * x[xo + 17u + j];
    }
    acc += f16_at(o) * s;
  }
#else
#error "mul_mat_vec.comp: define one of WT_F32, WT_F16, WT_Q8_0, WT_Q4_0"
#endif
  part[t] = acc;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1u) {
    if (t < s) part[t] += part[t + s];
    barrier();
  }
  if (t == 0u) y[row] = part[0];
}
