#version 450
// out[r][i] = x[r][i] / sqrt(mean_i(x[r]^2) + eps) * w[i]: one workgroup per row (out may be x).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Xb { float x[]; };
layout(std430, binding = 1) readonly buffer Wb { float w[]; };
layout(std430, binding = 2) writeonly buffer Ob { float o[]; };
layout(push_constant) uniform Push {
  uint rows;
  uint n;
  float eps;
} pc;

shared float part[WG];

void main() {
  const uint row = group_index();
  if (row >= pc.rows) return;
  const uint t = gl_LocalInvocationID.x;
  const uint base = row * pc.n;
  float ss = 0.0;
  for (uint i = t; i < pc.n; i += WG) ss += x[base + i] * x[base + i];
  part[t] = ss;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1u) {
    if (t < s) part[t] += part[t + s];
    barrier();
  }
  const float inv = inversesqrt(part[0] / float(pc.n) + pc.eps);
  for (uint i = t; i < pc.n; i += WG) o[base + i] = x[base + i] * inv * w[i];
}
