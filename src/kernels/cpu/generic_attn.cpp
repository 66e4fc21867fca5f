// Portable attention row kernels (semantics in ops.h): plain float loops over the rows of one KV
// page for every query of a GQA group.
//
// Dimension legend: nq = queries, n = rows in the block, D = head dim; Q [nq][D], K/V [n][D],
// out/P rows of stride ldo/ldp, acc [nq][D].
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/generic_fp16.h"
#include "kernels/cpu/impl.h"
#include "kernels/ops.h"

namespace kvs::kernels::generic {
namespace {

// Element d of a row (rows stepped with row_of, impl.h).
inline float at(const float* row, int d) { return row[d]; }
inline float at(const uint16_t* row, int d) { return h2f_vec(row[d]); }
inline float at(const block_q8_0* row, int d) {
  const block_q8_0& b = row[d / QK8_0];
  return h2f_vec(b.d) * static_cast<float>(b.qs[d % QK8_0]);
}
inline float at(const block_q4_0* row, int d) {
  const block_q4_0& b = row[d / QK4_0];
  const int j = d % QK4_0;
  return h2f_vec(b.d) * static_cast<float>((j < 16 ? b.qs[j] & 0x0F : b.qs[j - 16] >> 4) - 8);
}

template <typename KT>
void qk_rows(const float* Q, int nq, const KT* K, int n, int D, float scale, float* out, int64_t ldo) {
  for (int q = 0; q < nq; ++q)
    for (int r = 0; r < n; ++r) {
      const float* qv = Q + static_cast<int64_t>(q) * D;
      const KT* k = row_of(K, r, D);
      float s = 0;
      for (int d = 0; d < D; ++d) s += qv[d] * at(k, d);
      out[q * ldo + r] = s * scale;
    }
}

template <typename VT>
void pv_rows(const float* P, int nq, int64_t ldp, const VT* V, int n, int D, float* acc) {
  for (int q = 0; q < nq; ++q) {
    float* a = acc + static_cast<int64_t>(q) * D;
    for (int r = 0; r < n; ++r) {
      const float p = P[q * ldp + r];
      const VT* v = row_of(V, r, D);
      for (int d = 0; d < D; ++d) a[d] += p * at(v, d);
    }
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

// Prefill tiles: the same products as plain loops (the innermost one, over a panel's 16 keys or
// over D, is what the compiler vectorises); pv_tile has pv_rows_f32's contract, and here its loop.
void qk_panels(const float* Q, int rows, int D, const float* Kt, int n_panels, float* S, int64_t lds) {
  for (int r = 0; r < rows; ++r)
    for (int p = 0; p < n_panels; ++p) {
      float acc[kKeyPanel] = {};
      const float* kt = Kt + static_cast<int64_t>(p) * D * kKeyPanel;
      for (int d = 0; d < D; ++d) {
        const float q = Q[static_cast<int64_t>(r) * D + d];
        for (int l = 0; l < kKeyPanel; ++l) acc[l] += q * kt[d * kKeyPanel + l];
      }
      for (int l = 0; l < kKeyPanel; ++l) S[r * lds + p * kKeyPanel + l] = acc[l];
    }
}
void pv_tile(const float* P, int rows, int64_t ldp, const float* V, int n, int D, float* O) {
  pv_rows(P, rows, ldp, V, n, D, O);
}


// BF16 tiles (ops.h): the same loops over BF16 values widened to f32 (exact), so each product is
// exact and only the f32 sums round — what VDPBF16PS computes, up to its summation order. The
// reference the AVX512_BF16 kernels are tested against, and the fallback on other CPUs.
namespace {
inline float bf(uint16_t h) { return bf16_to_fp32(h); }
}  // namespace

void qk_panels_bf16(const uint16_t* Q, int rows, int D, const uint16_t* Kt, int n_panels, float* S, int64_t lds) {
  for (int r = 0; r < rows; ++r)
    for (int p = 0; p < n_panels; ++p) {
      float acc[kKeyPanel] = {};
      const uint16_t* kt = Kt + static_cast<int64_t>(p) * D * kKeyPanel;  // [D / 2][16][2]
      for (int d = 0; d < D; ++d) {
        const float q = bf(Q[static_cast<int64_t>(r) * D + d]);
        for (int l = 0; l < kKeyPanel; ++l) acc[l] += q * bf(kt[(d / 2) * 2 * kKeyPanel + l * 2 + d % 2]);
      }
      for (int l = 0; l < kKeyPanel; ++l) S[r * lds + p * kKeyPanel + l] = acc[l];
    }
}
void to_bf16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}
float exp_sub_sum_bf16(const float* x, uint16_t* y, int64_t n, float sub) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float d = x[i] - sub;
    const float e = d < -87.3f ? 0.0f : std::exp(d);
    y[i] = fp32_to_bf16(e);
    s += e;
  }
  return s;
}
void pv_tile_bf16(const uint16_t* P, int rows, int64_t ldp, const uint16_t* Vp, int n, int D, float* O) {
  for (int r = 0; r < rows; ++r) {
    float* o = O + static_cast<int64_t>(r) * D;
    for (int j = 0; j < n; ++j) {
      const float p = bf(P[r * ldp + j]);
      const uint16_t* v = Vp + static_cast<int64_t>(j / 2) * 2 * D + j % 2;  // dim d at v[2 d]
      for (int d = 0; d < D; ++d) o[d] += p * bf(v[2 * d]);
    }
  }
}

// Keys into panels of 16 (ops.h): element by element.
void pack_key_panels(const float* K, int n, int D, float* Kt) {
  const int np = (n + kKeyPanel - 1) / kKeyPanel;
  for (int p = 0; p < np; ++p) {
    float* dst = Kt + static_cast<int64_t>(p) * D * kKeyPanel;  // [D][16]
    const int m = std::min(kKeyPanel, n - p * kKeyPanel);
    for (int d = 0; d < D; ++d) {
      for (int l = 0; l < m; ++l) dst[d * kKeyPanel + l] = K[static_cast<int64_t>(p * kKeyPanel + l) * D + d];
      for (int l = m; l < kKeyPanel; ++l) dst[d * kKeyPanel + l] = 0.0f;
    }
  }
}

// The BF16 packings (ops.h): element by element.
void pack_key_panels_bf16(const float* K, int n, int D, uint16_t* Kt) {
  KVS_ASSERT(D % 2 == 0);
  const int np = (n + kKeyPanel - 1) / kKeyPanel;
  for (int p = 0; p < np; ++p) {
    uint16_t* dst = Kt + static_cast<int64_t>(p) * D * kKeyPanel;  // [D / 2][16][2]
    const int m = std::min(kKeyPanel, n - p * kKeyPanel);
    for (int d = 0; d < D; ++d) {
      uint16_t* col = dst + (d / 2) * 2 * kKeyPanel + d % 2;  // key l at col[2 l]
      for (int l = 0; l < m; ++l) col[2 * l] = fp32_to_bf16(K[static_cast<int64_t>(p * kKeyPanel + l) * D + d]);
      for (int l = m; l < kKeyPanel; ++l) col[2 * l] = 0;
    }
  }
}
void pack_value_pairs_bf16(const float* V, int n, int D, uint16_t* Vp) {
  KVS_ASSERT(D % 2 == 0);
  for (int j = 0; j < n; ++j) {
    const float* v = V + static_cast<int64_t>(j) * D;
    uint16_t* dst = Vp + static_cast<int64_t>(j / 2) * 2 * D + j % 2;
    for (int d = 0; d < D; ++d) dst[2 * d] = fp32_to_bf16(v[d]);
  }
  if (n % 2 == 1) {
    uint16_t* dst = Vp + static_cast<int64_t>(n / 2) * 2 * D + 1;
    for (int d = 0; d < D; ++d) dst[2 * d] = 0;
  }
}

}  // namespace kvs::kernels::generic
