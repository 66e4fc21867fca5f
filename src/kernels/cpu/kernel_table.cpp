// Assembles the generic and AVX2 kernel tables and the per-type lookups.
#include "kernels/cpu/kernel_table.h"

#include "core/error.h"
#include "kernels/cpu/impl.h"
#include "kernels/cpu_features.h"

namespace kvs::kernels {
namespace avx512 {
void tile_q4_0p(const uint8_t* w, size_t gs, int ng, int64_t nr, const uint8_t* a, size_t as, int nt, int64_t n,
                float* out, int64_t ldo);  // tile_q4_0p_avx512.cpp
}  // namespace avx512
namespace {

#define KVS_KERNEL_TABLE(ns)                                                                      \
  KernelTable {                                                                                  \
    #ns, ns::quant_act_q8_0, ns::quant_act_q8_K, ns::dequant_f16, ns::dequant_bf16,              \
        ns::dequant_q8_0, ns::dequant_q4_0, ns::dequant_q4_K, ns::dequant_q6_K, ns::dot_f32,     \
        ns::dot_f16, ns::dot_bf16, ns::dot_q8_0, ns::dot_q4_0, ns::dot_q4_K, ns::dot_q6_K,       \
        ns::tile_f32, ns::tile_f16, ns::tile_bf16, ns::tile_q8_0, ns::tile_q4_0, ns::tile_q4_K,  \
        ns::tile_q6_K, ns::dot_f32_f16, ns::axpy_f32, ns::axpy_f16, ns::scale_f32,               \
        ns::f32_to_f16, ns::rmsnorm, ns::softmax, ns::silu_mul, ns::add_f32, ns::rope,           \
        ns::qk_rows_f32, ns::qk_rows_f16, ns::pv_rows_f32, ns::pv_rows_f16, ns::exp_sub_sum,    \
        ns::max_f32                                                                              \
  }

const KernelTable kGeneric = KVS_KERNEL_TABLE(generic);
const KernelTable kAvx2 = KVS_KERNEL_TABLE(avx2);

#undef KVS_KERNEL_TABLE

KernelTable make_avx512() {
  KernelTable k = kAvx2;
  k.name = "avx512";
  k.dot_f32 = avx512::dot_f32;
  k.dot_f16 = avx512::dot_f16;
  k.dot_bf16 = avx512::dot_bf16;
  k.dot_q8_0 = avx512::dot_q8_0;
  k.dot_q4_0 = avx512::dot_q4_0;
  k.dot_q4_K = avx512::dot_q4_K;
  k.dot_q6_K = avx512::dot_q6_K;
  k.tile_f32 = avx512::tile_f32;
  k.tile_f16 = avx512::tile_f16;
  k.tile_bf16 = avx512::tile_bf16;
  k.tile_q8_0 = avx512::tile_q8_0;
  k.tile_q4_0 = avx512::tile_q4_0;
  k.tile_q4_K = avx512::tile_q4_K;
  k.tile_q6_K = avx512::tile_q6_K;
  k.wide_tiles = true;
  k.tile_q4_0p = avx512::tile_q4_0p;
  return k;
}

}  // namespace

const KernelTable& generic_kernels() { return kGeneric; }
const KernelTable& avx2_kernels() { return kAvx2; }
const KernelTable& avx512_kernels() {
  static const KernelTable k = make_avx512();
  return k;
}

const KernelTable& active_kernels() {
  static const KernelTable* k = use_avx512() ? &avx512_kernels() : use_avx2() ? &kAvx2 : &kGeneric;
  return *k;
}

DotFn dot_fn(const KernelTable& k, DType t) {
  switch (t) {
    case DType::F32: return k.dot_f32;
    case DType::F16: return k.dot_f16;
    case DType::BF16: return k.dot_bf16;
    case DType::Q8_0: return k.dot_q8_0;
    case DType::Q4_0: return k.dot_q4_0;
    case DType::Q4_K: return k.dot_q4_K;
    case DType::Q6_K: return k.dot_q6_K;
    default: fail("vec_dot: unsupported weight type {}", dtype_name(t));
  }
}

DotTileFn dot_tile_fn(const KernelTable& k, DType t) {
  switch (t) {
    case DType::F32: return k.tile_f32;
    case DType::F16: return k.tile_f16;
    case DType::BF16: return k.tile_bf16;
    case DType::Q8_0: return k.tile_q8_0;
    case DType::Q4_0: return k.tile_q4_0;
    case DType::Q4_K: return k.tile_q4_K;
    case DType::Q6_K: return k.tile_q6_K;
    default: fail("matmul: unsupported weight type {}", dtype_name(t));
  }
}

DequantFn dequant_fn(const KernelTable& k, DType t) {
  switch (t) {
    case DType::F32: return nullptr;
    case DType::F16: return k.dequant_f16;
    case DType::BF16: return k.dequant_bf16;
    case DType::Q8_0: return k.dequant_q8_0;
    case DType::Q4_0: return k.dequant_q4_0;
    case DType::Q4_K: return k.dequant_q4_K;
    case DType::Q6_K: return k.dequant_q6_K;
    default: fail("dequantize: unsupported type {}", dtype_name(t));
  }
}

QuantFn act_quant_fn(const KernelTable& k, DType wtype) {
  switch (wtype) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return nullptr;
    case DType::Q8_0:
    case DType::Q4_0: return k.quant_act_q8_0;
    case DType::Q4_K:
    case DType::Q6_K: return k.quant_act_q8_K;
    default: fail("activation format: unsupported weight type {}", dtype_name(wtype));
  }
}

}  // namespace kvs::kernels
