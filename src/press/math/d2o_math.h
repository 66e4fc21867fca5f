// D2O's numerical pieces (Wan et al., "D2O: Dynamic Discriminative Operations for Efficient Long-
// Context Inference of LLMs", ../shared/papers/d2o.txt §4): layer budgets from attention density
// (Eqs. 4-5), nearest kept pair by key cosine similarity (Eq. 9), the EMA merge threshold (Eq. 10)
// and the merge itself (Eqs. 11-12).
//
// Choices where the paper is open (official code checked: AIoT-MLSys-Lab/D2O,
// LLM_merge_new/LMEval_kv_token_merge/modeling_llama3_7b_13b_d2o.py (D2O_LayerKVCache, the
// attention forward) and modeling_llama3_new.py (the layer allocation)):
//  - Eq. 4 per head: F = Var over keys of the prompt attention's column sums. Heads are omitted
//    in the paper; a layer's F is the mean over its heads (D2oDensity::Paper). torch's var is
//    unbiased (n - 1), which we follow by default. The official code then min-max normalises the
//    head variances WITHIN each layer, (v - min) / (max - min + 1e-6), and averages those
//    (D2oDensity::OfficialMinMax, the default since the literal reading starves sharp layers:
//    docs/methods/d2o.md): every layer's F then lies in [0, 1], so softmax(-F) stays mild.
//    With raw variances (Paper) F spans a few units (v7s1 testbed, 1,728 tokens: 0.96 to 3.36) and
//    softmax(-F) moves the budget strongly (there: per-head targets 706, 64, 336, 622 for a
//    uniform 432); a layer capped at what it holds passes the excess to the others (below). The
//    official code instead clamps each ratio to [0.01, 1] and redistributes nothing.
//  - Budgets S_l = α_l S must be integers: the total round(L ρ S) is split in proportion to α with
//    largest-remainder rounding, each layer capped at its length (default S), the excess
//    redistributed in proportion to α (press/math/apportion.h). Sum exact unless every layer is full.
//  - Eq. 9 (cosine similarity): zero-norm keys have similarity 0 with everything; ties go to the
//    lowest kept index. Computed on whatever keys the caller passes (the official code uses the
//    cached, post-RoPE keys).
//  - Eq. 10: one threshold per (layer, KV head) — our cache keeps different tokens per head; the
//    official code keeps one scalar per layer and averages the per-head maxima (its `.mean(1)`).
//    A decode step that evicts several tokens uses the mean of their maximum similarities as
//    "Max(U_t)" (the official code's `max_values.mean()`); with one evicted token it is Eq. 10
//    exactly. The threshold is updated before it is compared (τ_t includes step t), and an evicted
//    pair is merged iff its max similarity >= τ_t (the paper drops it when "less than τ").
//  - Eq. 12 as printed has sum_i exp(u_ij) m_ij in the numerator of w_ei, which read literally
//    gives every evicted pair the TOTAL weight of its group, so with two or more pairs the weights
//    would sum to more than 1. We read it as the GAT-style softmax the text describes ("inspired by
//    Graph Attention Network", "each conserved token retains the highest fusion weight, as its
//    self-similarity equals 1"): w_cj = e / (S_j + e), w_ei = exp(u_ij) / (S_j + e),
//    S_j = sum over the evicted pairs merged into j of exp(u_ij). With one merged pair both readings
//    coincide. D2oMerge::PaperEq12 (default).
//  - A row that already stands for m tokens (merged earlier; its cache mass) is m members of the
//    group, each with the same similarity: w_cj = m_j e / (m_j e + S_j), w_ei = m_i e^u / (same),
//    S_j = sum_i m_i e^{u_ij}. With every mass 1 — every merge the paper describes — this is
//    Eq. 12 above. Without it (literal Eq. 12, and the official code, which keeps no counts) a row
//    absorbing one token per decode step keeps about 2^-k of its own content after k steps: the
//    oldest content, often the heavy hitter itself, is washed out by the latest merges, and the
//    result depends on how many pairs one compression evicts. Attention does not weigh merged rows
//    (no log m logit bias): neither the paper's Eq. 11 nor the official code does.
//  - The official code's variant (D2oMerge::OfficialScatterMean): torch.scatter_reduce(mean,
//    include_self) of u_i * k_ei into k_cj, i.e. k_cj <- (k_cj + sum_i u_ij k_ei) / (1 + c_j), c_j the
//    number of pairs merged into j. The weights do not sum to 1 (the result shrinks when u < 1).
//  Keys and values are merged with the same weights (§4.2.2).
//
// Complexity: nearest O(n_evicted n_kept d) time (blocked sgemm, row maxima on the fly: the
// L^e x L^c matrix U is never held), O(n_kept d) scratch — measured 0.05 s for 4k x 4k, d = 64, one
// core; merge O((n_kept + n_evicted) d); budgets O(L^2) at worst. Single-threaded per head.
#pragma once
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace kvs::math {

// Eq. 4 for one head: the variance of the column sums (unbiased: divide by n - 1, as torch.var).
double d2o_column_sum_variance(std::span<const float> col_sums, bool unbiased = true);

// Paper: Eq. 4's variances as they are (the literal reading); OfficialMinMax: min-max normalised
// within each layer over its KV heads (the default: the official code's normalisation on our
// per-KV-head statistics); OfficialMinMaxQueryHeads: the same over the layer's query heads, each
// with its own column sums (the official code exactly: attn_sum.var(-1) per query head after
// repeat_kv, min-max over those heads). The density over query heads is the caller's to
// compute (d2o_layer_F); here it is a layer of n_heads values like the others.
enum class D2oDensity { Paper, OfficialMinMax, OfficialMinMaxQueryHeads };

// head_var: [n_layers][n_heads] per-head variances (Eq. 4). Returns F_v per layer, [n_layers].
std::vector<double> d2o_layer_density(std::span<const double> head_var, int n_layers, int n_heads,
                                      D2oDensity mode = D2oDensity::Paper);

// Eq. 5: α_l = softmax(-F)_l * L * ρ, ρ in (0, 1]. sum α = L ρ.
std::vector<double> d2o_alpha(std::span<const double> F, double rho);

// Integer S_l (Eq. 5 times S), sum = round(L ρ S) exactly, S_l <= caps[l] (caps empty: S each).
std::vector<int64_t> d2o_layer_budgets(std::span<const double> F, double rho, int64_t S,
                                       std::span<const int64_t> caps = {});

struct D2oNearest {
  std::vector<int32_t> index;  // [n_evicted] nearest kept pair
  std::vector<float> sim;      // [n_evicted] its cosine similarity (the row max of U)
};

// Eq. 9: kept [n_kept][d], evicted [n_evicted][d] (contiguous rows). n_kept >= 1 when n_evicted > 0.
D2oNearest d2o_nearest(std::span<const float> kept, int64_t n_kept, std::span<const float> evicted,
                       int64_t n_evicted, int d);

// Eq. 10, one per (layer, KV head).
class D2oThreshold {
 public:
  explicit D2oThreshold(double beta = 0.7);
  // Resumes a threshold saved earlier (τ_{t-1}, e.g. from a sequence's PressState): the next
  // update() is a decode step (t > 0). tau must be finite.
  D2oThreshold(double beta, double tau);
  bool initialised() const { return init_; }
  double value() const { return tau_; }  // NaN before the first update
  // First call (prefill, t = 0): τ = mean(max_sims). Later (decode, t > 0):
  // τ = β mean(max_sims) + (1 - β) τ. An empty span changes nothing. Returns τ.
  double update(std::span<const float> max_sims);

 private:
  double beta_;
  bool init_ = false;
  double tau_ = NAN;
};

enum class D2oMerge { PaperEq12, OfficialScatterMean };

struct D2oMergeWeights {
  std::vector<double> kept;     // [n_kept] weight of each kept pair itself (1 if nothing merged in)
  std::vector<double> evicted;  // [n_evicted] weight of each evicted pair in its nearest (0 = dropped)
  int64_t merged = 0;           // evicted pairs with sim >= threshold
};

// kept_mass [n_kept], evicted_mass [n_evicted]: tokens each row stands for (>= 1; empty = all 1);
// PaperEq12 only.
D2oMergeWeights d2o_merge_weights(std::span<const int32_t> nearest, std::span<const float> sim, int64_t n_kept,
                                  double threshold, D2oMerge mode = D2oMerge::PaperEq12,
                                  std::span<const float> kept_mass = {}, std::span<const float> evicted_mass = {});

// Eq. 11 in place: kept_k [n_kept][dk], kept_v [n_kept][dv]; evicted_k [n_evicted][dk],
// evicted_v [n_evicted][dv]; nearest/sim from d2o_nearest. Returns the number of pairs merged.
int64_t d2o_merge(std::span<float> kept_k, std::span<float> kept_v, int64_t n_kept, int dk, int dv,
                  std::span<const float> evicted_k, std::span<const float> evicted_v,
                  std::span<const int32_t> nearest, std::span<const float> sim, double threshold,
                  D2oMerge mode = D2oMerge::PaperEq12, std::span<const float> kept_mass = {},
                  std::span<const float> evicted_mass = {});

}  // namespace kvs::math
