// UNComp (Xiong et al. 2025, "UNComp: Can Matrix Entropy Uncover Sparsity? — A Compressor Design
// from an Uncertainty-Aware Perspective", ../shared/papers/uncomp.txt; code menik1126/UNComp) as
// press parts. Numerics: press/math/matrix_entropy.h (Eqs. 1, 5, 6) and press/math/uncomp_groups.h
// (Algorithm 1, Eqs. 8-11); the choices specific to these parts are beside the code in uncomp.cpp.
//
// Preparation (§3.3.1, Algorithm 1; `kvshrink calibrate --press uncomp`, eval/calibrate_uncomp.cpp):
// d samples of WikiText-2 are prefilled; per sample, erank_k of every query head's covariance
// (from the collector's Gram statistics), the KV heads of each layer cut into M groups by erank;
// a majority vote over the samples gives each KV head its group; the layer values (Σ over the
// layer's query heads of the mean erank_k) give the layer groups by the erank drop (Eq. 8).
//
// Compression, two variants (`uncomp:variant=group|group-stage`):
//  - group (§3.3.3): per-head budgets stepped by group, N_{g+1} = N_g - Δn (Eq. 11, N_1 = 640,
//    Δn = 74), scaled to the requested keep ratio or token budget; each head keeps its top tokens
//    by the cumulative attention of the last l = 8 queries (pooled, window kept: the official
//    code); while decoding (trigger every:1) each head stays at its own size.
//  - group-stage (§3.3.2 + §3.3.3): the same, after a prefill whose hidden states are pruned: the
//    first layer group runs on every token; before the first layer of each later group the rows
//    are cut to that group's count (Eq. 10, stepping down to `stage_min` of the context) by the
//    previous layer's attention from the context's last token (the prefill runs layer-major, so
//    this holds for any -b); pruned tokens get no K/V in later layers.
//    The last l tokens, the sinks, the request's window and a query-aware question are never
//    pruned.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "press/math/matrix_entropy.h"
#include "press/math/uncomp_groups.h"
#include "press/registry.h"

namespace kvs {

// ---- calibration ------------------------------------------------------------------------------

// What the press reads back from `kvshrink calibrate --press uncomp`.
struct UncompCalibration {
  int groups = 0;                                 // M
  std::vector<std::vector<int>> kv_head_groups;   // [n_layer][n_head_kv]; 0 = largest erank_k / budget
  std::vector<int> layer_groups;                  // [n_layer]; 0 = the first (unpruned) group, non-decreasing
};

// Parses the calibration data (null: none stored). Throws kvs::Error naming the field, and saying
// how to make one, when it is missing, malformed or for another shape.
UncompCalibration uncomp_calibration(const nlohmann::json* data, int n_layer, int n_head_kv);

// The covariance whose spectrum is measured: Eq. 1 (the paper), or the official code's unit-norm
// token covariance (math::unit_norm_covariance).
enum class UncompCov { Eq1, UnitNorm };
// The layer values of Eq. 8: Erank = Σ over the layer's query heads of erank_k = exp(H_k) (Eq. 8
// as printed: Δc_i is a difference of eranks; the default); Entropy = Σ over the layer's query
// heads of H_k / ln D (entropy units; an earlier reading, which on every testbed model gave one
// layer group); OfficialErank = Σ over heads of exp(H_k / ln D), the scale of the official
// stage_division.py values, whose threshold is 1.
enum class UncompLayerValue { Erank, Entropy, OfficialErank };

struct UncompCalibrateOptions {
  int k = 0;                                       // top-k eigenvalues (Eq. 5); 0 = head_dim / 4 (official: 32)
  math::EntropyNorm norm = math::EntropyNorm::Trace;
  UncompCov cov = UncompCov::Eq1;
  int groups = 8;                                  // M
  math::VoteMode vote = math::VoteMode::Balanced;
  UncompLayerValue layer_value = UncompLayerValue::Erank;
  double eps = 0.3;                                // ε of Eq. 8, on the layer values' scale
  // Early stop: after at least min_samples (and then every check_every samples), stop when the
  // voted KV-head groups and the layer groups of the samples so far equal those of the samples
  // check_every earlier (the groups have stopped moving). 0 = run every sample.
  int check_every = 0;
  int min_samples = 0;
};

// k of Eq. 5 for a head dimension: k, or head_dim / 4 (at least 1) when k is 0 (the paper's 32
// of 128, Table 8).
int uncomp_resolve_k(int k, int head_dim);

// H_k (natural log) of every query head of one prefilled sample, from the collector's query Gram
// matrices (query_gram must have been requested; Eq. 1): [n_layer][n_head] row-major.
std::vector<double> uncomp_sample_entropy(const StatsCollector& stats, int n_layer, int k, math::EntropyNorm norm);

// Algorithm 1 + Eq. 8 from per-sample truncated entropies entropy[s][layer][qh] (n_samples x
// n_layer x n_head, row-major; erank = exp): the calibration data object (head / KV-head eranks
// and layer values averaged over samples (Eq. 7), the voted KV-head groups, the layer groups, and
// the same from the two halves of the samples with their agreement).
nlohmann::json uncomp_calibration_data(const std::vector<double>& entropy, int n_samples, int n_layer, int n_head,
                                       int n_head_kv, int head_dim, const UncompCalibrateOptions& o);

// ---- budgets and stages -----------------------------------------------------------------------

// Eq. 10: rows kept by each layer's stage for a prefill of n tokens: stage 0 keeps n, the last
// keeps max(ceil(stage_min * n), min_keep), linear in between (the official integer step);
// never more than n. [n_layer].
// stage_min_tokens > 0 replaces ceil(stage_min * n) by that many rows (the official code's 1,536; it
// steps down from max_token, 4,096 or 8,192, where we step from n: equal when n = max_token).
// stage_from > n: the steps are computed from stage_from tokens down (the official code's
// (max_token - 1536) // (C - 1), max_token = the model's context, 4,096 for Llama-2) and each
// count is then capped at n; otherwise from n.
std::vector<int64_t> uncomp_stage_rows(const std::vector<int>& layer_groups, int64_t n, double stage_min,
                                       int64_t min_keep, int64_t stage_min_tokens = 0, int64_t stage_from = 0);

// Per-head budgets over every (layer, KV head) of the cache (index layer * n_head_kv + kvh):
//  - keep ratio: total = round(keep * base), base = the slots held (group) or the longest head x
//    heads (group-stage: the unpruned first layer holds the whole context); split in proportion
//    to N_{g(h)} (Eq. 11) with each head's protected tokens first;
//  - token budget (max_tokens; decode-time eviction): total = max_tokens x heads; when the heads
//    already differ (an earlier UNComp compression shaped them) every head drops the same number
//    of tokens, so each keeps its group's size; otherwise the stepped split.
// Budgets never exceed what a head holds (the rest goes to the others, or is not kept).
// obs_window: the scorer's last l queries, kept in every head whatever the keep ratio (with the
// sinks and the request's window; the official code's sizes always hold its window of 8).
std::vector<int32_t> uncomp_head_budgets(const KvCache& cache, const CompressRequest& req, const UncompCalibration& cal,
                                         double n1, double dn, bool base_longest, int obs_window = 0);
// Same with the group sizes given ([cal.groups], group 0 first).
std::vector<int32_t> uncomp_head_budgets(const KvCache& cache, const CompressRequest& req, const UncompCalibration& cal,
                                         const std::vector<double>& sizes, bool base_longest, int obs_window = 0);
// The official code's 8 sizes (window included), largest-erank group first: 748, 640, 512, 384,
// 384, 256, 128, 20. Throws unless groups == 8.
std::vector<double> uncomp_official_ladder(int groups);

// ---- press parts ------------------------------------------------------------------------------

struct UncompOptions {
  bool stage = false;      // group-stage: prune hidden states in prefill
  int window = 8;          // l: the last queries whose attention scores tokens (kept themselves)
  int kernel = 5;          // 1-D pooling of the scores (SnapKV's avg, 5; official LongBench runs: max, 7)
  bool max_pool = false;   // max pooling instead of average
  double stage_min = 0.375;  // rows the last layer group keeps, as a fraction of the context
  int64_t stage_min_tokens = 0;  // > 0: that many rows instead (official: 1536)
  // Where the stage steps start: 0 = the prefill's tokens; > 0 that many tokens; -1 = the model's
  // training context (official: max_token, the length its prompts are truncated to).
  int64_t stage_max_tokens = 0;
  bool official = false;   // preset=official: warn when the calibration is not the official preset's
  int stage_queries = 1;   // queries whose attention ranks rows when pruning (paper: the last token)
  std::vector<int> layer_groups;  // group-stage: an explicit layer partition (empty: the calibration's)
};

// "calibrated" -> {}; "0,0,1,2" (or "0/0/1/2") -> that partition (starts at 0, grows by 0 or 1).
std::vector<int> uncomp_parse_layer_groups(const std::string& s);

// preset=official: a warning (once) when the stored calibration was not made with preset=official.
void warn_unless_official_calibration(const nlohmann::json* data);

// Scores: the cumulative attention of the last l queries, pooled over the keys before the window
// (the official update_kv), the window kept;
// in group-stage, the prefill row selector.
class UncompScorer : public Scorer {
 public:
  explicit UncompScorer(UncompOptions o);
  std::string name() const override { return o_.stage ? "uncomp_group_stage" : "uncomp_group"; }
  Needs needs() const override { return {.stats = {.window = o_.window}, .probe = true}; }
  Scores score(const PressEnv& env) const override;
  int observation_window() const override { return o_.window; }
  bool prunes_prefill(const CompressRequest& req) const override;
  std::unique_ptr<RowSelector> prefill_rows(const PrefillRows& p) const override;
  const UncompOptions& options() const { return o_; }

 private:
  UncompOptions o_;
};

// Stepped head-group budgets from the model's calibration (any scorer; `uncomp` by default).
class UncompAllocator : public BudgetAllocator {
 public:
  // obs_window: the scorer's observation window (UncompScorer: l), kept in every head.
  UncompAllocator(double n1, double dn, bool base_longest, bool official_ladder = false, int obs_window = 0)
      : n1_(n1), dn_(dn), base_longest_(base_longest), official_ladder_(official_ladder), obs_window_(obs_window) {}
  std::string name() const override { return "uncomp"; }
  Needs needs() const override { return {.stats = {}, .probe = true}; }
  Allocation allocate(const Scores& scores, const PressEnv& env) const override;

 private:
  double n1_, dn_;
  bool base_longest_;
  bool official_ladder_;
  int obs_window_;
};

// The group-stage prefill row selector (exposed for tests). stage_rows: [n_layer] rows kept from
// each layer on for the whole prefill (uncomp_stage_rows); the forward shows it the whole prefill
// before each layer (layer-major), whatever n_batch.
class UncompRowSelector : public RowSelector {
 public:
  UncompRowSelector(const PrefillRows& p, std::vector<int64_t> stage_rows, int protect_last, int stage_queries);
  bool select_rows(const RowView& v, std::vector<int32_t>& keep) override;
  // Rows kept by the last selection of each layer (for tests and reports): [n_layer], -1 if none.
  const std::vector<int64_t>& kept_at() const { return kept_at_; }

 private:
  std::vector<int64_t> stage_rows_;
  int64_t n_tokens_, end_pos_;
  int64_t protect_last_;
  int stage_queries_;
  const StatsCollector* stats_;
  AttnShape shape_;
  ThreadPool* pool_;
  CompressRequest request_;
  std::vector<int64_t> kept_at_;
};

void add_uncomp_presses(std::vector<PressInfo>& presses);
void add_uncomp_allocators(std::vector<AllocatorInfo>& allocators);

}  // namespace kvs
