#include "kvcache/kv_rows.h"

#include "core/error.h"
#include "kernels/ops.h"

namespace kvs {

bool kv_dtype_supported(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::Q8_0 || t == DType::Q4_0; }

const char* kv_dtype_names() { return "f32, f16, q8_0, q4_0"; }

void qk_rows(DType t, const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  switch (t) {
    case DType::F32:
      kernels::qk_rows_f32(Q, nq, reinterpret_cast<const float*>(K), n, D, scale, out, ldo);
      return;
    case DType::F16:
      kernels::qk_rows_f16(Q, nq, reinterpret_cast<const uint16_t*>(K), n, D, scale, out, ldo);
      return;
    case DType::Q8_0:
      kernels::qk_rows_q8_0(Q, nq, K, n, D, scale, out, ldo);
      return;
    case DType::Q4_0:
      kernels::qk_rows_q4_0(Q, nq, K, n, D, scale, out, ldo);
      return;
    default:
      fail("KV pages of type {} are not supported ({})", dtype_name(t), kv_dtype_names());
  }
}

void pv_rows(DType t, const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc) {
  switch (t) {
    case DType::F32:
      kernels::pv_rows_f32(P, nq, ldp, reinterpret_cast<const float*>(V), n, D, acc);
      return;
    case DType::F16:
      kernels::pv_rows_f16(P, nq, ldp, reinterpret_cast<const uint16_t*>(V), n, D, acc);
      return;
    case DType::Q8_0:
      kernels::pv_rows_q8_0(P, nq, ldp, V, n, D, acc);
      return;
    case DType::Q4_0:
      kernels::pv_rows_q4_0(P, nq, ldp, V, n, D, acc);
      return;
    default:
      fail("KV pages of type {} are not supported ({})", dtype_name(t), kv_dtype_names());
  }
}

}  // namespace kvs
