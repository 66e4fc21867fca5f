// Kernel entry points used by the model and the KV cache. Each dispatches at runtime to the AVX2
// implementation (kernels/cpu/*_avx2.cpp) or the portable one; kernels/ref/ holds the scalar
// reference (the test oracle) for every one of them.
//
// Dimension legend: n = vector length, n_tok = tokens in a batch, rows/cols of a weight matrix
// follow GGML order (a weight W is [rows][cols], cols = ne[0] = input features).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace kvs::kernels {

// ---- element types --------------------------------------------------------------------------
// Converts n elements of type t to float. Supported t: the computable types (dtype_computable):
// F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);
// Converts n floats to type t (n a multiple of t's block size); fails naming t for a type without
// a quantiser (the GGUF writer and `make-model` use these).
void quantize_row(DType t, const float* src, void* dst, int64_t n);
// True if dequantize_row/vec_dot/matmul support t (the types of every llama.cpp preset that needs
// no importance matrix).
bool dtype_computable(DType t);
// "f32, f16, bf16, q8_0, ..." (the computable types), for error messages.
const std::string& computable_type_names();
// The reason kvshrink cannot compute with t, naming t and the computable types (the i-quants
// IQ1_*/IQ2_*/IQ3_* are called importance-matrix types).
std::string cannot_compute_message(DType t);

// ---- weight-row dot products ----------------------------------------------------------------
// A dot product of a weight row of type wtype with an activation vector first converts the
// activation into the "activation format" of wtype (as llama.cpp does): F32 for F32/F16/BF16
// weights, Q8_0 blocks for Q8_0/Q4_0 weights (followed by a float copy of their scales, see
// prepare_act_q8_0 in quant.h) for Q8_0/Q4_0/Q5_0/IQ4_NL weights, Q8_1 (Q8_0 plus the blocks'
// sums) for Q4_1/Q5_1, Q8_K blocks (float scale + int8 + block sums) for Q2_K/Q3_K/Q4_K/Q5_K/Q6_K/
// IQ4_XS weights. Prepare once per activation row, then dot against many weight rows; size the buffer
// with act_row_bytes.
size_t act_row_bytes(DType wtype, int64_t n);
void prepare_act(DType wtype, const float* x, void* act, int64_t n);
float vec_dot(DType wtype, const void* wrow, const void* act, int64_t n);

// ---- float vector ops -----------------------------------------------------------------------
float dot_f32(const float* a, const float* b, int64_t n);
// Dot of a float query with an F16 row (F16 KV cache).
float dot_f32_f16(const float* a, const uint16_t* b, int64_t n);
// y += a * x
void axpy_f32(float a, const float* x, float* y, int64_t n);
void axpy_f16(float a, const uint16_t* x, float* y, int64_t n);
void scale_f32(float* x, float s, int64_t n);
void f32_to_f16(const float* x, uint16_t* y, int64_t n);
void f16_to_f32(const uint16_t* x, float* y, int64_t n);
// out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]   (out may alias x)
void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps);
// In place: x = exp(x - max) / sum. Returns the log-sum-exp (max + log(sum)).
float softmax(float* x, int64_t n);
// gate[i] = silu(gate[i]) * up[i]
void silu_mul(float* gate, const float* up, int64_t n);
// y[i] += x[i]
void add_f32(float* y, const float* x, int64_t n);

// ---- attention rows (decode attention, kvcache/attention.cpp) ------------------------------
// Inner loops over a block of contiguous cache rows (one KV page): all query heads of a GQA group
// against each row, so a row is loaded from memory once for the whole group.
// nq = queries (group heads x batch tokens), n = rows in the block, D = head dim; Q is [nq][D],
// K/V rows are contiguous [n][D] in the KV cache dtype (f32 or f16; q8_0: n rows of D / 32
// GGUF Q8_0 blocks, D a multiple of 32, values d * q converted in registers).
// out[q * ldo + r] = scale * dot(Q[q * D ...], K[r * D ...])   for q < nq, r < n
void qk_rows_f32(const float* Q, int nq, const float* K, int n, int D, float scale, float* out, int64_t ldo);
void qk_rows_f16(const float* Q, int nq, const uint16_t* K, int n, int D, float scale, float* out, int64_t ldo);
// acc[q * D + d] += sum_r P[q * ldp + r] * V[r * D + d]
void pv_rows_f32(const float* P, int nq, int64_t ldp, const float* V, int n, int D, float* acc);
void pv_rows_f16(const float* P, int nq, int64_t ldp, const uint16_t* V, int n, int D, float* acc);
void qk_rows_q8_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo);
void pv_rows_q8_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc);
// Q.K against Q8_0 rows with the queries rounded to int16 once (one scale per query: query q is
// s * qi, s = max|q| / 32767, qi = round-half-even(q / s)), then integer dot products per block
// and the block scales applied per row: out[q * ldo + r] = scale * s_q * sum_b d(r, b) * sum_{j in
// b} qi[j] * k[j] (the f32 queries' scores within scale * (s_q / 2) * sum_j |d k_j| plus f32
// rounding). prepare_queries_q8_0 writes nq prepared queries of kQ8PreparedQueryBytes each into
// prep; it answers false, writing nothing the caller may use, when the active kernels have no
// such path for D (only the AVX-512 table has one, for D = 64) or a query holds a NaN, an infinity
// or only magnitudes below the smallest normal float: the caller then uses qk_rows_q8_0. The decode
// attention prepares a task's queries once and reads every page of its key range with them
// (docs/benchmarks/issue25-server-step-3-2026-11-29.md).
constexpr int64_t kQ8PreparedQueryBytes = 192;
bool prepare_queries_q8_0(const float* Q, int nq, int D, float scale, uint8_t* prep);
void qk_rows_q8_0_prepared(const uint8_t* prep, int nq, const uint8_t* K, int n, int D, float* out, int64_t ldo);
// P.V against Q8_0 rows with the weights rounded to int16: acc[q * D + d] += sum_r P[q * ldp + r] *
// V[r][d], as pv_rows_q8_0, where per chunk of up to 32 rows and per query q the weights
// w = p(q, r) * d(r, b) are rounded to int16 with one scale s = max_r |p(q, r)| * max_{r,b} |d(r, b)|
// / 32767 (over the chunk's rows and both blocks) and the sums over the rows' int8 values are
// exact integers: each value within (s / 2) * sum_r |k(r, j)| plus f32 rounding of the f32
// weights' P.V. A chunk with a weight or scale that is not finite, or whose bound is below the
// smallest normal float, takes the float kernel (pv_rows_q8_0) instead.
// Only where has_pv_rows_q8_0_i16(D) (the AVX-512 table, D = 64); elsewhere pv_rows_q8_0 serves.
// The decode attention uses it where it uses the int16 queries
// (docs/benchmarks/issue25-server-step-4-intel-2026-11-29.md, "P.V with int16 weights").
bool has_pv_rows_q8_0_i16(int D);
void pv_rows_q8_0_i16(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc);
// Q4_0 rows (GGUF: per block of 32 an f16 scale d and 16 bytes, element j < 16 the low nibble of
// byte j, element 16 + j its high nibble; value d * (nibble - 8)), converted in registers too.
void qk_rows_q4_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo);
void pv_rows_q4_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc);

// ---- attention tiles (prefill attention, KVzip's repeat-pass scores) ------------------------
// Query rows against a whole block of keys / values (f32, gathered from the cache). Keys come
// transposed in panels of kKeyPanel: Kt [ceil(n / 16)][D][16], key j's dim d at
// Kt[(j / 16) * D * 16 + d * 16 + j % 16], the last panel's missing keys zero (pack_key_panels).
constexpr int kKeyPanel = 16;
// Floats pack_key_panels writes for n keys of D dims.
inline size_t key_panels_floats(int n, int D) {
  return static_cast<size_t>((n + kKeyPanel - 1) / kKeyPanel) * kKeyPanel * static_cast<size_t>(D);
}
// Kt := the n rows K [n][D] as panels (above).
void pack_key_panels(const float* K, int n, int D, float* Kt);
// S[r * lds + j] = dot(Q[r * D ...], key j)   for r < rows, j < 16 * n_panels (0 for the padding keys)
void qk_panels(const float* Q, int rows, int D, const float* Kt, int n_panels, float* S, int64_t lds);
// O[r * D + d] += sum_{j < n} P[r * ldp + j] * V[j * D + d]   for r < rows, d < D
void pv_tile(const float* P, int rows, int64_t ldp, const float* V, int n, int D, float* O);

// The same two products from operands rounded to BF16 (round to nearest even), accumulated in f32
// (AttnShape::bf16_products: KVzip's scoring pass, whose official code runs the model in BF16).
// D must be even. Keys: panels of 16 with the dims in pairs, Kt [ceil(n / 16)][D / 2][16][2]:
// key j's dim d at Kt[(j / 16) * 16 * D + (d / 2) * 32 + (j % 16) * 2 + d % 2] (padding keys 0),
// the same element count as pack_key_panels and the same offset for a first key j0 % 16 == 0.
// Values in key pairs, Vp [ceil(n / 2)][D][2]: key j's dim d at Vp[(j / 2) * 2 * D + 2 * d + j % 2]
// (odd n: the last pair's second key 0), offset j0 * D for an even first key j0.
void pack_key_panels_bf16(const float* K, int n, int D, uint16_t* Kt);
void pack_value_pairs_bf16(const float* V, int n, int D, uint16_t* Vp);
// y[i] = x[i] rounded to BF16 (nearest even).
void to_bf16(const float* x, uint16_t* y, int64_t n);
// S[r * lds + j] = sum_d Q[r][d] K[j][d] over BF16 values, in f32; Q [rows][D] BF16.
void qk_panels_bf16(const uint16_t* Q, int rows, int D, const uint16_t* Kt, int n_panels, float* S, int64_t lds);
// O[r * D + d] += sum_{j < n} P[r * ldp + j] V[j][d] over BF16 values, in f32; P rows of BF16
// (elements past n are not read).
void pv_tile_bf16(const uint16_t* P, int rows, int64_t ldp, const uint16_t* Vp, int n, int D, float* O);
// y[i] = exp(x[i] - sub) rounded to BF16 (0 below about -87.3 and for -inf); returns the sum of
// the unrounded values (the softmax's normaliser, f32 lanes). The exp may be coarser than
// exp_sub_sum's since its result is rounded to 8 bits: relative error below 1e-5 before rounding
// (a value near a rounding boundary may round either way).
float exp_sub_sum_bf16(const float* x, uint16_t* y, int64_t n, float sub);
// True when the active kernel table multiplies BF16 in hardware (AVX512_BF16); the BF16 tiles of
// other tables are plain loops, correct but several times slower than the f32 ones.
bool native_bf16();

// ---- online-softmax pieces ------------------------------------------------------------------
// x[i] = exp(x[i] - sub); returns the sum of the new x[i] (accumulated in float lanes). exp of
// anything below about -87.3 (and of -inf) is 0; relative error ~2e-7 above that.
float exp_sub_sum(float* x, int64_t n, float sub);
// Maximum of x[0..n) (-inf for n == 0).
float max_f32(const float* x, int64_t n);
// Greedy sampling: the first index of the largest value of x[0..n), NaNs never chosen; 0 when
// every value is NaN (n >= 1, n < 2^31).
int64_t argmax_f32(const float* x, int64_t n);

// ---- RoPE -----------------------------------------------------------------------------------
enum class RopeStyle {
  Interleaved,  // pairs (2i, 2i+1): GGUF `llama` (Q/K weights stored permuted), llama.cpp "norm"
  RotateHalf,   // pairs (i, i + d/2): HF transformers, GGUF `qwen2`, llama.cpp "neox"
};
// Rotates n_heads vectors of head_dim floats laid out back to back (x[h*head_dim + j]), in place.
// cos_sin holds rot_dim/2 (cos, sin) pairs for this token's position: cos_sin[2i], cos_sin[2i+1]
// for frequency i. Only the first rot_dim dims of each head rotate (rot_dim <= head_dim, even).
void rope(float* x, int n_heads, int head_dim, int rot_dim, const float* cos_sin, RopeStyle style);

}  // namespace kvs::kernels
