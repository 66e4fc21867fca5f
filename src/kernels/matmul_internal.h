// Internal: matmul with an explicit kernel table and tuning knobs, for tests (force a path and a
// dispatch table) and benchmarks (measure the knobs). The model calls matmul() in matmul.h.
//
// Dimension legend: n_tok = activation rows, rows/cols = W's shape (cols = ne[0]).
#pragma once
#include <cstdint>

#include "kernels/cpu/kernel_table.h"
#include "kernels/matmul.h"

namespace kvs::kernels {

enum class MatmulPath { Auto, Decode, Prefill };

// How prefill uses BLAS threads.
enum class BlasThreading {
  PoolPerThread,  // OpenBLAS single-threaded; every pool thread runs sgemm on its own row block
  BlasInternal,   // one sgemm call per tile from the caller; OpenBLAS uses pool.size() threads
};

struct MatmulConfig {
  MatmulPath path = MatmulPath::Auto;
  // Auto: decode (per-row dot tiles) when n_tok < decode_max_tok, else prefill (sgemm).
  int64_t decode_max_tok = 0;  // 0 = the built-in per-type default (see matmul.cpp)
  // Prefill: weight rows dequantised per sgemm call (per thread), 0 = sized to ~tile_bytes.
  int64_t tile_rows = 0;
  int64_t tile_bytes = 0;  // 0 = default
  BlasThreading blas = BlasThreading::PoolPerThread;
  // Below this many multiply-adds (rows * cols * n_tok) a matmul runs on the calling thread only.
  int64_t min_parallel_macs = 64 * 1024;
};

void matmul_with(const KernelTable& k, const MatmulConfig& cfg, const TensorView& W,
                 const float* x, int64_t n_tok, float* y, ThreadPool& pool,
                 MatmulScratch& scratch, int64_t ldy = 0);

void matmul_shared_with(const KernelTable& k, const MatmulConfig& cfg, std::span<const MatmulTarget> targets,
                        const float* x, int64_t n_tok, ThreadPool& pool, MatmulScratch& scratch);

// The built-in decode/prefill crossover for a weight type and kernel table: the dot tiles when
// n_tok < this, else dequantise + sgemm. Depends on whether OpenBLAS runs AVX-512 kernels
// (blas_runs_avx512).
int64_t default_decode_max_tok(const KernelTable& k, DType wtype);

// True when OpenBLAS's kernel set uses AVX-512 (SkylakeX and later); false for Haswell / Zen
// (AVX2) kernels, including when OPENBLAS_CORETYPE forces them.
bool blas_runs_avx512();

}  // namespace kvs::kernels
