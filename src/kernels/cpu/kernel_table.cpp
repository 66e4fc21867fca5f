// Assembles the generic and AVX2 kernel tables and the per-type lookups.
#include "kernels/cpu/kernel_table.h"

#include "core/error.h"
#include "kernels/cpu/impl.h"
#include "kernels/cpu_features.h"

namespace kvs::kernels {
namespace avx512 {
void tile_q4_0p(const uint8_t* w, size_t gs, int ng, int64_t nr, const uint8_t* a, size_t as, int nt, int64_t n,
                float* out, int64_t ldo, const uint8_t* pf_after);  // tile_packed_avx512.cpp
void tile_q8_0p(const uint8_t* w, size_t gs, int ng, int64_t nr, const uint8_t* a, size_t as, int nt, int64_t n,
                float* out, int64_t ldo, const uint8_t* pf_after);  // tile_packed_avx512.cpp
}  // namespace avx512
namespace {

// Every member from the implementation set ns (impl.h).
#define KVS_FILL_TABLE(k, ns)                                                                     \
  do {                                                                                           \
    k.name = #ns;                                                                                \
    k.quant_act_q8_0 = ns::quant_act_q8_0;                                                       \
    k.quant_act_q8_1 = ns::quant_act_q8_1;                                                       \
    k.quant_act_q8_K = ns::quant_act_q8_K;                                                       \
    k.quant_kv_q8_0 = ns::quant_kv_q8_0;                                                         \
    k.quant_kv_q4_0 = ns::quant_kv_q4_0;                                                         \
    KVS_FILL_TYPE(k, ns, f16);                                                                   \
    KVS_FILL_TYPE(k, ns, bf16);                                                                  \
    KVS_FILL_TYPE(k, ns, q8_0);                                                                  \
    KVS_FILL_TYPE(k, ns, q4_0);                                                                  \
    KVS_FILL_TYPE(k, ns, q4_1);                                                                  \
    KVS_FILL_TYPE(k, ns, q5_0);                                                                  \
    KVS_FILL_TYPE(k, ns, q5_1);                                                                  \
    KVS_FILL_TYPE(k, ns, iq4_nl);                                                                \
    KVS_FILL_TYPE(k, ns, q2_K);                                                                  \
    KVS_FILL_TYPE(k, ns, q3_K);                                                                  \
    KVS_FILL_TYPE(k, ns, q4_K);                                                                  \
    KVS_FILL_TYPE(k, ns, q5_K);                                                                  \
    KVS_FILL_TYPE(k, ns, q6_K);                                                                  \
    KVS_FILL_TYPE(k, ns, iq4_xs);                                                                \
    k.dot_f32 = ns::dot_f32;                                                                     \
    k.tile_f32 = ns::tile_f32;                                                                   \
    k.dot_f32_f16 = ns::dot_f32_f16;                                                             \
    k.axpy_f32 = ns::axpy_f32;                                                                   \
    k.axpy_f16 = ns::axpy_f16;                                                                   \
    k.scale_f32 = ns::scale_f32;                                                                 \
    k.f32_to_f16 = ns::f32_to_f16;                                                               \
    k.rmsnorm = ns::rmsnorm;                                                                     \
    k.softmax = ns::softmax;                                                                     \
    k.silu_mul = ns::silu_mul;                                                                   \
    k.add_f32 = ns::add_f32;                                                                     \
    k.rope = ns::rope;                                                                           \
    k.qk_rows_f32 = ns::qk_rows_f32;                                                             \
    k.qk_rows_f16 = ns::qk_rows_f16;                                                             \
    k.pv_rows_f32 = ns::pv_rows_f32;                                                             \
    k.pv_rows_f16 = ns::pv_rows_f16;                                                             \
    k.qk_rows_q8_0 = ns::qk_rows_q8_0;                                                           \
    k.pv_rows_q8_0 = ns::pv_rows_q8_0;                                                           \
    k.qk_rows_q4_0 = ns::qk_rows_q4_0;                                                           \
    k.pv_rows_q4_0 = ns::pv_rows_q4_0;                                                           \
    k.exp_sub_sum = ns::exp_sub_sum;                                                             \
    k.max_f32 = ns::max_f32;                                                                     \
    k.argmax_f32 = generic::argmax_f32;                                                          \
    k.pack_key_panels = generic::pack_key_panels;                                                \
    k.qk_panels = ns::qk_panels;                                                                 \
    k.pv_tile = ns::pv_tile;                                                                     \
    k.qk_panels_bf16 = generic::qk_panels_bf16;                                                  \
    k.pv_tile_bf16 = generic::pv_tile_bf16;                                                      \
    k.to_bf16 = generic::to_bf16;                                                                \
    k.exp_sub_sum_bf16 = generic::exp_sub_sum_bf16;                                              \
    k.pack_key_panels_bf16 = generic::pack_key_panels_bf16;                                      \
    k.pack_value_pairs_bf16 = generic::pack_value_pairs_bf16;                                    \
  } while (0)
#define KVS_FILL_TYPE(k, ns, t) \
  (k.dequant_##t = ns::dequant_##t, k.dot_##t = ns::dot_##t, k.tile_##t = ns::tile_##t)

KernelTable make_table_generic() {
  KernelTable k{};
  KVS_FILL_TABLE(k, generic);
  return k;
}

KernelTable make_table_avx2() {
  KernelTable k{};
  KVS_FILL_TABLE(k, avx2);
  return k;
}

#undef KVS_FILL_TYPE
#undef KVS_FILL_TABLE

// A dot tile that runs Decode for one token and Batch for more: the AVX-512 table's choice per
// weight type where its own one-token tile streams weights from DRAM slower than the AVX2 one.
template <DotTileFn Decode, DotTileFn Batch>
void tile_decode_batch(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n,
                       float* out, int64_t ldo) {
  (nt == 1 ? Decode : Batch)(w, ws, nr, a, as, nt, n, out, ldo);
}

KernelTable make_avx512() {
  KernelTable k = make_table_avx2();
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
  k.dot_q4_1 = avx512::dot_q4_1;
  k.tile_q4_1 = tile_decode_batch<avx2::tile_q4_1, avx512::tile_q4_1>;
  k.dot_q5_0 = avx512::dot_q5_0;
  k.tile_q5_0 = avx512::tile_q5_0;
  k.dot_q5_1 = avx512::dot_q5_1;
  k.tile_q5_1 = tile_decode_batch<avx2::tile_q5_1, avx512::tile_q5_1>;
  k.dot_iq4_nl = avx512::dot_iq4_nl;
  // IQ4_NL, Q4_1, Q5_1, one token: the AVX2 tile, which streams them from DRAM faster than the
  // AVX-512 one (measured with kvshrink bench-kernels, docs/kernels-k-quants.md).
  k.tile_iq4_nl = tile_decode_batch<avx2::tile_iq4_nl, avx512::tile_iq4_nl>;
  k.dot_q2_K = avx512::dot_q2_K;
  k.tile_q2_K = avx512::tile_q2_K;
  k.dot_q3_K = avx512::dot_q3_K;
  k.tile_q3_K = avx512::tile_q3_K;
  k.dot_q5_K = avx512::dot_q5_K;
  k.tile_q5_K = avx512::tile_q5_K;
  k.dot_iq4_xs = avx512::dot_iq4_xs;
  k.tile_iq4_xs = avx512::tile_iq4_xs;
  k.wide_tiles = true;
  k.tile_q4_0p = avx512::tile_q4_0p;
  k.tile_q8_0p = avx512::tile_q8_0p;
  k.qk_rows_f32 = avx512::qk_rows_f32;
  k.qk_rows_f16 = avx512::qk_rows_f16;
  k.pv_rows_f32 = avx512::pv_rows_f32;
  k.pv_rows_f16 = avx512::pv_rows_f16;
  k.qk_rows_q8_0 = avx512::qk_rows_q8_0;
  k.pv_rows_q8_0 = avx512::pv_rows_q8_0;
  k.prepare_queries_q8_0 = avx512::prepare_queries_q8_0;
  k.qk_rows_q8_0_prepared = avx512::qk_rows_q8_0_prepared;
  k.pv_rows_q8_0_i16 = avx512::pv_rows_q8_0_i16;
  k.qk_rows_q4_0 = avx512::qk_rows_q4_0;
  k.pv_rows_q4_0 = avx512::pv_rows_q4_0;
  k.qk_panels = avx512::qk_panels;
  k.pv_tile = avx512::pv_tile;
  k.exp_sub_sum = avx512::exp_sub_sum;
  k.max_f32 = avx512::max_f32;
  k.argmax_f32 = avx512::argmax_f32;
  k.silu_mul = avx512::silu_mul;
  k.quant_act_q8_0 = avx512::quant_act_q8_0;
  k.pack_key_panels = avx512::pack_key_panels;
  if (cpu_features().avx512bf16) {  // Zen 4+, Cooper Lake, Sapphire Rapids+
    k.qk_panels_bf16 = avx512bf16::qk_panels_bf16;
    k.pv_tile_bf16 = avx512bf16::pv_tile_bf16;
    k.to_bf16 = avx512bf16::to_bf16;
    k.exp_sub_sum_bf16 = avx512bf16::exp_sub_sum_bf16;
    k.pack_key_panels_bf16 = avx512bf16::pack_key_panels_bf16;
    k.pack_value_pairs_bf16 = avx512bf16::pack_value_pairs_bf16;
    k.native_bf16 = true;
  }
  return k;
}

}  // namespace

// Function-local statics: the tables are built on first use, so a caller during another file's
// static initialisation never sees an unfilled table.
const KernelTable& generic_kernels() {
  static const KernelTable k = make_table_generic();
  return k;
}
const KernelTable& avx2_kernels() {
  static const KernelTable k = make_table_avx2();
  return k;
}
const KernelTable& avx512_kernels() {
  static const KernelTable k = make_avx512();
  return k;
}

const KernelTable& active_kernels() {
  static const KernelTable* k = use_avx512() ? &avx512_kernels() : use_avx2() ? &avx2_kernels() : &generic_kernels();
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
    case DType::Q4_1: return k.dot_q4_1;
    case DType::Q5_0: return k.dot_q5_0;
    case DType::Q5_1: return k.dot_q5_1;
    case DType::IQ4_NL: return k.dot_iq4_nl;
    case DType::Q2_K: return k.dot_q2_K;
    case DType::Q3_K: return k.dot_q3_K;
    case DType::Q5_K: return k.dot_q5_K;
    case DType::IQ4_XS: return k.dot_iq4_xs;
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
    case DType::Q4_1: return k.tile_q4_1;
    case DType::Q5_0: return k.tile_q5_0;
    case DType::Q5_1: return k.tile_q5_1;
    case DType::IQ4_NL: return k.tile_iq4_nl;
    case DType::Q2_K: return k.tile_q2_K;
    case DType::Q3_K: return k.tile_q3_K;
    case DType::Q5_K: return k.tile_q5_K;
    case DType::IQ4_XS: return k.tile_iq4_xs;
    default: fail("matmul: unsupported weight type {}", dtype_name(t));
  }
}

PackedTileFn packed_tile_fn(const KernelTable& k, DType t) {
  switch (t) {
    case DType::Q4_0: return k.tile_q4_0p;
    case DType::Q8_0: return k.tile_q8_0p;
    default: return nullptr;
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
    case DType::Q4_1: return k.dequant_q4_1;
    case DType::Q5_0: return k.dequant_q5_0;
    case DType::Q5_1: return k.dequant_q5_1;
    case DType::IQ4_NL: return k.dequant_iq4_nl;
    case DType::Q2_K: return k.dequant_q2_K;
    case DType::Q3_K: return k.dequant_q3_K;
    case DType::Q5_K: return k.dequant_q5_K;
    case DType::IQ4_XS: return k.dequant_iq4_xs;
    default: fail("dequantize: unsupported type {}", dtype_name(t));
  }
}

QuantFn act_quant_fn(const KernelTable& k, DType wtype) {
  switch (wtype) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: return nullptr;
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::IQ4_NL: return k.quant_act_q8_0;
    case DType::Q4_1:
    case DType::Q5_1: return k.quant_act_q8_1;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::IQ4_XS: return k.quant_act_q8_K;
    default: fail("activation format: unsupported weight type {}", dtype_name(wtype));
  }
}

}  // namespace kvs::kernels
