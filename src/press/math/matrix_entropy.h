// UNComp's truncated matrix entropy and effective rank (Xiong et al., "UNComp: Can Matrix Entropy
// Uncover Sparsity?", ../shared/papers/uncomp.txt §3.1-3.2, Eqs. 1, 3, 5, 6), from a streamed
// covariance so the tokens never have to be kept.
//
//   Eq. 1  Σ_X = 1/(N-1) sum_i (x_i - x̄)(x_i - x̄)^T          (GramAccumulator::covariance)
//   Eq. 5  H_k(Σ_X) = - sum_{i<=k} σ_i log σ_i,  σ = normalised eigenvalues, descending
//   Eq. 6  erank_k(Σ_X) = exp(H_k)
// UNComp computes it on the queries of each head (§3.2: Q is the best indicator), k = 32.
//
// Choices where the paper is open (official code checked: menik1126/UNComp
// uncomp/utils/entropy_utils.py: normalize, cal_cov_4, cal_entropy_no_group_svd):
//  - Normalisation of the eigenvalues (EntropyNorm). The paper defines H_k as the entropy "of a
//    positive definite submatrix" (§3.2 Discussion) — the top-k eigen-block normalised as a density
//    matrix of its own, i.e. σ_i = λ_i / sum_{j<=k} λ_j (EntropyNorm::TopK, default). Then
//    erank_k <= k with equality for a flat top-k spectrum (identity -> k), as Lemma 4 / Eq. 47 say.
//    The official code instead divides by the full trace, σ_i = λ_i / sum_all λ_j, and sums the
//    first k terms only (EntropyNorm::Trace): identity 64x64, k = 32 gives exp(0.5 log 64) = 8, not
//    32. Both are offered; they rank heads differently in general.
//  - The official code also (a) centres the tokens and scales each to unit norm before forming
//    Z^T Z / N — a different matrix from Eq. 1 that needs the mean before any token can be
//    normalised, so it cannot be streamed in one pass; we implement Eq. 1 as printed — and (b)
//    divides H by log D, a monotone rescaling that changes no ranking; we do not.
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
  TopK,   // σ_i = λ_i / sum of the top-k λ (the paper's "submatrix"; default)
  Trace,  // σ_i = λ_i / sum of all λ (the official code)
};

struct TruncatedEntropy {
  double h = 0.0;      // H_k (natural log)
  double erank = 1.0;  // exp(H_k)
  int k_used = 0;      // positive eigenvalues among the top k
};

// From eigenvalues sorted in descending order (negative rounding noise is treated as zero).
TruncatedEntropy truncated_entropy(std::span<const double> eigenvalues_desc, int k = 32,
                                   EntropyNorm norm = EntropyNorm::TopK);
// From a covariance [d][d] (symmetric): eigenvalues by sym_eigen, then the above.
TruncatedEntropy truncated_entropy_of(std::span<const double> cov, int d, int k = 32,
                                      EntropyNorm norm = EntropyNorm::TopK);

}  // namespace kvs::math
