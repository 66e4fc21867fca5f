// The attention row kernels for every KV page type: F32 and F16 rows go to the dispatched
// kernels (qk_rows_f32/f16, pv_rows_f32/f16 in kernels/ops.h), and so do Q8_0 rows (GGUF's blocks
// of 32 along head_dim: an f16 scale + 32 int8 values; qk_rows_q8_0 / pv_rows_q8_0 convert d * q in
// registers, as the F16 kernels convert F16) and Q4_0 rows (an f16 scale + 32 packed 4-bit values;
// qk_rows_q4_0 / pv_rows_q4_0 unpack the nibbles in registers). No page is ever copied to f32.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace kvs {

// True for the types a KV page may hold: F32, F16, Q8_0, Q4_0.
bool kv_dtype_supported(DType t);
// "f32, f16, q8_0, q4_0"
const char* kv_dtype_names();

// out[i * ldo + j] = scale * <Q[i], K[j]> for i < nq, j < n. K: n rows of D elements of type t,
// contiguous (one page's rows).
void qk_rows(DType t, const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo);
// acc[i][:] += sum_j P[i * ldp + j] * V[j][:]. V: n rows of type t.
void pv_rows(DType t, const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc);

}  // namespace kvs
