// Budget allocators: how many tokens each (layer, KV head) keeps.
#pragma once
#include "press/press.h"

namespace kvs {

// Every head keeps round(keep * its length) tokens (or max_tokens).
class UniformAllocator : public BudgetAllocator {
 public:
  std::string name() const override { return "uniform"; }
  Allocation allocate(const Scores& scores, const PressEnv& env) const override;
};

// PyramidKV (Cai et al. 2024, arXiv:2406.02069), as the official code allocates: the observation
// window W is kept in every layer on top of a budget that decreases linearly with depth. With A
// the average per-head budget and B = A - W what is left beyond the window, the first layer gets
// W + max and the last W + min, min = B / beta, max = 2B - min, so the total is the uniform one;
// when max would exceed the tokens beyond the window, max is capped there and min raised to keep
// the total. Falls back to uniform when A <= W (no room for a pyramid beyond the window). Per-
// layer budgets are rounded cumulatively, so each head column sums to round(L * A) exactly.
// `window` is the scorer's observation window (SnapKV's 64); the request's protected window
// counts too (the larger one is used).
class PyramidAllocator : public BudgetAllocator {
 public:
  explicit PyramidAllocator(double beta = 20.0, int window = 0) : beta_(beta), window_(window) {}
  std::string name() const override { return "pyramid"; }
  Allocation allocate(const Scores& scores, const PressEnv& env) const override;

 private:
  double beta_;
  int window_;
};

// AdaKV (Feng et al. 2024, arXiv:2407.11550): within each layer, the layer's total budget goes to
// the highest scores across all its KV heads (head-adaptive), after a safeguard floor of
// alpha * (average head budget) tokens per head. Works with any scorer whose scores are
// comparable across heads (attention mass).
class AdaKvAllocator : public BudgetAllocator {
 public:
  explicit AdaKvAllocator(double alpha = 0.2) : alpha_(alpha) {}
  std::string name() const override { return "adakv"; }
  Allocation allocate(const Scores& scores, const PressEnv& env) const override;

 private:
  double alpha_;
};

// Adaptive: each head keeps the fewest tokens whose scores hold `mass` of the head's total score
// mass (scores clamped at 0 and normalised per head: the top-p "nucleus" of attention, as GVote's
// B_step measures a query's), plus its protected tokens; the keep ratio is whatever that comes to.
// Meant for scorers whose scores are attention mass (snapkv, tova, h2o); slots a scorer forces in
// (+inf, SnapKV's window) are kept on top; a head whose scores are all <= 0 keeps its protected
// and forced tokens only.
class NucleusAllocator : public BudgetAllocator {
 public:
  explicit NucleusAllocator(double mass = 0.9) : mass_(mass) {}
  std::string name() const override { return "nucleus"; }
  Allocation allocate(const Scores& scores, const PressEnv& env) const override;
  bool adaptive() const override { return true; }

 private:
  double mass_;
};

// Per-head budget from the request: round(keep * len) or max_tokens, within [protected, len].
// The request must carry a budget (fixed allocators only).
int32_t head_budget(const HeadCache& h, int32_t n_past, const CompressRequest& req);

}  // namespace kvs
