#include "press/math/gvote_math.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/ops.h"

namespace kvs::math {

int64_t gvote_top_p_size(std::span<const float> probs, double p_nuc) {
  const int64_t n = static_cast<int64_t>(probs.size());
  if (std::isnan(p_nuc)) fail("gvote_top_p_size: p_nuc is NaN");
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(probs[i]) || probs[i] < 0) fail("gvote_top_p_size: probability {} is {}", i, probs[i]);
  if (n == 0) return 0;
  if (p_nuc >= 1.0) return n;
  std::vector<float> s(probs.begin(), probs.end());
  std::sort(s.begin(), s.end(), std::greater<>());
  double cum = 0.0;
  int64_t below = 0;  // sorted entries whose cumulative mass is still < p
  for (int64_t i = 0; i < n; ++i) {
    cum += s[i];
    if (cum < p_nuc)
      ++below;
    else
      break;
  }
  return std::min<int64_t>(below + 1, n);
}

ChannelStats::ChannelStats(int d) : d_(d) {
  if (d < 1) fail("ChannelStats: dimension {} (expected >= 1)", d);
  shift_.assign(static_cast<size_t>(d), 0.0);
  s1_.assign(static_cast<size_t>(d), 0.0);
  s2_.assign(static_cast<size_t>(d), 0.0);
}

void ChannelStats::add(std::span<const float> rows, int64_t n_rows, int64_t row_stride) {
  if (row_stride == 0) row_stride = d_;
  if (n_rows < 0 || row_stride < d_) fail("ChannelStats::add: {} rows of stride {} for dimension {}", n_rows, row_stride, d_);
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

std::vector<float> gvote_sample_hidden(std::span<const float> mu, std::span<const float> sigma, int n_samples,
                                       uint64_t seed) {
  if (mu.size() != sigma.size()) fail("gvote_sample_hidden: mean has {} channels, std {}", mu.size(), sigma.size());
  if (n_samples < 0) fail("gvote_sample_hidden: {} samples is negative", n_samples);
  for (size_t c = 0; c < sigma.size(); ++c)
    if (!std::isfinite(mu[c]) || !std::isfinite(sigma[c]) || sigma[c] < 0)
      fail("gvote_sample_hidden: channel {} has mean {} and std {}", c, mu[c], sigma[c]);
  NormalRng g(seed);
  const size_t d = mu.size();
  std::vector<float> h(static_cast<size_t>(n_samples) * d);
  for (int s = 0; s < n_samples; ++s)
    for (size_t c = 0; c < d; ++c) h[s * d + c] = static_cast<float>(mu[c] + sigma[c] * g.next());
  return h;
}

std::vector<float> gvote_average_cos_sin(std::span<const float> inv_freq, int64_t start_pos, int n_future) {
  if (n_future < 1) fail("gvote_average_cos_sin: n_future = {} (expected >= 1)", n_future);
  if (start_pos < 0) fail("gvote_average_cos_sin: start position {} is negative", start_pos);
  std::vector<float> cs(inv_freq.size() * 2);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    double c = 0.0, s = 0.0;
    for (int t = 0; t < n_future; ++t) {
      const double a = static_cast<double>(start_pos + t) * inv_freq[i];  // as the engine does
      c += std::cos(a);
      s += std::sin(a);
    }
    cs[2 * i] = static_cast<float>(c / n_future);
    cs[2 * i + 1] = static_cast<float>(s / n_future);
  }
  return cs;
}

void gvote_vote_top_b(std::span<const float> logits, int64_t b, std::vector<uint8_t>& keep) {
  const int64_t n = static_cast<int64_t>(logits.size());
  if (static_cast<int64_t>(keep.size()) != n) fail("gvote_vote_top_b: keep mask has {} entries for {} keys", keep.size(), n);
  b = std::min(b, n);
  if (b <= 0) return;
  if (b == n) {
    std::fill(keep.begin(), keep.end(), uint8_t{1});
    return;
  }
  std::vector<int32_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int32_t x, int32_t y) { return logits[x] > logits[y] || (logits[x] == logits[y] && x > y); };
  std::nth_element(idx.begin(), idx.begin() + (b - 1), idx.end(), better);
  for (int64_t i = 0; i < b; ++i) keep[idx[i]] = 1;
}

std::vector<uint8_t> gvote_union_votes(std::span<const float> q, int n_group, int n_samples,
                                       std::span<const float> keys, int64_t n, int head_dim, int64_t key_stride,
                                       std::span<const int64_t> budgets) {
  if (n_group < 1 || n_samples < 1 || head_dim < 1 || n < 0)
    fail("gvote_union_votes: {} heads, {} samples, head_dim {}, {} keys", n_group, n_samples, head_dim, n);
  if (key_stride == 0) key_stride = head_dim;
  if (key_stride < head_dim) fail("gvote_union_votes: key stride {} below head_dim {}", key_stride, head_dim);
  if (q.size() != static_cast<size_t>(n_group) * n_samples * head_dim)
    fail("gvote_union_votes: {} query floats for {} heads x {} samples x {}", q.size(), n_group, n_samples, head_dim);
  if (n > 0 && static_cast<int64_t>(keys.size()) < (n - 1) * key_stride + head_dim)
    fail("gvote_union_votes: {} key floats for {} keys of stride {}", keys.size(), n, key_stride);
  if (budgets.size() != static_cast<size_t>(n_group))
    fail("gvote_union_votes: {} budgets for {} query heads", budgets.size(), n_group);
  std::vector<uint8_t> keep(static_cast<size_t>(n), 0);
  std::vector<float> logits(static_cast<size_t>(n));
  for (int g = 0; g < n_group; ++g) {
    if (budgets[g] < 0) fail("gvote_union_votes: budget of head {} is {}", g, budgets[g]);
    for (int s = 0; s < n_samples; ++s) {
      const float* qs = q.data() + (static_cast<size_t>(g) * n_samples + s) * head_dim;
      for (int64_t j = 0; j < n; ++j) logits[j] = kernels::dot_f32(qs, keys.data() + j * key_stride, head_dim);
      gvote_vote_top_b(logits, budgets[g], keep);
    }
  }
  return keep;
}

}  // namespace kvs::math
