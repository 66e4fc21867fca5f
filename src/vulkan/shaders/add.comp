#version 450
// y[i] += x[i] (residual adds).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) buffer Yb { float y[]; };
layout(std430, binding = 1) readonly buffer Xb { float x[]; };
layout(push_constant) uniform Push { uint n; } pc;

void main() {
  const uint i = group_index() * WG + gl_LocalInvocationID.x;
  if (i >= pc.n) return;
  y[i] += x[i];
}
