#include "press/budget/global.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "press/budget/allocators.h"

namespace kvs {

Allocation GlobalAllocator::allocate(const Scores& scores, const PressEnv& env) const {
  const KvCache& c = env.cache;
  const CompressRequest& req = env.request;
  const KvLayout& l = c.layout();
  Allocation a;
  a.budgets.assign(static_cast<size_t>(l.n_heads_total()), 0);
  struct Cand {
    float s;
    int32_t head, slot;
  };
  auto better = [](const Cand& x, const Cand& y) {
    return x.s > y.s || (x.s == y.s && (x.head < y.head || (x.head == y.head && x.slot > y.slot)));
  };
  // Groups of heads ranked together: all of them, or one layer's.
  const int group = scope_ == Scope::Model ? l.n_heads_total() : l.n_head_kv;
  std::vector<Cand> cand;
  for (int first = 0; first < l.n_heads_total(); first += group) {
    int64_t total = 0, forced = 0;
    cand.clear();
    for (int i = first; i < first + group; ++i) {
      const HeadCache& h = c.head(i / l.n_head_kv, i % l.n_head_kv);
      total += head_budget(h, c.n_past(), req);
      const std::vector<bool> prot = protected_slots(h, c.n_past(), req);
      const std::vector<float>& sc = scores.s[static_cast<size_t>(i)];
      int32_t np = 0;
      for (int32_t s = 0; s < h.len(); ++s) {
        if (prot[static_cast<size_t>(s)]) {
          ++np;
          continue;
        }
        const float x = sc[static_cast<size_t>(s)];
        cand.push_back({std::isnan(x) ? -std::numeric_limits<float>::infinity() : x, i, s});
      }
      a.budgets[static_cast<size_t>(i)] = np;
      forced += np;
    }
    // With an absolute budget the group may spend max_tokens per head however its heads are
    // currently distributed (as AdaKV's allocator: heads below the budget must not shrink it).
    if (req.max_tokens > 0) total = std::max<int64_t>(total, static_cast<int64_t>(req.max_tokens) * group);
    const int64_t rest = std::clamp<int64_t>(total - forced, 0, static_cast<int64_t>(cand.size()));
    if (rest > 0 && rest < static_cast<int64_t>(cand.size()))
      std::nth_element(cand.begin(), cand.begin() + (rest - 1), cand.end(), better);
    for (int64_t k = 0; k < rest; ++k) a.budgets[static_cast<size_t>(cand[static_cast<size_t>(k)].head)]++;
  }
  return a;
}

}  // namespace kvs
