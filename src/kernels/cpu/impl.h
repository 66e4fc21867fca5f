// Internal: declarations of the implementation sets that kernel_table.cpp assembles into
// KernelTable instances -- kvs::kernels::generic (portable C++), kvs::kernels::avx2
// (AVX2+FMA+F16C intrinsics, *_avx2.cpp) and kvs::kernels::avx512 (the dot products only,
// *_avx512.cpp). Signatures and semantics are those of the KernelTable members of the same name.
//
// Dimension legend: n = row length, nr/nt = weight rows/tokens of a dot tile.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/ops.h"
#include "kernels/quant_blocks.h"

namespace kvs::kernels {
// Row r of a KV page's rows of D values of type KT (float, uint16_t F16) or of D / 32 Q8_0
// blocks: how every table's attention row kernels (generic_attn.cpp, attn_rows_impl.h) step rows.
template <typename KT>
inline const KT* row_of(const KT* K, int64_t r, int D) {
  return K + r * D;
}
inline const block_q8_0* row_of(const block_q8_0* K, int64_t r, int D) { return K + r * (D / QK8_0); }
inline const block_q4_0* row_of(const block_q4_0* K, int64_t r, int D) { return K + r * (D / QK4_0); }
}  // namespace kvs::kernels

#define KVS_KERNEL_SET_DECLS                                                                     \
  void quant_act_q8_0(const float* x, void* y, int64_t n);                                       \
  void quant_act_q8_K(const float* x, void* y, int64_t n);                                       \
  void quant_kv_q8_0(const float* x, void* y, int64_t n);                                        \
  void quant_kv_q4_0(const float* x, void* y, int64_t n);                                        \
  void dequant_f16(const void* src, float* dst, int64_t n);                                      \
  void dequant_bf16(const void* src, float* dst, int64_t n);                                     \
  void dequant_q8_0(const void* src, float* dst, int64_t n);                                     \
  void dequant_q4_0(const void* src, float* dst, int64_t n);                                     \
  void dequant_q4_K(const void* src, float* dst, int64_t n);                                     \
  void dequant_q6_K(const void* src, float* dst, int64_t n);                                     \
  void dequant_q4_1(const void* src, float* dst, int64_t n); \
  float dot_q4_1(const void* w, const void* act, int64_t n); \
  void tile_q4_1(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out, int64_t ldo); \
  void dequant_q5_0(const void* src, float* dst, int64_t n); \
  float dot_q5_0(const void* w, const void* act, int64_t n); \
  void tile_q5_0(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out, int64_t ldo); \
  void dequant_q5_1(const void* src, float* dst, int64_t n); \
  float dot_q5_1(const void* w, const void* act, int64_t n); \
  void tile_q5_1(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out, int64_t ldo); \
  void dequant_iq4_nl(const void* src, float* dst, int64_t n); \
  float dot_iq4_nl(const void* w, const void* act, int64_t n); \
  void tile_iq4_nl(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out, int64_t ldo); \
  void dequant_q2_K(const void* src, float* dst, int64_t n); \
  float dot_q2_K(const void* w, const void* act, int64_t n); \
  void tile_q2_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out, int64_t ldo); \
  void dequant_q3_K(const void* src, float* dst, int64_t n); \
  float dot_q3_K(const void* w, const void* act, int64_t n); \
  void tile_q3_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out, int64_t ldo); \
  void dequant_q5_K(const void* src, float* dst, int64_t n); \
  float dot_q5_K(const void* w, const void* act, int64_t n); \
  void tile_q5_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out, int64_t ldo); \
  void dequant_iq4_xs(const void* src, float* dst, int64_t n); \
  float dot_iq4_xs(const void* w, const void* act, int64_t n); \
  void tile_iq4_xs(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, float* out, int64_t ldo); \
  void quant_act_q8_1(const float* x, void* y, int64_t n); \
  float dot_f32(const void* w, const void* act, int64_t n);                                      \
  float dot_f16(const void* w, const void* act, int64_t n);                                      \
  float dot_bf16(const void* w, const void* act, int64_t n);                                     \
  float dot_q8_0(const void* w, const void* act, int64_t n);                                     \
  float dot_q4_0(const void* w, const void* act, int64_t n);                                     \
  float dot_q4_K(const void* w, const void* act, int64_t n);                                     \
  float dot_q6_K(const void* w, const void* act, int64_t n);                                     \
  void tile_f32(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt,       \
                int64_t n, float* out, int64_t ldo);                                             \
  void tile_f16(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt,       \
                int64_t n, float* out, int64_t ldo);                                             \
  void tile_bf16(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt,      \
                 int64_t n, float* out, int64_t ldo);                                            \
  void tile_q8_0(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt,      \
                 int64_t n, float* out, int64_t ldo);                                            \
  void tile_q4_0(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt,      \
                 int64_t n, float* out, int64_t ldo);                                            \
  void tile_q4_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt,      \
                 int64_t n, float* out, int64_t ldo);                                            \
  void tile_q6_K(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt,      \
                 int64_t n, float* out, int64_t ldo);                                            \
  float dot_f32_f16(const float* a, const uint16_t* b, int64_t n);                               \
  void axpy_f32(float a, const float* x, float* y, int64_t n);                                   \
  void axpy_f16(float a, const uint16_t* x, float* y, int64_t n);                                \
  void scale_f32(float* x, float s, int64_t n);                                                  \
  void f32_to_f16(const float* x, uint16_t* y, int64_t n);                                       \
  void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps);                \
  float softmax(float* x, int64_t n);                                                            \
  void silu_mul(float* gate, const float* up, int64_t n);                                        \
  void add_f32(float* y, const float* x, int64_t n);                                             \
  void rope(float* x, int n_heads, int head_dim, int rot_dim, const float* cos_sin,              \
            RopeStyle style);                                                                    \
  void qk_rows_f32(const float* Q, int nq, const float* K, int n, int D, float scale, float* out,  \
                   int64_t ldo);                                                                 \
  void qk_rows_f16(const float* Q, int nq, const uint16_t* K, int n, int D, float scale,          \
                   float* out, int64_t ldo);                                                     \
  void pv_rows_f32(const float* P, int nq, int64_t ldp, const float* V, int n, int D, float* acc); \
  void pv_rows_f16(const float* P, int nq, int64_t ldp, const uint16_t* V, int n, int D,          \
                   float* acc);                                                                  \
  void qk_rows_q8_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale,         \
                    float* out, int64_t ldo);                                                    \
  void pv_rows_q8_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D,         \
                    float* acc);                                                                 \
  void qk_rows_q4_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale,         \
                    float* out, int64_t ldo);                                                    \
  void pv_rows_q4_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D,         \
                    float* acc);                                                                 \
  float exp_sub_sum(float* x, int64_t n, float sub);                                             \
  float max_f32(const float* x, int64_t n);                                                      \
  void qk_panels(const float* Q, int rows, int D, const float* Kt, int n_panels, float* S,        \
                 int64_t lds);                                                                   \
  void pv_tile(const float* P, int rows, int64_t ldp, const float* V, int n, int D, float* O);

namespace kvs::kernels::generic {
KVS_KERNEL_SET_DECLS
}  // namespace kvs::kernels::generic

namespace kvs::kernels::avx2 {
KVS_KERNEL_SET_DECLS
}  // namespace kvs::kernels::avx2

// The BF16 attention tiles (ops.h): the portable loops (generic_attn.cpp, every table's unless the
// CPU has AVX512_BF16) and the AVX512_BF16 kernels (attn_bf16_avx512.cpp).
#define KVS_BF16_TILE_DECLS                                                                               \
  void qk_panels_bf16(const uint16_t* Q, int rows, int D, const uint16_t* Kt, int n_panels, float* S,   \
                      int64_t lds);                                                                     \
  void pv_tile_bf16(const uint16_t* P, int rows, int64_t ldp, const uint16_t* Vp, int n, int D, float* O); \
  void to_bf16(const float* x, uint16_t* y, int64_t n);                                                 \
  float exp_sub_sum_bf16(const float* x, uint16_t* y, int64_t n, float sub);                            \
  void pack_key_panels_bf16(const float* K, int n, int D, uint16_t* Kt);                                \
  void pack_value_pairs_bf16(const float* V, int n, int D, uint16_t* Vp);
namespace kvs::kernels::generic {
KVS_BF16_TILE_DECLS
// The portable argmax (every table's but the AVX-512 one).
int64_t argmax_f32(const float* x, int64_t n);
// The portable key panel packing (every table's but the AVX-512 one; generic_attn.cpp).
void pack_key_panels(const float* K, int n, int D, float* Kt);
}  // namespace kvs::kernels::generic
namespace kvs::kernels::avx512bf16 {
KVS_BF16_TILE_DECLS
}  // namespace kvs::kernels::avx512bf16
#undef KVS_BF16_TILE_DECLS

#undef KVS_KERNEL_SET_DECLS

// AVX-512 (F, BW, DQ, VL, VNNI) implementations (*_avx512.cpp): the weight-row dots and dot tiles
// and the attention row kernels; every other member of the avx512 table is the AVX2 one.
#define KVS_TILE_DECL(name)                                                                       \
  void name(const uint8_t* w, size_t ws, int nr, const uint8_t* a, size_t as, int nt, int64_t n, \
            float* out, int64_t ldo);
namespace kvs::kernels::avx512 {
float dot_f32(const void* w, const void* act, int64_t n);
float dot_f16(const void* w, const void* act, int64_t n);
float dot_bf16(const void* w, const void* act, int64_t n);
float dot_q8_0(const void* w, const void* act, int64_t n);
float dot_q4_0(const void* w, const void* act, int64_t n);
float dot_q4_K(const void* w, const void* act, int64_t n);
float dot_q6_K(const void* w, const void* act, int64_t n);
KVS_TILE_DECL(tile_f32)
KVS_TILE_DECL(tile_f16)
KVS_TILE_DECL(tile_bf16)
KVS_TILE_DECL(tile_q8_0)
KVS_TILE_DECL(tile_q4_0)
KVS_TILE_DECL(tile_q4_K)
KVS_TILE_DECL(tile_q6_K)
float dot_q4_1(const void* w, const void* act, int64_t n);
KVS_TILE_DECL(tile_q4_1)
float dot_q5_0(const void* w, const void* act, int64_t n);
KVS_TILE_DECL(tile_q5_0)
float dot_q5_1(const void* w, const void* act, int64_t n);
KVS_TILE_DECL(tile_q5_1)
float dot_iq4_nl(const void* w, const void* act, int64_t n);
KVS_TILE_DECL(tile_iq4_nl)
float dot_q2_K(const void* w, const void* act, int64_t n);
KVS_TILE_DECL(tile_q2_K)
float dot_q3_K(const void* w, const void* act, int64_t n);
KVS_TILE_DECL(tile_q3_K)
float dot_q5_K(const void* w, const void* act, int64_t n);
KVS_TILE_DECL(tile_q5_K)
float dot_iq4_xs(const void* w, const void* act, int64_t n);
KVS_TILE_DECL(tile_iq4_xs)
// attn_avx512.cpp: the decode attention's row kernels.
void qk_rows_f32(const float* Q, int nq, const float* K, int n, int D, float scale, float* out, int64_t ldo);
void qk_rows_f16(const float* Q, int nq, const uint16_t* K, int n, int D, float scale, float* out, int64_t ldo);
void pv_rows_f32(const float* P, int nq, int64_t ldp, const float* V, int n, int D, float* acc);
void pv_rows_f16(const float* P, int nq, int64_t ldp, const uint16_t* V, int n, int D, float* acc);
void qk_rows_q8_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo);
void pv_rows_q8_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc);
void qk_rows_q4_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo);
void pv_rows_q4_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc);
// attn_q8_0_i16_avx512.cpp: Q.K against Q8_0 rows with int16 queries (head dim 64).
bool prepare_queries_q8_0(const float* Q, int nq, int D, float scale, uint8_t* prep);
void qk_rows_q8_0_prepared(const uint8_t* prep, int nq, const uint8_t* K, int n, int D, float* out, int64_t ldo);
// attn_pv_q8_0_i16_avx512.cpp: P.V against Q8_0 rows with int16 weights (head dim 64).
void pv_rows_q8_0_i16(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc);
void qk_panels(const float* Q, int rows, int D, const float* Kt, int n_panels, float* S, int64_t lds);
void pv_tile(const float* P, int rows, int64_t ldp, const float* V, int n, int D, float* O);
void pack_key_panels(const float* K, int n, int D, float* Kt);
float exp_sub_sum(float* x, int64_t n, float sub);
float max_f32(const float* x, int64_t n);
// argmax_avx512.cpp
int64_t argmax_f32(const float* x, int64_t n);
// act_avx512.cpp
void silu_mul(float* gate, const float* up, int64_t n);
void quant_act_q8_0(const float* x, void* y, int64_t n);
}  // namespace kvs::kernels::avx512
#undef KVS_TILE_DECL
