#version 450
// RoPE in place (kernels/ops.h rope): x is [n_tok][n_heads][head_dim], cos_sin [n_tok][rot_dim/2][2]
// (cos, sin of pair i at the token's position). One invocation per rotated pair: pair i of a head
// is (2i, 2i+1) for style 0 (Interleaved, GGUF llama) or (i, i + rot_dim/2) for style 1
// (RotateHalf, neox); dims past rot_dim stay.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 0) buffer Xb { float x[]; };
layout(std430, binding = 1) readonly buffer Cb { float cs[]; };
layout(push_constant) uniform Push {
  uint n_tok;
  uint n_heads;
  uint head_dim;
  uint rot_dim;
  uint style;
} pc;

void main() {
  const uint half_rot = pc.rot_dim / 2u;
  const uint id = group_index() * WG + gl_LocalInvocationID.x;
  if (id >= pc.n_tok * pc.n_heads * half_rot) return;
  const uint i = id % half_rot;
  const uint head = id / half_rot;  // token * n_heads + head
  const uint tok = head / pc.n_heads;
  const uint base = head * pc.head_dim;
  const uint i0 = base + (pc.style == 0u ? 2u * i : i);
  const uint i1 = base + (pc.style == 0u ? 2u * i + 1u : i + half_rot);
  const float c = cs[tok * pc.rot_dim + 2u * i], s = cs[tok * pc.rot_dim + 2u * i + 1u];
  const float x0 = x[i0], x1 = x[i1];
  x[i0] = x0 * c - x1 * s;
  x[i1] = x0 * s + x1 * c;
}
