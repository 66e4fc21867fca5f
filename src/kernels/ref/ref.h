// Scalar reference kernels: the test oracle for every fast path. Written for clarity, not speed:
// plain loops in the order of the format definitions, double accumulation for float reductions,
// integer dot products for quantised weights after quantising the activation with the same
// scalar quantisers (quant.h) the fast paths must reproduce bit for bit.
//
// Dimension legend: n = vector / row length, head_dim / rot_dim / n_heads as in ops.h.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/ops.h"

namespace kvs::kernels::ref {

void dequantize_row(DType t, const void* src, float* dst, int64_t n);
void quantize_row(DType t, const float* src, void* dst, int64_t n);

// Activation format of a weight type (see ops.h): F32 (copied) for F32/F16/BF16, Q8_0 for
// Q8_0/Q4_0, Q8_K for Q4_K/Q6_K.
size_t act_row_bytes(DType wtype, int64_t n);
void prepare_act(DType wtype, const float* x, void* act, int64_t n);
// Weight row . prepared activation. Quantised types: exact integer sums per (sub-)block, scaled
// and accumulated in double.
float vec_dot(DType wtype, const void* wrow, const void* act, int64_t n);

float dot_f32(const float* a, const float* b, int64_t n);
float dot_f32_f16(const float* a, const uint16_t* b, int64_t n);
void axpy_f32(float a, const float* x, float* y, int64_t n);
void axpy_f16(float a, const uint16_t* x, float* y, int64_t n);
void scale_f32(float* x, float s, int64_t n);
void f32_to_f16(const float* x, uint16_t* y, int64_t n);
void f16_to_f32(const uint16_t* x, float* y, int64_t n);
void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps);
float softmax(float* x, int64_t n);
void silu_mul(float* gate, const float* up, int64_t n);
void add_f32(float* y, const float* x, int64_t n);
void rope(float* x, int n_heads, int head_dim, int rot_dim, const float* cos_sin, RopeStyle style);

// Attention rows (ref_attn.cpp) and online-softmax pieces; semantics in ops.h.
void qk_rows_f32(const float* Q, int nq, const float* K, int n, int D, float scale, float* out, int64_t ldo);
void qk_rows_f16(const float* Q, int nq, const uint16_t* K, int n, int D, float scale, float* out, int64_t ldo);
void pv_rows_f32(const float* P, int nq, int64_t ldp, const float* V, int n, int D, float* acc);
void pv_rows_f16(const float* P, int nq, int64_t ldp, const uint16_t* V, int n, int D, float* acc);
void qk_rows_q8_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo);
void qk_rows_q4_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo);
void pv_rows_q4_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc);
void pv_rows_q8_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc);
float exp_sub_sum(float* x, int64_t n, float sub);
float max_f32(const float* x, int64_t n);

}  // namespace kvs::kernels::ref
