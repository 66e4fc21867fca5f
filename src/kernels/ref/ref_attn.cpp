// Scalar reference: attention rows (scores of a block of K rows, probability-weighted V rows),
// accumulated in double.
//
// Dimension legend: nq = queries, n = rows in the block, D = head dim; Q [nq][D], K/V [n][D],
// out/P rows of stride ldo/ldp, acc [nq][D].
#include "core/fp16.h"
#include "kernels/quant_blocks.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels::ref {
namespace {

// Element d of row r of rows of D values.
inline double value(const float* K, int64_t r, int D, int d) { return K[r * D + d]; }
inline double value(const uint16_t* K, int64_t r, int D, int d) { return fp16_to_fp32(K[r * D + d]); }
// Q8_0 (GGUF): a row is D / 32 blocks of {f16 scale d, int8 q[32]}; element = d * q.
inline double value(const block_q8_0* K, int64_t r, int D, int d) {
  const block_q8_0& b = K[r * (D / QK8_0) + d / QK8_0];
  return double(fp16_to_fp32(b.d)) * b.qs[d % QK8_0];
}
// Q4_0 (GGUF): D / 32 blocks of {f16 d, 16 bytes}; element j < 16 = low nibble of byte j, 16 + j
// its high nibble; value d * (nibble - 8).
inline double value(const block_q4_0* K, int64_t r, int D, int d) {
  const block_q4_0& b = K[r * (D / QK4_0) + d / QK4_0];
  const int j = d % QK4_0;
  const int nib = j < 16 ? b.qs[j] & 0x0F : b.qs[j - 16] >> 4;
  return double(fp16_to_fp32(b.d)) * (nib - 8);
}

template <typename KT>
void qk_rows(const float* Q, int nq, const KT* K, int n, int D, float scale, float* out, int64_t ldo) {
  for (int q = 0; q < nq; ++q)
    for (int r = 0; r < n; ++r) {
      double s = 0;
      for (int d = 0; d < D; ++d) s += double(Q[static_cast<int64_t>(q) * D + d]) * value(K, r, D, d);
      out[q * ldo + r] = static_cast<float>(s * scale);
    }
}

template <typename VT>
void pv_rows(const float* P, int nq, int64_t ldp, const VT* V, int n, int D, float* acc) {
  for (int q = 0; q < nq; ++q)
    for (int d = 0; d < D; ++d) {
      double s = acc[static_cast<int64_t>(q) * D + d];
      for (int r = 0; r < n; ++r) s += double(P[q * ldp + r]) * value(V, r, D, d);
      acc[static_cast<int64_t>(q) * D + d] = static_cast<float>(s);
    }
}

}  // namespace

void qk_rows_f32(const float* Q, int nq, const float* K, int n, int D, float scale, float* out, int64_t ldo) {
  qk_rows(Q, nq, K, n, D, scale, out, ldo);
}
void qk_rows_f16(const float* Q, int nq, const uint16_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  qk_rows(Q, nq, K, n, D, scale, out, ldo);
}
void pv_rows_f32(const float* P, int nq, int64_t ldp, const float* V, int n, int D, float* acc) {
  pv_rows(P, nq, ldp, V, n, D, acc);
}
void pv_rows_f16(const float* P, int nq, int64_t ldp, const uint16_t* V, int n, int D, float* acc) {
  pv_rows(P, nq, ldp, V, n, D, acc);
}
void qk_rows_q8_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  qk_rows(Q, nq, reinterpret_cast<const block_q8_0*>(K), n, D, scale, out, ldo);
}
void pv_rows_q8_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc) {
  pv_rows(P, nq, ldp, reinterpret_cast<const block_q8_0*>(V), n, D, acc);
}

void qk_rows_q4_0(const float* Q, int nq, const uint8_t* K, int n, int D, float scale, float* out, int64_t ldo) {
  qk_rows(Q, nq, reinterpret_cast<const block_q4_0*>(K), n, D, scale, out, ldo);
}
void pv_rows_q4_0(const float* P, int nq, int64_t ldp, const uint8_t* V, int n, int D, float* acc) {
  pv_rows(P, nq, ldp, reinterpret_cast<const block_q4_0*>(V), n, D, acc);
}

}  // namespace kvs::kernels::ref
