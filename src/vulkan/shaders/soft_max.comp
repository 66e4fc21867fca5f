#version 450
// Row softmax in place, x[r] = exp(x[r] - max) / sum, and lse[r] = max + log(sum): one workgroup
// per row. A row of only -inf becomes zeros with lse -inf (kernels/ops.h softmax).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) buffer Xb { float x[]; };
layout(std430, binding = 1) writeonly buffer Lb { float lse[]; };
layout(push_constant) uniform Push {
  uint rows;
  uint n;
} pc;

shared float part[WG];

void main() {
  const uint row = group_index();
  if (row >= pc.rows) return;
  const uint t = gl_LocalInvocationID.x;
  const uint base = row * pc.n;
  float m = uintBitsToFloat(0xff800000u);  // -inf
  for (uint i = t; i < pc.n; i += WG) m = max(m, x[base + i]);
  part[t] = m;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1u) {
    if (t < s) part[t] = max(part[t], part[t + s]);
    barrier();
  }
  m = part[0];
  barrier();
  if (isinf(m) && m < 0.0) {
    for (uint i = t; i < pc.n; i += WG) x[base + i] = 0.0;
    if (t == 0u) lse[row] = m;
    return;
  }
  float sum = 0.0;
  for (uint i = t; i < pc.n; i += WG) sum += exp(x[base + i] - m);
  part[t] = sum;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1u) {
    if (t < s) part[t] += part[t + s];
    barrier();
  }
  sum = part[0];
  const float inv = 1.0 / sum;
  for (uint i = t; i < pc.n; i += WG) x[base + i] = exp(x[base + i] - m) * inv;
  if (t == 0u) lse[row] = m + log(sum);
}
