// Per-channel running mean and variance of rows (GVote's Gaussian, Algorithm 1 line 4: torch.mean
// / torch.std over the sequence, per channel). Sums of the deviations from the first row seen
// (a shifted-data estimate): stable where E[x²] − μ² would cancel (large-mean channels), exact
// under any split of the rows into batches.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace kvs::math {

class ChannelStats {
 public:
  ChannelStats() = default;  // dimension 0: add() refuses rows until constructed with d >= 1
  explicit ChannelStats(int d);
  int dim() const { return d_; }
  int64_t count() const { return n_; }
  // rows [n_rows][row_stride] (row_stride >= d, 0 means d)
  void add(std::span<const float> rows, int64_t n_rows, int64_t row_stride = 0);
  std::vector<float> mean() const;                         // [d]
  std::vector<float> stddev(bool unbiased = true) const;   // [d]; needs count() >= 2 if unbiased

 private:
  int d_ = 0;
  int64_t n_ = 0;
  std::vector<double> shift_, s1_, s2_;
};

}  // namespace kvs::math
