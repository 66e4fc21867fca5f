#version 450
// out[0] = the first index of the largest x[i], i < n, NaNs never chosen; 0 when every value is
// NaN (kernels/ops.h argmax_f32). One workgroup.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) readonly buffer Xb { float x[]; };
layout(std430, binding = 1) writeonly buffer Ob { uint o[]; };
layout(push_constant) uniform Push { uint n; } pc;

shared float best_v[WG];
shared uint best_i[WG];

// (va, ia) beats (vb, ib): larger value, or equal value at a smaller index; a NaN loses to all.
bool better(float va, uint ia, float vb, uint ib) {
  if (isnan(va)) return false;
  if (isnan(vb)) return true;
  return va > vb || (va == vb && ia < ib);
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  float bv = uintBitsToFloat(0x7fc00000u);  // NaN: nothing yet
  uint bi = 0xffffffffu;
  for (uint i = t; i < pc.n; i += WG) {
    const float v = x[i];
    if (better(v, i, bv, bi)) {
      bv = v;
      bi = i;
    }
  }
  best_v[t] = bv;
  best_i[t] = bi;
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1u) {
    if (t < s && better(best_v[t + s], best_i[t + s], best_v[t], best_i[t])) {
      best_v[t] = best_v[t + s];
      best_i[t] = best_i[t + s];
    }
    barrier();
  }
  if (t == 0u) o[0] = best_i[0] == 0xffffffffu ? 0u : best_i[0];
}
