#include "press/math/uncomp_groups.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "press/math/apportion.h"

namespace kvs::math {

std::vector<int> uncomp_group_sizes(int n_heads, int m) {
  if (n_heads < 0) fail("uncomp: {} heads is negative", n_heads);
  if (m < 1) fail("uncomp: {} groups (expected >= 1)", m);
  std::vector<int> s(static_cast<size_t>(m), 0);
  if (n_heads < m) {
    // Fewer heads than groups: the heads' ranks spread over the whole ladder, rank r (0 = the
    // largest erank) in group round(r (M - 1) / (n - 1)), so the budgets still span N_1 .. N_M.
    // The step (M - 1) / (n - 1) >= 1, so no two ranks share a group.
    for (int r = 0; r < n_heads; ++r)
      ++s[static_cast<size_t>(n_heads == 1 ? 0 : std::lround(static_cast<double>(r) * (m - 1) / (n_heads - 1)))];
    return s;
  }
  for (int g = 0; g < m; ++g) s[static_cast<size_t>(g)] = n_heads / m;
  for (int g = 0; g < n_heads % m; ++g) ++s[static_cast<size_t>(g)];
  return s;
}

std::vector<int> uncomp_assign_head_groups(std::span<const double> erank, int m) {
  const int n = static_cast<int>(erank.size());
  for (int h = 0; h < n; ++h)
    if (!std::isfinite(erank[h])) fail("uncomp_assign_head_groups: erank of head {} is {}", h, erank[h]);
  const std::vector<int> sizes = uncomp_group_sizes(n, m);
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return erank[a] > erank[b]; });
  std::vector<int> label(static_cast<size_t>(n));
  int pos = 0;
  for (int g = 0; g < m; ++g)
    for (int i = 0; i < sizes[g]; ++i) label[order[pos++]] = g;
  return label;
}

std::vector<int> uncomp_majority_vote(std::span<const int> labels, int n_samples, int n_heads, int m, VoteMode mode) {
  if (n_samples < 1) fail("uncomp_majority_vote: {} samples (expected >= 1)", n_samples);
  if (labels.size() != static_cast<size_t>(n_samples) * static_cast<size_t>(std::max(n_heads, 0)))
    fail("uncomp_majority_vote: {} labels for {} samples x {} heads", labels.size(), n_samples, n_heads);
  const std::vector<int> sizes = uncomp_group_sizes(n_heads, m);
  // count[h][g]
  std::vector<int> count(static_cast<size_t>(n_heads) * m, 0);
  for (int s = 0; s < n_samples; ++s)
    for (int h = 0; h < n_heads; ++h) {
      const int g = labels[static_cast<size_t>(s) * n_heads + h];
      if (g < 0 || g >= m) fail("uncomp_majority_vote: sample {} head {} has label {} (expected 0..{})", s, h, g, m - 1);
      ++count[static_cast<size_t>(h) * m + g];
    }
  std::vector<int> out(static_cast<size_t>(n_heads), -1);
  if (mode == VoteMode::PerHead) {
    for (int h = 0; h < n_heads; ++h) {
      const int* c = count.data() + static_cast<size_t>(h) * m;
      out[h] = static_cast<int>(std::max_element(c, c + m) - c);  // first maximum: larger-budget group
    }
    return out;
  }
  std::vector<int> remaining(static_cast<size_t>(n_heads));
  std::iota(remaining.begin(), remaining.end(), 0);
  for (int g = m - 1; g >= 0; --g) {
    std::stable_sort(remaining.begin(), remaining.end(), [&](int a, int b) {
      return count[static_cast<size_t>(a) * m + g] > count[static_cast<size_t>(b) * m + g];
    });
    for (int i = 0; i < sizes[g]; ++i) out[remaining[i]] = g;
    remaining.erase(remaining.begin(), remaining.begin() + sizes[g]);
    std::sort(remaining.begin(), remaining.end());  // ties keep favouring the lower head index
  }
  return out;
}

std::vector<int> uncomp_layer_groups(std::span<const double> layer_erank, double eps) {
  if (!std::isfinite(eps)) fail("uncomp_layer_groups: eps {} is not finite", eps);
  std::vector<int> g(layer_erank.size(), 0);
  for (size_t i = 0; i < layer_erank.size(); ++i) {
    if (!std::isfinite(layer_erank[i])) fail("uncomp_layer_groups: erank of layer {} is {}", i, layer_erank[i]);
    if (i == 0) continue;
    const double drop = layer_erank[i - 1] - layer_erank[i];  // Δc_{i-1}, Eq. 8
    g[i] = g[i - 1] + (drop > eps ? 1 : 0);
  }
  return g;
}

std::vector<int64_t> uncomp_stage_tokens(int n_groups, int64_t n_tokens, int64_t step, int64_t min_keep) {
  if (n_groups < 1) fail("uncomp_stage_tokens: {} layer groups (expected >= 1)", n_groups);
  if (n_tokens < 0 || step < 0 || min_keep < 0)
    fail("uncomp_stage_tokens: n_tokens {}, step {}, min_keep {} (expected >= 0)", n_tokens, step, min_keep);
  std::vector<int64_t> out(static_cast<size_t>(n_groups));
  for (int i = 0; i < n_groups; ++i)
    out[i] = std::min(n_tokens, std::max(min_keep, n_tokens - static_cast<int64_t>(i) * step));
  return out;
}

std::vector<double> uncomp_stepped_sizes(int m, double n1, double dn) {
  if (m < 1) fail("uncomp_stepped_sizes: {} groups (expected >= 1)", m);
  if (!std::isfinite(n1) || !std::isfinite(dn)) fail("uncomp_stepped_sizes: N_1 = {}, step = {} (expected finite)", n1, dn);
  std::vector<double> s(static_cast<size_t>(m));
  for (int g = 0; g < m; ++g) {
    s[g] = n1 - g * dn;
    if (!(s[g] > 0))
      fail("uncomp_stepped_sizes: group {} would get N = {} - {} * {} = {} (expected > 0; lower the step or the group count)",
           g + 1, n1, g, dn, s[g]);
  }
  return s;
}

std::vector<int64_t> uncomp_head_budgets(std::span<const int> labels, int m, int64_t total,
                                         std::span<const int64_t> caps, double n1, double dn) {
  const std::vector<double> sizes = uncomp_stepped_sizes(m, n1, dn);
  std::vector<double> w(labels.size());
  for (size_t h = 0; h < labels.size(); ++h) {
    if (labels[h] < 0 || labels[h] >= m) fail("uncomp_head_budgets: head {} has group {} (expected 0..{})", h, labels[h], m - 1);
    w[h] = sizes[labels[h]];
  }
  return apportion(w, total, caps);
}

}  // namespace kvs::math
