// D2O (Wan et al., "D2O: Dynamic Discriminative Operations for Efficient Long-Context Inference of
// Large Language Models", arXiv:2406.13035; ../shared/papers/d2o.txt §4), as press parts:
//
//   layer level  D2oAllocator ("d2o", usable with any scorer): F_l = Var of the prompt attention's
//                column sums (Eq. 4), min-max normalised over the layer's heads as the official
//                code (density=minmax, the default; density=raw: Eq. 4 literally), α_l =
//                softmax(-F)_l L ρ (Eq. 5), S_l = α_l S, each layer growing to its S_l while
//                decoding. The official code's layer sizes (ratios clamped to [0.01, 1], fixed at
//                the first compression, layers 0, 1, L-1 never compressed) are layers=official,
//                its normalisation over query heads density=minmax-query; `--opt preset=official`
//                selects every official setting.
//   token level  accumulated attention (Eq. 6, H2O's scorer: column sums over every query seen,
//                prefill and decode) + D2oSelector: T sinks (the request's sinks) + the M most
//                recent + the top N by score, N:M = 3:1 (Eqs. 7-8); with an EveryN trigger at every
//                decode step, so memory stays at the budget however long the generation runs.
//   merging      D2oMerger: each evicted pair's nearest kept pair by key cosine (Eq. 9); an EMA
//                threshold per (layer, KV head), or per layer (threshold=layer, the official
//                code), kept in the sequence's PressState (Eq. 10, β 0.7);
//                evicted pairs under it are dropped, the others merged into their nearest kept pair
//                with the weights of Eq. 12 (keys and values alike; merge_mass: a row standing for
//                m tokens weighs m), or the official code's similarity-weighted scatter-mean
//                (merge_weights=official). merge=false is the ablation without merging.
//
// The numerics are press/math/d2o_math.h (its header lists the choices made where the paper is
// open, with the official code's behaviour); the choices specific to these parts are beside them
// in d2o.cpp.
#pragma once
#include <span>
#include <string>
#include <vector>

#include "press/math/d2o_math.h"
#include "press/registry.h"

namespace kvs {

// PressState keys (finite numbers only: .kvc headers hold the state as JSON).
inline constexpr const char* kD2oLayerF = "d2o.layer_F";  // [n_layer] Eq. 4, fixed at the first compression
// [n_layer] tokens per KV head Eq. 5 gives each layer at the last compression (layers=paper;
// informational: budgets are recomputed from F and the request at every compression).
inline constexpr const char* kD2oLayerTarget = "d2o.layer_target";
// [n_layer] layers=official: tokens per KV head fixed at the first compression; -1 = never compressed.
inline constexpr const char* kD2oLayerFixed = "d2o.layer_fixed";
inline constexpr const char* kD2oTau = "d2o.tau";         // [n_layer * n_head_kv] τ of Eq. 10
inline constexpr const char* kD2oTauSet = "d2o.tau_set";  // [n_layer * n_head_kv] 1 once τ exists
// threshold=layer (preset=official): one τ per layer, as the official code.
inline constexpr const char* kD2oLayerTau = "d2o.layer_tau";         // [n_layer]
inline constexpr const char* kD2oLayerTauSet = "d2o.layer_tau_set";  // [n_layer]

// Eq. 4 from the collected column sums: per (layer, KV head) the unbiased variance of the column
// sums divided by the GQA group size (the group-mean column sums, i.e. one query head's scale),
// then per layer the mean over its KV heads (Paper) or the mean of the min-max normalised head
// variances (OfficialMinMax). OfficialMinMaxQueryHeads: per query head, the variance of its own
// column sums (col_sum_query_heads statistics), min-max normalised over the layer's query heads
// (the official code). Needs col_sum statistics. [n_layer].
std::vector<double> d2o_layer_F(const StatsCollector& stats, math::D2oDensity density);

// Eq. 9 for a few evicted pairs (a decode step evicts one per head): the nearest of the kept slots
// `kept` of head (layer, kvh), reading their keys in place in the cache (one pass over each row,
// no copies), for evicted keys [n_evicted][head_dim]. index[i] is a position in `kept`. Same
// result as math::d2o_nearest on copies (zero keys have similarity 0; ties: lowest kept index).
math::D2oNearest d2o_nearest_in_cache(const KvCache& cache, int layer, int kvh, std::span<const int32_t> kept,
                                      std::span<const float> evicted, int64_t n_evicted);

// How the layer sizes evolve after the first compression.
//   Paper: every compression gives layer l the share softmax(-F)_l of the request's total (Eq. 5),
//          each head capped only at what it holds; a layer below its share keeps everything and
//          grows toward it as tokens arrive, the others giving way — so with streaming the sizes
//          converge to S_l = α_l S and stay there (§4.2.1: "maintain the compressed cache size
//          S_l for each layer").
//   Official: the official code's (modeling_llama3_new.py / modeling_llama3_7b_13b_d2o.py): at
//          the first compression r_l = clamp(softmax(-F)_l L ρ, 0.01, 1), tokens per head fixed
//          at int(S0 r_l / 2) heavy + int(S0 r_l / 2) recent (S0: what the head held then),
//          never redistributed; layers 0, 1 and L-1, and layers whose size reaches S0 - 1, are
//          never compressed (they grow without bound: memory exceeds the request's total).
enum class D2oLayers { Paper, Official };

// Layer budgets of Eq. 5. The total is the request's (round(keep x tokens held) or max_tokens x
// heads); layer l gets the share softmax(-F)_l of it (largest remainder, each head capped at what
// it holds, the excess redistributed), split evenly over its KV heads; protected tokens always
// fit. F is computed at the sequence's first compression (the prompt's attention) and kept in its
// PressState (kD2oLayerF); later compressions reuse it.
class D2oAllocator : public BudgetAllocator {
 public:
  explicit D2oAllocator(math::D2oDensity density = math::D2oDensity::OfficialMinMax, D2oLayers layers = D2oLayers::Paper)
      : density_(density), layers_(layers) {}
  std::string name() const override { return "d2o"; }
  Needs needs() const override {
    return {.stats = {.col_sum = true, .col_sum_query_heads = density_ == math::D2oDensity::OfficialMinMaxQueryHeads}};
  }
  Allocation allocate(const Scores& scores, const PressEnv& env) const override;
  math::D2oDensity density() const { return density_; }
  D2oLayers layers() const { return layers_; }

 private:
  math::D2oDensity density_;
  D2oLayers layers_;
};

// Per head with budget b: the protected slots (T sinks, the request's window), then the newest
// M = round(recent_share x (b - protected)) slots, then the N = b - protected - M best scores.
// recent_share 0.25 is N:M = 3:1.
class D2oSelector : public Selector {
 public:
  explicit D2oSelector(double recent_share = 0.25) : recent_share_(recent_share) {}
  std::string name() const override { return "d2o_select"; }
  CacheEdit select(const Scores& scores, const Budgets& budgets, const PressEnv& env) const override;

 private:
  double recent_share_;
};

// Folds the evicted pairs of every active head into kept ones (Eqs. 9-12) and updates the head's
// EMA threshold in env.state (required: a merger without a sequence state is refused). use_mass:
// Eq. 12 counts a row that already stands for m tokens (its cache mass) as m members.
// per_layer (the official code): one threshold per layer, the EMA of the mean max similarity
// over the layer's heads; the k-th evicted pair of each head is merged iff the mean over the
// heads of their k-th max similarity reaches it.
class D2oMerger : public Merger {
 public:
  D2oMerger(double beta = 0.7, math::D2oMerge mode = math::D2oMerge::PaperEq12, bool use_mass = false,
            bool per_layer = false)
      : beta_(beta), mode_(mode), use_mass_(use_mass), per_layer_(per_layer) {}
  bool per_layer() const { return per_layer_; }
  std::string name() const override { return mode_ == math::D2oMerge::PaperEq12 ? "d2o_merge" : "d2o_merge_official"; }
  void merge(const Scores& scores, const PressEnv& env, CacheEdit& edit) const override;

 private:
  double beta_;
  math::D2oMerge mode_;
  bool use_mass_;
  bool per_layer_;
};

void add_d2o_presses(std::vector<PressInfo>& presses);
void add_d2o_allocators(std::vector<AllocatorInfo>& allocators);

}  // namespace kvs
