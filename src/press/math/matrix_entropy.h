// UNComp's truncated matrix entropy and effective rank (Xiong et al., "UNComp: Can Matrix Entropy
// Uncover Sparsity?", ../shared/papers/uncomp.txt §3.1-3.2, Eqs. 1, 3, 5, 6), from a streamed
// covariance so the tokens never have to be kept.
//
//   Eq. 1  Σ_X = 1/(N-1) sum_i (x_i - x̄)(x_i - x̄)^T          (GramAccumulator::covariance)
//   Eq. 5  H_k(Σ_X) = - sum_{i<=k} σ_i log σ_i,  σ = eigenvalues of Σ_X / Tr(Σ_X), descending
//   Eq. 6  erank_k(Σ_X) = exp(H_k)
// UNComp computes it on the queries of each head (§3.2: Q is the best indicator), k = 32 of
// D = 128 (Table 8: top 16/32/64/all tried, 32 best), i.e. k = D/4 (the calibration's default).
//
// Choices where the paper is open (official code checked: menik1126/UNComp
// uncomp/utils/entropy_utils.py: normalize, cal_cov_4, cal_entropy_no_group_svd):
//  - Normalisation of the eigenvalues (EntropyNorm). The proof of Lemma 4 (uncomp.txt, appendix)
//    states "The trace of Σ_X, Tr(Σ_X), is 1": the σ_i are the eigenvalues of the trace-1
//    (density) matrix, and H_k sums the first k terms of that same spectrum (Eq. 44); the official
//    code does exactly that (A / trace(A), the first k singular values): EntropyNorm::Trace, the
//    default. Identity 64x64, k = 16 gives H_k = (1/4) log 64. EntropyNorm::TopK renormalises over
//    the top k (σ_i = λ_i / sum_{j<=k} λ_j, an earlier reading of "a positive definite
//    submatrix"), kept as an option: it ranks heads differently in general.
//  - The official code centres the tokens and scales each to unit norm before forming Z^T Z / N
//    (unit_norm_covariance below: not streamable, it needs the mean first; the calibration's
//    cov=unitnorm, preset=official), where the paper prints Eq. 1 (GramAccumulator: the default).
//    It also divides H by log D, a monotone rescaling that changes no ranking: the calibration's
//    layer values are in those units (Σ over heads of H_k / ln D), so ε means the paper's 0.3-0.5.
//  - Rank deficiency: eigenvalues <= 1e-10 * λ_max count as zero (Lemma 2 needs positive
//    definiteness; zero eigenvalues add 0 log 0 = 0 anyway); k_used reports how many were used.
//    A zero covariance gives H = 0, erank = 1, k_used = 0.
//
// GramAccumulator accumulates, in double, the count, sum(x - s) and the upper triangle of
// sum (x - s)(x - s)^T about a shift s = the first row seen (the covariance does not depend on s,
// and shifting avoids cancellation when the mean is large against the spread).
// Cost: add O(rows d^2 / 2), covariance O(d^2), entropy O(d^3) (eigenvalues only, n = d);
// memory O(d^2). d = 64: 2k multiply-adds per token; UNComp keeps one per (layer, head).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace kvs::math {

class GramAccumulator {
 public:
  explicit GramAccumulator(int d);

  int dim() const { return d_; }
  int64_t count() const { return n_; }

  // n_rows rows of d floats; row r starts at rows[r * row_stride] (row_stride >= d, 0 means d), so
  // one head of a [n][n_head][head_dim] block is add(block.subspan(h * head_dim), n, n_head * head_dim).
  void add(std::span<const float> rows, int64_t n_rows, int64_t row_stride = 0);

  std::vector<double> mean() const;        // [d]; zeros when count() == 0
  std::vector<double> covariance() const;  // [d][d] row-major, Eq. 1; throws if count() < 2
  void reset();

 private:
  int d_;
  int64_t n_ = 0;
  std::vector<double> shift_;  // [d] the first row
  std::vector<double> sx_;     // [d] sum (x - shift)
  std::vector<double> sxx_;    // [d][d] upper triangle of sum (x - shift)(x - shift)^T
};

enum class EntropyNorm {
  Trace,  // σ_i = λ_i / sum of all λ (Lemma 4's trace-1 matrix and the official code; default)
  TopK,   // σ_i = λ_i / sum of the top-k λ (the top-k block as a density matrix of its own)
};

// The official code's token covariance (entropy_utils.py normalize + cal_cov_4): each row centred
// by the mean row, scaled to unit L2 norm (a zero row stays zero), then Z^T Z / N: [d][d], trace 1
// unless every centred row is zero. rows [n][row_stride], first d floats of each; n >= 1.
std::vector<double> unit_norm_covariance(std::span<const float> rows, int64_t n, int d, int64_t row_stride = 0);

struct TruncatedEntropy {
  double h = 0.0;      // H_k (natural log)
  double erank = 1.0;  // exp(H_k)
  int k_used = 0;      // positive eigenvalues among the top k
};

// From eigenvalues sorted in descending order (negative rounding noise is treated as zero).
TruncatedEntropy truncated_entropy(std::span<const double> eigenvalues_desc, int k = 32,
                                   EntropyNorm norm = EntropyNorm::Trace);
// From a covariance [d][d] (symmetric): eigenvalues by sym_eigen, then the above.
TruncatedEntropy truncated_entropy_of(std::span<const double> cov, int d, int k = 32,
                                      EntropyNorm norm = EntropyNorm::Trace);

}  // namespace kvs::math
