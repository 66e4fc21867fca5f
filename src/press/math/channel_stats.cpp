#include "press/math/channel_stats.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kvs::math {

ChannelStats::ChannelStats(int d) : d_(d) {
  if (d < 1) fail("ChannelStats: dimension {} (expected >= 1)", d);
  shift_.assign(static_cast<size_t>(d), 0.0);
  s1_.assign(static_cast<size_t>(d), 0.0);
  s2_.assign(static_cast<size_t>(d), 0.0);
}

void ChannelStats::add(std::span<const float> rows, int64_t n_rows, int64_t row_stride) {
  if (row_stride == 0) row_stride = d_;
  if (d_ < 1 || n_rows < 0 || row_stride < d_) fail("ChannelStats::add: {} rows of stride {} for dimension {}", n_rows, row_stride, d_);
  if (n_rows == 0) return;
  if (static_cast<int64_t>(rows.size()) < (n_rows - 1) * row_stride + d_)
    fail("ChannelStats::add: {} floats for {} rows of stride {}", rows.size(), n_rows, row_stride);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* x = rows.data() + r * row_stride;
    if (n_ == 0)
      for (int c = 0; c < d_; ++c) shift_[c] = x[c];
    for (int c = 0; c < d_; ++c) {
      const double y = static_cast<double>(x[c]) - shift_[c];
      s1_[c] += y;
      s2_[c] += y * y;
    }
    ++n_;
  }
}

std::vector<float> ChannelStats::mean() const {
  std::vector<float> m(static_cast<size_t>(d_), 0.0f);
  if (n_ == 0) return m;
  for (int c = 0; c < d_; ++c) m[c] = static_cast<float>(shift_[c] + s1_[c] / static_cast<double>(n_));
  return m;
}

std::vector<float> ChannelStats::stddev(bool unbiased) const {
  const int64_t den = unbiased ? n_ - 1 : n_;
  if (den < 1) fail("ChannelStats::stddev: {} rows accumulated (need {} for this estimate)", n_, unbiased ? 2 : 1);
  std::vector<float> s(static_cast<size_t>(d_));
  const double n = static_cast<double>(n_);
  for (int c = 0; c < d_; ++c) {
    const double ss = std::max(0.0, s2_[c] - s1_[c] * s1_[c] / n);
    s[c] = static_cast<float>(std::sqrt(ss / static_cast<double>(den)));
  }
  return s;
}

}  // namespace kvs::math
