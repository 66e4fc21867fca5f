// Top-k selection per head: protected tokens first (sinks, request window), then — with a recent
// share f > 0 (H2O, D2O) — the newest round(f * budget) slots, then the highest scores (ties: the
// more recent slot): exactly budget[i] slots, returned in slot order.
#pragma once
#include "press/press.h"

namespace kvs {

class TopKSelector : public Selector {
 public:
  explicit TopKSelector(double recent_share = 0.0) : recent_share_(recent_share) {}
  std::string name() const override { return recent_share_ > 0 ? "topk+recent" : "topk"; }
  CacheEdit select(const Scores& scores, const Budgets& budgets, const PressEnv& env) const override;
  double recent_share() const { return recent_share_; }

 private:
  double recent_share_;
};

// Indices of the k highest of `s` among slots not in `exclude`, ties toward higher index, NaN
// ranked lowest (press/select/score_order.h).
std::vector<int32_t> top_k_slots(const std::vector<float>& s, int32_t k, const std::vector<bool>& exclude);

}  // namespace kvs
