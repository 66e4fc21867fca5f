#include "press/math/gvote_math.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "press/select/score_order.h"
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
  auto better = [&](int32_t x, int32_t y) { return ranks_above(logits[x], x, logits[y], y); };
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
