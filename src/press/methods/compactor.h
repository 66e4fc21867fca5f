// Compactor (Chari & Van Durme 2025, "Compactor: Calibrated KV Cache Compression with Approximate
// Leverage Scores", ../shared/papers/compactor.txt §3) as press parts.
//
//   o = approximate leverage scores of the PRE-RoPE keys of each KV head (§3.1-3.2, Algorithm 1:
//       Gaussian right sketch Φ ∈ R^{d x k}, k = 48; press/math/leverage.h), or exact (`exact`);
//   a = non-causal attention within chunks of C = 256 tokens, column sums (Eq. 5), collected
//       during prefill by the statistics collector (StatsRequest::chunk_attention: a chunk's
//       queries are buffered until its keys are all in the cache; memory bounded by C), averaged
//       over the query heads of the group, mean-pooled (§3.3; `pool`);
//   s = (a - ā) / std(a) + λ (o - ō) / std(o), λ = 0.3 (Eq. 6; press/math/chunk_attention.h);
//   keep the top ⌈r N⌉ per head (`allocator=uniform`) or across the heads of a layer
//   (`global_layer`, the default: "head-adaptive compression", the paper's setting in §4).
//
// Presets (`--opt preset=paper`, the default, or `preset=official`; each option given explicitly
// overrides the preset):
//   paper    §4 "λ=0.3, sketching dimension k=48, chunk size C=256"; mean-pooling of a (§3.3 "We
//            apply mean-pooling to a as suggested by (li_snapkv_2024)"; kernel 3, the only
//            pooling by the authors' own code: kvpress's CompactorPress); leverage of the whole
//            sequence's keys, not centred (Eq. 1, Algorithm 1), eigenvalues floored relative to
//            the largest (App. C's ε, made relative); no protected tokens (the paper names none).
//   official vnchari/compactor-vllm's library defaults: λ 0.5, attention chunks of 128, no
//            pooling, leverage and its z-score per 512-token chunk (keys centred per chunk, ridge
//            5e-3·I, the z-score over the chunk's tokens of every KV head of the layer), the
//            first 16 and last 64 tokens protected.
// Both: the attention z-score over the whole layer (every KV head and token jointly: the paper's
// "top-⌈rN⌉ across all heads" needs comparable scores; both official codes do this), population
// std; unscaled logits (Eq. 5, sm_scale 1 in both codes); the last, shorter attention chunk is a
// chunk on its own (Eq. 5; compactor-vllm's kernel adds (⌈M/64⌉·64 − M)/128 to each key of that
// chunk, an artefact of its 64-row tiles we do not copy); head-adaptive selection (global_layer).
// Other known departures of preset=official: compactor-vllm counts the protected tokens inside
// r·(N − first − last) (we: inside r·N, as every press here); it computes in bfloat16.
// `zscore=head` z-scores each KV head on its own (the paper's "applied independently to each
// head" read literally; with cross-head selection that compares standardised scores).
//
// The sketch approximates only when k < head_dim: with k >= head_dim, KΦ spans K's column space
// and the scores equal the exact ones (at a higher cost) — a warning says so (use exact=true).
//
// Context-calibrated compression (§3.5) is not specific to Compactor: any press takes
// `--quality τ` (or `allocator=quality:tau=τ`), see press/budget/calibrated.h.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "press/registry.h"

namespace kvs {

struct CompactorOptions {
  int chunk = 256;         // C (non-causal chunk)
  double lambda = 0.3;     // λ, weight of the leverage scores
  int sketch_dim = 48;     // k
  bool exact = false;      // exact leverage scores instead of Algorithm 1
  int pool = 3;            // mean-pooling kernel over the attention scores (odd; 1 = none)
  int lev_chunk = 0;       // > 0: leverage and its z-score per chunk of this many tokens (0: whole sequence)
  bool center = false;     // subtract the (chunk's) mean key before the leverage
  double ridge = 0.0;      // > 0: λ_j + ridge (compactor-vllm) instead of the relative floor
  bool zscore_per_head = false;  // z-score each KV head alone instead of the whole layer
  uint64_t seed = 0xC0A7AC70u;  // seed of the sketch Φ
};

// Leverage scores of one head's keys [n][d] under `o` (exact or sketched, whole or per
// lev_chunk chunk, centred or not): [n].
std::vector<float> compactor_leverage(std::span<const float> keys, int64_t n, int d, const CompactorOptions& o,
                                      std::span<const float> sketch);

class CompactorScorer : public Scorer {
 public:
  explicit CompactorScorer(CompactorOptions o = {}) : o_(o) {}
  std::string name() const override { return "compactor"; }
  Needs needs() const override { return {.stats = {.pre_rope_keys = true, .chunk_attention = o_.chunk}}; }
  Scores score(const PressEnv& env) const override;

 private:
  CompactorOptions o_;
};

void add_compactor_presses(std::vector<PressInfo>& presses);
// `global_layer` (head-adaptive selection) and `quality` (context-calibrated keep ratio, any press).
void add_compactor_allocators(std::vector<AllocatorInfo>& allocators);

}  // namespace kvs
