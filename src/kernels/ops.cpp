// Public kernel entry points (ops.h): check arguments at the API boundary, then dispatch to the
// active kernel table (AVX2 or generic, chosen once by use_avx2()).
//
// Dimension legend: n = vector / row length.
#include "kernels/ops.h"

#include <algorithm>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels {
namespace {

// Elements per block of a computable type; 0 if kvshrink cannot compute with t.
int64_t block_size(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return 1;
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL: return 32;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS: return 256;
    default: return 0;
  }
}

// In the order the error messages list them.
constexpr DType kComputable[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,   DType::Q6_K,
                                 DType::Q5_K, DType::Q5_1, DType::Q5_0, DType::Q4_K,   DType::Q4_1,
                                 DType::Q4_0, DType::IQ4_XS, DType::IQ4_NL, DType::Q3_K, DType::Q2_K};

// Cheap (switch, no table lookup): runs on every vec_dot call.
inline void check_row(DType t, int64_t n, const char* what) {
  const int64_t bs = block_size(t);
  if (bs == 0) fail("{}: unsupported type {}", what, dtype_name(t));
  if (n % bs != 0) fail("{}: length {} is not a multiple of the {} block size {}", what, n, dtype_name(t), bs);
}

}  // namespace

bool dtype_computable(DType t) { return block_size(t) != 0; }

const std::string& computable_type_names() {
  static const std::string names = [] {
    std::string s;
    for (DType t : kComputable) {
      if (!s.empty()) s += ", ";
      s += dtype_name(t);
    }
    return s;
  }();
  return names;
}

std::string cannot_compute_message(DType t) {
  switch (t) {
    case DType::IQ1_S:
    case DType::IQ1_M:
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
      return fmt::format("type {} (an importance-matrix i-quant) is not supported; kvshrink computes with {}",
                         dtype_name(t), computable_type_names());
    default:
      return fmt::format("type {} is not supported; kvshrink computes with {}", dtype_name(t), computable_type_names());
  }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  check_row(t, n, "dequantize_row");
  if (t == DType::F32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  dequant_fn(active_kernels(), t)(src, dst, n);
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  check_row(t, n, "quantize_row");
  switch (t) {
    case DType::F16: return active_kernels().f32_to_f16(src, static_cast<uint16_t*>(dst), n);
    // The KV cache's row types (every appended K / V row): vectorised, bit-exact with the scalar
    // quantisers below.
    case DType::Q8_0: return active_kernels().quant_kv_q8_0(src, dst, n);
    case DType::Q4_0: return active_kernels().quant_kv_q4_0(src, dst, n);
    default: return ref::quantize_row(t, src, dst, n);  // offline; the scalar quantisers define them
  }
}

size_t act_row_bytes(DType wtype, int64_t n) {
  check_row(wtype, n, "act_row_bytes");
  return ref::act_row_bytes(wtype, n);
}

void prepare_act(DType wtype, const float* x, void* act, int64_t n) {
  check_row(wtype, n, "prepare_act");
  const QuantFn q = act_quant_fn(active_kernels(), wtype);
  if (q)
    q(x, act, n);
  else
    std::memcpy(act, x, static_cast<size_t>(n) * sizeof(float));
}

float vec_dot(DType wtype, const void* wrow, const void* act, int64_t n) {
  check_row(wtype, n, "vec_dot");
  return dot_fn(active_kernels(), wtype)(wrow, act, n);
}

float dot_f32(const float* a, const float* b, int64_t n) { return active_kernels().dot_f32(a, b, n); }
float dot_f32_f16(const float* a, const uint16_t* b, int64_t n) {
  return active_kernels().dot_f32_f16(a, b, n);
}
void axpy_f32(float a, const float* x, float* y, int64_t n) { active_kernels().axpy_f32(a, x, y, n); }
void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
  active_kernels().axpy_f16(a, x, y, n);
}
void scale_f32(float* x, float s, int64_t n) { active_kernels().scale_f32(x, s, n); }
void f32_to_f16(const float* x, uint16_t* y, int64_t n) { active_kernels().f32_to_f16(x, y, n); }
void f16_to_f32(const uint16_t* x, float* y, int64_t n) { active_kernels().dequant_f16(x, y, n); }
void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps) {
  active_kernels().rmsnorm(x, w, out, n, eps);
}
float softmax(float* x, int64_t n) {
  KVS_ASSERT(n > 0);
  return active_kernels().softmax(x, n);
}
void silu_mul(float* gate, const float* up, int64_t n) { active_kernels().silu_mul(gate, up, n); }
void add_f32(float* y, const float* x, int64_t n) { active_kernels().add_f32(y, x, n); }
void qk_rows_f32(const float* Q, int nq, const float* K, int n, int D, float scale, float* out, int64_t ldo) {
  active_kernels().qk_rows_f32(Q, nq, K, n, D, scale, out, ldo);
}
void qk_rows_f16(const float* Q, int nq, const uint16_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  active_kernels().qk_rows_f16(Q, nq, K, n, D, scale, out, ldo);
}
void pv_rows_f32(const float* P, int nq, int64_t ldp, const float* V, int n, int D, float* acc) {
  active_kernels().pv_rows_f32(P, nq, ldp, V, n, D, acc);
}
void pv_rows_f16(const float* P, int nq, int64_t ldp, const uint16_t* V, int n, int D, float* acc) {
  active_kernels().pv_rows_f16(P, nq, ldp, V, n, D, acc);
}
void qk_rows_q8_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  active_kernels().qk_rows_q8_0(Q, nq, K, n, D, scale, out, ldo);
}
void pv_rows_q8_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc) {
  active_kernels().pv_rows_q8_0(P, nq, ldp, V, n, D, acc);
}
bool prepare_queries_q8_0(const float* Q, int nq, int D, float scale, uint8_t* prep) {
  const auto fn = active_kernels().prepare_queries_q8_0;
  return fn != nullptr && fn(Q, nq, D, scale, prep);
}
void qk_rows_q8_0_prepared(const uint8_t* prep, int nq, const uint8_t* K, int n, int D, float* out, int64_t ldo) {
  active_kernels().qk_rows_q8_0_prepared(prep, nq, K, n, D, out, ldo);
}
bool has_pv_rows_q8_0_i16(int D) { return active_kernels().pv_rows_q8_0_i16 != nullptr && D == 64; }
void pv_rows_q8_0_i16(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc) {
  active_kernels().pv_rows_q8_0_i16(P, nq, ldp, V, n, D, acc);
}
void qk_rows_q4_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  active_kernels().qk_rows_q4_0(Q, nq, K, n, D, scale, out, ldo);
}
void pv_rows_q4_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc) {
  active_kernels().pv_rows_q4_0(P, nq, ldp, V, n, D, acc);
}
float exp_sub_sum(float* x, int64_t n, float sub) { return active_kernels().exp_sub_sum(x, n, sub); }
void pack_key_panels(const float* K, int n, int D, float* Kt) { active_kernels().pack_key_panels(K, n, D, Kt); }
void qk_panels(const float* Q, int rows, int D, const float* Kt, int n_panels, float* S, int64_t lds) {
  active_kernels().qk_panels(Q, rows, D, Kt, n_panels, S, lds);
}
void pv_tile(const float* P, int rows, int64_t ldp, const float* V, int n, int D, float* O) {
  active_kernels().pv_tile(P, rows, ldp, V, n, D, O);
}
float max_f32(const float* x, int64_t n) { return active_kernels().max_f32(x, n); }
int64_t argmax_f32(const float* x, int64_t n) { return active_kernels().argmax_f32(x, n); }
void pack_key_panels_bf16(const float* K, int n, int D, uint16_t* Kt) { active_kernels().pack_key_panels_bf16(K, n, D, Kt); }
void pack_value_pairs_bf16(const float* V, int n, int D, uint16_t* Vp) {
  active_kernels().pack_value_pairs_bf16(V, n, D, Vp);
}
void to_bf16(const float* x, uint16_t* y, int64_t n) { active_kernels().to_bf16(x, y, n); }
void qk_panels_bf16(const uint16_t* Q, int rows, int D, const uint16_t* Kt, int n_panels, float* S, int64_t lds) {
  active_kernels().qk_panels_bf16(Q, rows, D, Kt, n_panels, S, lds);
}
void pv_tile_bf16(const uint16_t* P, int rows, int64_t ldp, const uint16_t* Vp, int n, int D, float* O) {
  active_kernels().pv_tile_bf16(P, rows, ldp, Vp, n, D, O);
}
float exp_sub_sum_bf16(const float* x, uint16_t* y, int64_t n, float sub) {
  return active_kernels().exp_sub_sum_bf16(x, y, n, sub);
}
bool native_bf16() { return active_kernels().native_bf16; }
void rope(float* x, int n_heads, int head_dim, int rot_dim, const float* cos_sin, RopeStyle style) {
  KVS_ASSERT(rot_dim % 2 == 0 && rot_dim <= head_dim && rot_dim >= 0);
  active_kernels().rope(x, n_heads, head_dim, rot_dim, cos_sin, style);
}

}  // namespace kvs::kernels
