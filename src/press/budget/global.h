// Budgets from one ranking of scores across heads (and layers): the total a uniform allocation
// would keep goes to the best-scored tokens wherever they are.
//
//  - scope Model ("global"): one ranking over every (layer, KV head, slot) of the model — KVzip's
//    pair-level eviction with non-uniform head budgets, the paper's default (Kim et al. 2025,
//    ../shared/papers/kvzip.txt §3; official code attention/score.py `_threshold`: one sort of the
//    scores stacked over all layers and heads). Scores must be comparable across layers (KVzip's
//    are attention probabilities).
//  - scope Layer ("global_layer"): one ranking per layer over its KV heads, no per-head floor —
//    Compactor's head-adaptive selection (Chari & Van Durme 2025, §4 "head-adaptive compression";
//    compactor-vllm `scores_to_retain_indices`: top-k over (token, head) of a layer); the same as
//    the `adakv` allocator with alpha = 0.
//
// Total: the sum over the scope's heads of what the uniform allocator gives each (round(keep x
// len) or max_tokens, at least its protected tokens), so every allocator keeps the same number of
// tokens at the same keep ratio. Protected tokens (sinks, recent window) are kept first and count
// toward the total; the rest goes to the highest scores. Ties: the earlier head (layer-major), then
// the later slot (the selector's tie-break: more recent first) — so that KVzip's head-level scores,
// constant over a head, keep whole heads in score order and the most recent tokens of the one head
// on the boundary. NaN scores rank last. Exact where KVzip's code is approximate: it keeps the
// pairs scoring strictly above the score at rank keep x total, which keeps fewer when scores tie.
#pragma once
#include "press/press.h"

namespace kvs {

class GlobalAllocator : public BudgetAllocator {
 public:
  enum class Scope { Model, Layer };
  explicit GlobalAllocator(Scope scope = Scope::Model) : scope_(scope) {}
  std::string name() const override { return scope_ == Scope::Model ? "global" : "global_layer"; }
  Allocation allocate(const Scores& scores, const PressEnv& env) const override;

 private:
  Scope scope_;
};

}  // namespace kvs
