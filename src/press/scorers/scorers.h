// The baseline scorers. Each file names its paper; scores are "higher = keep".
#pragma once
#include "press/press.h"

namespace kvs {

// StreamingLLM (Xiao et al. 2023, arXiv:2309.17453): attention sinks + a sliding window. The
// score is the position (most recent first); sinks come from CompressRequest::sinks.
class StreamingScorer : public Scorer {
 public:
  std::string name() const override { return "streaming_llm"; }
  Scores score(const ScoreContext& ctx) const override;
};

// H2O (Zhang et al. 2023, arXiv:2306.14048): heavy hitters by accumulated attention (column sums
// over every query seen, prefill and decode). The press keeps `recent_fraction` of each head's
// budget for the newest tokens through its selector (TopKSelector's recent share), so the scorer
// knows nothing of budgets.
class H2oScorer : public Scorer {
 public:
  std::string name() const override { return "h2o"; }
  Needs needs() const override { return {.stats = {.col_sum = true}}; }
  Scores score(const ScoreContext& ctx) const override;
};

// SnapKV (Li et al. 2024, arXiv:2404.14469): attention of the last `window` queries (the
// observation window) to each key, averaged over those queries and the query heads of the GQA
// group, smoothed by 1-D pooling (avg or max, kernel `kernel`); the window itself is kept.
class SnapKvScorer : public Scorer {
 public:
  SnapKvScorer(int window = 64, int kernel = 5, bool max_pool = false) : window_(window), kernel_(kernel), max_pool_(max_pool) {}
  std::string name() const override { return "snapkv"; }
  Needs needs() const override { return {.stats = {.window = window_}}; }
  Scores score(const ScoreContext& ctx) const override;
  int observation_window() const override { return window_; }

 private:
  int window_, kernel_;
  bool max_pool_;
};

// TOVA (Oren et al. 2024, arXiv:2401.06104): the last query's attention averaged over ALL query
// heads of the layer (the published policy, and kvpress's, reviewed by TOVA's authors), so every
// KV head of a layer scores — and evicts — the same tokens. per_head: average over the query
// heads of each KV head's group instead.
class TovaScorer : public Scorer {
 public:
  explicit TovaScorer(bool per_head = false) : per_head_(per_head) {}
  std::string name() const override { return per_head_ ? "tova_per_head" : "tova"; }
  Needs needs() const override { return {.stats = {.window = 1}}; }
  Scores score(const ScoreContext& ctx) const override;
  int observation_window() const override { return 1; }

 private:
  bool per_head_;
};

// KeyDiff (Park et al. 2025, arXiv:2504.15364): keys least similar to the head's mean normalised
// key (the anchor) are kept: score = -cos(k, anchor).
class KeyDiffScorer : public Scorer {
 public:
  std::string name() const override { return "keydiff"; }
  Scores score(const ScoreContext& ctx) const override;
};

// Knorm (Devoto et al. 2024, arXiv:2406.11430): keys with a small L2 norm attract attention;
// score = -||k||.
class KnormScorer : public Scorer {
 public:
  std::string name() const override { return "knorm"; }
  Scores score(const ScoreContext& ctx) const override;
};

// Random scores (a floor every method should beat), reproducible from the request seed.
class RandomScorer : public Scorer {
 public:
  std::string name() const override { return "random"; }
  Scores score(const ScoreContext& ctx) const override;
};

// Empty scores shaped like the cache.
Scores make_scores(const KvCache& cache);
// Attention of the stored window queries of `layer` to every slot of each KV head, averaged over
// the window queries and the query heads of the group: out[kvh][slot].
std::vector<std::vector<float>> window_attention(const ScoreContext& ctx, int layer, int last_n);

}  // namespace kvs
