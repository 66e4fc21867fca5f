// KVzip's score fold: the per-key maximum over the query rows of a logits tile, after a per-row
// affine map (kvzip.cpp's repeat pass; both ways it normalises a row are one of these):
//
//   best[j] = max(best[j], max_{i < nrows} S[i * lds + j] * mul[i] - sub[i])   for j < n
//
// mul = 1 / sum_k exp(S[i][k] - max_i) after exp_sub_sum (S holding exp(logit - max): the
// probability), sub = 0; or mul = 1, sub = the row's log-sum-exp (S holding the logits: the log
// probability). With mul = 1 or sub = 0 (the two uses) every value is exactly the scalar
// expression's (one rounding; the AVX2 path fuses the multiply-subtract, the portable one does not).
// Dispatched once per process: AVX2 (kvzip_fold_avx2.cpp) when kernels::use_avx2(), else the
// portable loop; both are public for the tests.
#pragma once
#include <cstdint>

namespace kvs {

// S: [nrows][lds] (n <= lds), mul, sub: [nrows], best: [n].
void kvzip_fold_max(const float* S, int64_t lds, int nrows, int64_t n, const float* mul, const float* sub, float* best);

void kvzip_fold_max_generic(const float* S, int64_t lds, int nrows, int64_t n, const float* mul, const float* sub,
                            float* best);
void kvzip_fold_max_avx2(const float* S, int64_t lds, int nrows, int64_t n, const float* mul, const float* sub,
                         float* best);

}  // namespace kvs
