// Internal: the table of kernel implementations behind ops.h / matmul.h. Three tables exist: the
// portable one (generic_kernels(), plain C++ the compiler may auto-vectorise for the baseline ISA),
// the AVX2+FMA+F16C one (avx2_kernels(), implemented in *_avx2.cpp files) and the AVX-512 one
// (avx512_kernels(): the AVX2 table with the dot products of *_avx512.cpp). active_kernels()
// picks one once per process via use_avx512() / use_avx2(). Tests call every table directly.
//
// Dimension legend: n = row length (a multiple of the weight type's block size for quantised
// types), nr = weight rows in a tile, nt = activation rows (tokens) in a tile.
//
// Note for *_avx2.cpp files: they are compiled with -mavx2 -mfma -mf16c, so any inline function
// or template they instantiate from a shared header could be emitted with AVX2 code and picked by
// the linker for generic callers too. Keep helpers there in anonymous namespaces and use
// intrinsics (_cvtsh_ss, ...) instead of core/fp16.h or <algorithm> templates; only trivial
// integer inline helpers (block-layout offsets in quant.h) are shared.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/ops.h"

namespace kvs::kernels {

// Weight row . prepared activation (activation format of the weight type, see ops.h).
using DotFn = float (*)(const void* w, const void* act, int64_t n);
// out[t * ldo + r] = dot(w + r * w_stride, act + t * act_stride) for r < nr, t < nt.
// Lets an implementation load each weight block once for several tokens.
using DotTileFn = void (*)(const uint8_t* w, size_t w_stride, int nr, const uint8_t* act,
                           size_t act_stride, int nt, int64_t n, float* out, int64_t ldo);
// Repacked Q4_0 / Q8_0 (kernels/packed_weights.h): out[t * ldo + i] = dot(row i, token t) for the
// rows i < min(nr, 16 * ng) of the ng 16-row groups at w (group_stride bytes apart), tokens t < nt;
// activation rows in the packed activation format, act_stride bytes apart. pf_after (or null): a
// group the caller reads next (its next chunk), prefetched while the last group is read, as each
// group prefetches the one after it.
using PackedTileFn = void (*)(const uint8_t* w, size_t group_stride, int ng, int64_t nr, const uint8_t* act,
                              size_t act_stride, int nt, int64_t n, float* out, int64_t ldo,
                              const uint8_t* pf_after);
using DequantFn = void (*)(const void* src, float* dst, int64_t n);
using QuantFn = void (*)(const float* src, void* dst, int64_t n);

struct KernelTable {
  const char* name;

  // Activation preparation (must match prepare_act_q8_0 / prepare_act_q8_1 / quantize_act_q8_K
  // bit for bit).
  QuantFn quant_act_q8_0;
  QuantFn quant_act_q8_1;
  QuantFn quant_act_q8_K;
  // KV cache rows (KvCache::write_row; bit-exact with quantize_row_q8_0 / quantize_row_q4_0,
  // whose rounding differs from the activations': ties away from zero).
  QuantFn quant_kv_q8_0;
  QuantFn quant_kv_q4_0;

  // Row dequantisers to F32 (bit-exact with the scalar reference).
  DequantFn dequant_f16, dequant_bf16, dequant_q8_0, dequant_q4_0, dequant_q4_K, dequant_q6_K;
  DequantFn dequant_q4_1, dequant_q5_0, dequant_q5_1, dequant_iq4_nl;
  DequantFn dequant_q2_K, dequant_q3_K, dequant_q5_K, dequant_iq4_xs;

  // Weight-row dot products (activation: F32 for float weights, Q8_0, Q8_1 or Q8_K blocks
  // otherwise, see act_quant_fn) and their multi-row, multi-token tiles.
  DotFn dot_f32, dot_f16, dot_bf16, dot_q8_0, dot_q4_0, dot_q4_K, dot_q6_K;
  DotFn dot_q4_1, dot_q5_0, dot_q5_1, dot_iq4_nl, dot_q2_K, dot_q3_K, dot_q5_K, dot_iq4_xs;
  DotTileFn tile_f32, tile_f16, tile_bf16, tile_q8_0, tile_q4_0, tile_q4_K, tile_q6_K;
  DotTileFn tile_q4_1, tile_q5_0, tile_q5_1, tile_iq4_nl, tile_q2_K, tile_q3_K, tile_q5_K, tile_iq4_xs;

  // Float vector ops (semantics in ops.h).
  float (*dot_f32_f16)(const float* a, const uint16_t* b, int64_t n);
  void (*axpy_f32)(float a, const float* x, float* y, int64_t n);
  void (*axpy_f16)(float a, const uint16_t* x, float* y, int64_t n);
  void (*scale_f32)(float* x, float s, int64_t n);
  void (*f32_to_f16)(const float* x, uint16_t* y, int64_t n);
  void (*rmsnorm)(const float* x, const float* w, float* out, int64_t n, float eps);
  float (*softmax)(float* x, int64_t n);
  void (*silu_mul)(float* gate, const float* up, int64_t n);
  void (*add_f32)(float* y, const float* x, int64_t n);
  void (*rope)(float* x, int n_heads, int head_dim, int rot_dim, const float* cos_sin,
               RopeStyle style);

  // Attention rows and online-softmax pieces (semantics in ops.h).
  void (*qk_rows_f32)(const float* Q, int nq, const float* K, int n, int D, float scale, float* out,
                      int64_t ldo);
  void (*qk_rows_f16)(const float* Q, int nq, const uint16_t* K, int n, int D, float scale,
                      float* out, int64_t ldo);
  void (*pv_rows_f32)(const float* P, int nq, int64_t ldp, const float* V, int n, int D, float* acc);
  void (*pv_rows_f16)(const float* P, int nq, int64_t ldp, const uint16_t* V, int n, int D,
                      float* acc);
  void (*qk_rows_q8_0)(const float* Q, int nq, const uint8_t* K, int n, int D, float scale,
                       float* out, int64_t ldo);
  void (*pv_rows_q8_0)(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D,
                       float* acc);
  // Q.K against Q8_0 rows with int16 queries (ops.h): the AVX-512 table only; nullptr elsewhere,
  // where prepare_queries_q8_0 answers false and the float row kernel runs.
  bool (*prepare_queries_q8_0)(const float* Q, int nq, int D, float scale, uint8_t* prep) = nullptr;
  void (*qk_rows_q8_0_prepared)(const uint8_t* prep, int nq, const uint8_t* K, int n, int D, float* out,
                                int64_t ldo) = nullptr;
  // P.V against Q8_0 rows with int16 weights (ops.h: pv_rows_q8_0_i16): the AVX-512 table only
  // (head dim 64); nullptr elsewhere, where the float row kernel runs.
  void (*pv_rows_q8_0_i16)(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D,
                           float* acc) = nullptr;
  void (*qk_rows_q4_0)(const float* Q, int nq, const uint8_t* K, int n, int D, float scale,
                       float* out, int64_t ldo);
  void (*pv_rows_q4_0)(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D,
                       float* acc);
  float (*exp_sub_sum)(float* x, int64_t n, float sub);
  float (*max_f32)(const float* x, int64_t n);
  int64_t (*argmax_f32)(const float* x, int64_t n);  // greedy sampling (ops.h)
  void (*pack_key_panels)(const float* K, int n, int D, float* Kt);  // keys into panels of 16 (ops.h)
  // Prefill attention tiles (semantics in ops.h).
  void (*qk_panels)(const float* Q, int rows, int D, const float* Kt, int n_panels, float* S, int64_t lds);
  void (*pv_tile)(const float* P, int rows, int64_t ldp, const float* V, int n, int D, float* O);
  // Their BF16 forms (ops.h); native_bf16: computed by AVX512_BF16 instructions (the AVX-512 table
  // on a CPU that has them), not the portable loops.
  void (*qk_panels_bf16)(const uint16_t* Q, int rows, int D, const uint16_t* Kt, int n_panels, float* S, int64_t lds);
  void (*pv_tile_bf16)(const uint16_t* P, int rows, int64_t ldp, const uint16_t* Vp, int n, int D, float* O);
  void (*to_bf16)(const float* x, uint16_t* y, int64_t n);
  float (*exp_sub_sum_bf16)(const float* x, uint16_t* y, int64_t n, float sub);
  void (*pack_key_panels_bf16)(const float* K, int n, int D, uint16_t* Kt);
  void (*pack_value_pairs_bf16)(const float* V, int n, int D, uint16_t* Vp);
  bool native_bf16 = false;

  // The dot tiles run prefill-sized batches faster than dequantise + an AVX2-class sgemm (see
  // default_decode_max_tok in matmul_internal.h); set for the AVX-512 table.
  bool wide_tiles = false;

  // Tiles over Q4_0 / Q8_0 weights repacked at load (set for the AVX-512 table only; the model
  // repacks the matrices of a type when the active table has its tile, and matmul uses it for
  // those).
  PackedTileFn tile_q4_0p = nullptr;
  PackedTileFn tile_q8_0p = nullptr;
};

const KernelTable& generic_kernels();
// Only valid to *call* into when cpu_features() reports AVX2, FMA and F16C.
const KernelTable& avx2_kernels();
// The AVX2 table with AVX-512 (F/BW/DQ/VL/VNNI) weight-row dots and dot tiles; only valid to call
// into when use_avx512() would say yes on this CPU (ignoring KVS_NO_AVX512).
const KernelTable& avx512_kernels();
// avx512_kernels() if use_avx512(), else avx2_kernels() if use_avx2(), else generic_kernels();
// chosen once.
const KernelTable& active_kernels();

// Per-type lookups; kvs::fail naming the type if unsupported.
DotFn dot_fn(const KernelTable& k, DType wtype);
DotTileFn dot_tile_fn(const KernelTable& k, DType wtype);
// The packed tile of weight type t (Q4_0, Q8_0), or null (none in k, or no packed layout).
PackedTileFn packed_tile_fn(const KernelTable& k, DType t);
// nullptr for F32 (no conversion needed).
DequantFn dequant_fn(const KernelTable& k, DType t);
// Activation quantiser for a weight type; nullptr for float weights (activation used as is).
QuantFn act_quant_fn(const KernelTable& k, DType wtype);

// Generic tile built from a row dot: loops rows outer, tokens inner.
template <DotFn Dot>
void dot_tile_by_rows(const uint8_t* w, size_t w_stride, int nr, const uint8_t* act,
                      size_t act_stride, int nt, int64_t n, float* out, int64_t ldo) {
  for (int r = 0; r < nr; ++r)
    for (int t = 0; t < nt; ++t) out[t * ldo + r] = Dot(w + r * w_stride, act + t * act_stride, n);
}

}  // namespace kvs::kernels
