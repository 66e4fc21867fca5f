// Weight x activation products for linear layers: y[t][r] = sum_c x[t][c] * W[r][c].
// Small batches (decode) use per-row vec_dot over a prepared activation; large batches (prefill)
// dequantise weight tiles to F32 and call BLAS sgemm, each thread on its own block of rows.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"

namespace kvs::kernels {

// Per-thread scratch kept across calls so the hot path never allocates.
struct MatmulScratch {
  // A run of 16-row groups of one job of a packed matmul (its chunk list, matmul.cpp).
  struct GroupChunk {
    int64_t job, begin, end;
  };
  AlignedBuffer<uint8_t> act;                // prepared activations, n_tok rows
  std::vector<GroupChunk> chunks;            // the packed matmul's chunks, in hand-out order
  std::vector<AlignedBuffer<float>> wtile;   // per-thread dequantised weight tiles
};

// W: 2-D weight [rows][cols] of any computable type. x: [n_tok][cols] row-major floats.
// y: [n_tok][ldy] row-major, only the first rows columns written (ldy >= rows; ldy = 0 means rows).
void matmul(const TensorView& W, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
            MatmulScratch& scratch, int64_t ldy = 0);

// Several weights over the same activations x [n_tok][cols] (a layer's Q, K and V; gate and up):
// y_i = W_i . x. When every W_i is repacked (packed_weights.h), of one type, they share one
// activation conversion and one parallel section; otherwise matmul() one after the other. The
// same outputs either way. At most 4 fused; more run one by one.
struct MatmulTarget {
  const TensorView* W;
  float* y;          // [n_tok][ldy]
  int64_t ldy = 0;   // 0: W's rows
};
void matmul_shared(std::span<const MatmulTarget> targets, const float* x, int64_t n_tok, ThreadPool& pool,
                   MatmulScratch& scratch);

// OpenBLAS's kernel set ("Haswell", "Cooperlake", ...; chosen from the CPU at load time unless
// OPENBLAS_CORETYPE names one), for benchmark reports: prefill speed depends on it.
const char* blas_core_name();

// Reference: dequantise each row, accumulate in double. For tests only.
void matmul_ref(const TensorView& W, const float* x, int64_t n_tok, float* y);

}  // namespace kvs::kernels
