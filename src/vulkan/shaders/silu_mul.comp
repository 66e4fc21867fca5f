#version 450
// gate[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)) (the SwiGLU of every llama-like FFN).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) buffer Gb { float g[]; };
layout(std430, binding = 1) readonly buffer Ub { float u[]; };
layout(push_constant) uniform Push { uint n; } pc;

void main() {
  const uint i = group_index() * WG + gl_LocalInvocationID.x;
  if (i >= pc.n) return;
  const float v = g[i];
  g[i] = v / (1.0 + exp(-v)) * u[i];
}
