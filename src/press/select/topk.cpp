#include "press/select/topk.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "press/select/score_order.h"

namespace kvs {

std::vector<int32_t> top_k_slots(const std::vector<float>& s, int32_t k, const std::vector<bool>& exclude) {
  std::vector<int32_t> idx;
  idx.reserve(s.size());
  for (int32_t i = 0; i < static_cast<int32_t>(s.size()); ++i)
    if (exclude.empty() || !exclude[static_cast<size_t>(i)]) idx.push_back(i);
  k = std::min<int32_t>(k, static_cast<int32_t>(idx.size()));
  if (k <= 0) return {};
  auto better = [&](int32_t a, int32_t b) { return ranks_above(s[a], a, s[b], b); };
  std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), better);
  idx.resize(static_cast<size_t>(k));
  return idx;
}

CacheEdit TopKSelector::select(const Scores& scores, const Budgets& budgets, const PressEnv& env) const {
  const KvCache& c = env.cache;
  const KvLayout& l = c.layout();
  CacheEdit edit(l);
  for (int i = 0; i < l.n_heads_total(); ++i) {
    const HeadCache& h = c.head(i / l.n_head_kv, i % l.n_head_kv);
    const int32_t b = budgets[static_cast<size_t>(i)];
    if (b >= h.len()) continue;  // nothing to drop
    HeadEdit& e = edit.heads[static_cast<size_t>(i)];
    e.active = true;
    std::vector<bool> taken = protected_slots(h, c.n_past(), env.request);
    int32_t n_taken = 0;
    for (int32_t s = 0; s < h.len(); ++s) n_taken += taken[s];
    // The recent share: the newest slots, up to round(f * budget) of them, within the budget.
    const int32_t recent = static_cast<int32_t>(std::lround(recent_share_ * b));
    for (int32_t s = h.len() - 1, n = 0; s >= 0 && n < recent && n_taken < b; --s, ++n)
      if (!taken[s]) taken[s] = true, ++n_taken;
    for (int32_t s = 0; s < h.len(); ++s)
      if (taken[s]) e.keep.push_back(s);
    const int32_t rest = b - static_cast<int32_t>(e.keep.size());
    if (rest > 0) {
      auto top = top_k_slots(scores.s[static_cast<size_t>(i)], rest, taken);
      e.keep.insert(e.keep.end(), top.begin(), top.end());
    }
    std::sort(e.keep.begin(), e.keep.end());
  }
  return edit;
}

}  // namespace kvs
