#include "press/budget/allocators.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "press/select/score_order.h"

namespace kvs {

int32_t head_budget(const HeadCache& h, int32_t n_past, const CompressRequest& req) {
  KVS_ASSERT(req.has_budget());
  const int32_t len = h.len();
  int32_t b = req.max_tokens > 0 ? req.max_tokens : static_cast<int32_t>(std::lround(*req.keep * len));
  b = std::min(b, len);
  return std::max(b, std::min(len, count_protected(h, n_past, req)));
}

Allocation UniformAllocator::allocate(const Scores&, const PressEnv& env) const {
  const KvCache& c = env.cache;
  const KvLayout& l = c.layout();
  Allocation a;
  a.budgets.resize(static_cast<size_t>(l.n_heads_total()));
  for (int i = 0; i < l.n_heads_total(); ++i)
    a.budgets[static_cast<size_t>(i)] = head_budget(c.head(i / l.n_head_kv, i % l.n_head_kv), c.n_past(), env.request);
  return a;
}

Allocation PyramidAllocator::allocate(const Scores& scores, const PressEnv& env) const {
  const KvCache& c = env.cache;
  const CompressRequest& req = env.request;
  const KvLayout& l = c.layout();
  const int L = l.n_layer;
  Allocation a;
  a.budgets.resize(static_cast<size_t>(l.n_heads_total()));
  for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
    // One column of heads (the same KV head index in every layer). The average budget and the
    // room beyond the window follow the first layer's head length (heads of a prefilled cache
    // all have the same length; after uneven compression each layer is clamped to its own).
    const HeadCache& h0 = c.head(0, kvh);
    const double len = h0.len();
    const double A = req.max_tokens > 0 ? std::min<double>(req.max_tokens, len) : *req.keep * len;
    const double W = std::min<double>(std::max(window_, req.window), len);
    const double B = A - W;
    if (L == 1 || B <= 0) {
      for (int layer = 0; layer < L; ++layer)
        a.budgets[static_cast<size_t>(layer * l.n_head_kv + kvh)] = head_budget(c.head(layer, kvh), c.n_past(), req);
      continue;
    }
    double lo = B / beta_, hi = 2.0 * B - lo;
    if (hi > len - W) {  // cap the first layer at everything beyond the window; raise the last
      hi = len - W;
      lo = 2.0 * B - hi;
    }
    double cum = 0;
    int64_t given = 0;
    for (int layer = 0; layer < L; ++layer) {
      cum += W + hi - layer * (hi - lo) / (L - 1);
      const int64_t upto = std::llround(cum);
      const HeadCache& h = c.head(layer, kvh);
      int32_t v = static_cast<int32_t>(std::clamp<int64_t>(upto - given, 0, h.len()));
      v = std::max(v, std::min(h.len(), count_protected(h, c.n_past(), req)));
      a.budgets[static_cast<size_t>(layer * l.n_head_kv + kvh)] = v;
      given = upto;
    }
  }
  return a;
}

Allocation AdaKvAllocator::allocate(const Scores& scores, const PressEnv& env) const {
  const KvCache& c = env.cache;
  const CompressRequest& req = env.request;
  const KvLayout& l = c.layout();
  Allocation alloc;
  Budgets& b = alloc.budgets;
  b.assign(static_cast<size_t>(l.n_heads_total()), 0);
  constexpr float kForced = std::numeric_limits<float>::infinity();
  for (int layer = 0; layer < l.n_layer; ++layer) {
    // The layer's total budget is what uniform allocation would give it.
    int64_t total = 0;
    struct Cand {
      float s;
      int kvh;
      int32_t slot;
    };
    std::vector<Cand> cand;
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      const HeadCache& h = c.head(layer, kvh);
      const int32_t hb = head_budget(h, c.n_past(), req);
      total += hb;
      const auto& sc = scores.at(l, layer, kvh);
      const auto prot = protected_slots(h, c.n_past(), req);
      // Safeguard floor: each head's own top floor(alpha * budget) tokens are forced in.
      const int32_t floor_n = static_cast<int32_t>(alpha_ * hb);
      std::vector<int32_t> order(static_cast<size_t>(h.len()));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t bb) { return score_rank(sc[a]) > score_rank(sc[bb]); });
      std::vector<bool> forced(static_cast<size_t>(h.len()), false);
      for (int32_t i = 0; i < floor_n && i < h.len(); ++i) forced[static_cast<size_t>(order[i])] = true;
      for (int32_t s = 0; s < h.len(); ++s)
        cand.push_back({prot[s] || forced[s] ? kForced : score_rank(sc[s]), kvh, s});
    }
    // With an absolute budget the layer may spend max_tokens per head in total, however its heads
    // are currently distributed (heads below the budget must not shrink the layer's share).
    if (req.max_tokens > 0) total = static_cast<int64_t>(req.max_tokens) * l.n_head_kv;
    total = std::min<int64_t>(total, static_cast<int64_t>(cand.size()));
    std::nth_element(cand.begin(), cand.begin() + total, cand.end(), [](const Cand& a, const Cand& bb) {
      return a.s > bb.s || (a.s == bb.s && (a.kvh < bb.kvh || (a.kvh == bb.kvh && a.slot > bb.slot)));
    });
    for (int64_t i = 0; i < total; ++i) b[static_cast<size_t>(layer * l.n_head_kv + cand[i].kvh)]++;
    // Protected tokens beyond the layer total still survive (the selector keeps them).
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      const HeadCache& h = c.head(layer, kvh);
      auto& v = b[static_cast<size_t>(layer * l.n_head_kv + kvh)];
      v = std::max(v, std::min(h.len(), count_protected(h, c.n_past(), req)));
    }
  }
  return alloc;
}

Allocation NucleusAllocator::allocate(const Scores& scores, const PressEnv& env) const {
  const KvCache& c = env.cache;
  const KvLayout& l = c.layout();
  Allocation a;
  a.budgets.assign(static_cast<size_t>(l.n_heads_total()), 0);
  size_t kept = 0, total = 0;
  for (int i = 0; i < l.n_heads_total(); ++i) {
    const HeadCache& h = c.head(i / l.n_head_kv, i % l.n_head_kv);
    auto prot = protected_slots(h, c.n_past(), env.request);
    // Slots a scorer forces in (+inf: SnapKV's window) are kept like protected ones.
    const auto& sc = scores.s[static_cast<size_t>(i)];
    for (int32_t s = 0; s < h.len(); ++s)
      if (std::isinf(sc[static_cast<size_t>(s)]) && sc[static_cast<size_t>(s)] > 0) prot[s] = true;
    // Mass of the other slots, largest first.
    std::vector<double> m;
    double sum = 0;
    for (int32_t s = 0; s < h.len(); ++s)
      if (!prot[s]) {
        const double x = std::max(0.0f, sc[static_cast<size_t>(s)]);
        m.push_back(x);
        sum += x;
      }
    std::sort(m.begin(), m.end(), std::greater<>());
    int32_t n = 0;
    if (sum > 0) {
      double acc = 0;
      while (n < static_cast<int32_t>(m.size()) && acc < mass_ * sum) acc += m[static_cast<size_t>(n++)];
    }
    int32_t b = n;
    for (bool p : prot) b += p;
    a.budgets[static_cast<size_t>(i)] = b;
    kept += static_cast<size_t>(b);
    total += static_cast<size_t>(h.len());
  }
  a.keep_chosen = total ? static_cast<double>(kept) / static_cast<double>(total) : 1.0;
  return a;
}

}  // namespace kvs
