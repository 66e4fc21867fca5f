// Compactor (Chari & Van Durme 2025, "Compactor: Calibrated KV Cache Compression with Approximate
// Leverage Scores", ../shared/papers/compactor.txt §3) as press parts.
//
//   o = approximate leverage scores of the PRE-RoPE keys of each KV head (§3.1-3.2, Algorithm 1:
//       Gaussian right sketch Φ ∈ R^{d x k}, k = 48; press/math/leverage.h), or exact (`exact`);
//   a = non-causal attention within chunks of C = 256 tokens, column sums (Eq. 5), collected
//       during prefill by the statistics collector (StatsRequest::chunk_attention: a chunk's
//       queries are buffered until its keys are all in the cache; memory bounded by C), averaged
//       over the query heads of the group, mean-pooled (§3.3);
//   s = (a - ā) / std(a) + λ (o - ō) / std(o), λ = 0.3 (Eq. 6; press/math/chunk_attention.h);
//   keep the top ⌈r N⌉ per head (`allocator=uniform`) or across the heads of a layer
//   (`global_layer`, the default: "head-adaptive compression", the paper's setting in §4).
//
// Choices where the paper is open (official code checked: vnchari/compactor-vllm
// compression/compactor.py; NVIDIA/kvpress compactor_press.py, leverage_press.py,
// non_causal_attention_press.py — the latter two written by the paper's first author):
//  - z-scores over a whole layer (all its KV heads and tokens jointly), as both official codes do;
//    this is what makes cross-head selection meaningful. Population std (compactor-vllm).
//  - Pooling: average over `pool` = 3 neighbours (kvpress's Compactor, the author's own reading of
//    "mean pooling as SnapKV"; zero padding, as SnapKV's avg_pool1d); pool = 1 turns it off
//    (compactor-vllm does not pool). kvpress also multiplies a by the value norms; the paper does
//    not, neither do we.
//  - Protected tokens: the first 8 and the last 4 (kvpress's sink_size_start / sink_size_end;
//    compactor-vllm protects configurable first/last tokens), through the request's sinks/window.
//    They are scored like the others (compactor-vllm: scores z-scored over everything, then the
//    protected tokens set to +inf).
//  - Leverage: keys centred over the head's sequence, eigenvalue floor relative to the largest
//    (press/math/leverage.h lists why); one sketch Φ for the whole model (compactor-vllm), seeded.
//  - λ = 0.3 (the paper; compactor-vllm uses 0.5, kvpress the compression ratio).
//  - The attention logits are unscaled (Eq. 5 and both official codes: sm_scale = 1).
//
// Context-calibrated compression (§3.5) is not specific to Compactor: any press takes
// `--quality τ` (or `allocator=quality:tau=τ`), see press/budget/calibrated.h.
#pragma once
#include <cstdint>
#include <vector>

#include "press/registry.h"

namespace kvs {

struct CompactorOptions {
  int chunk = 256;         // C (non-causal chunk)
  double lambda = 0.3;     // λ, weight of the leverage scores
  int sketch_dim = 48;     // k
  bool exact = false;      // exact leverage scores instead of Algorithm 1
  int pool = 3;            // mean-pooling kernel over the attention scores (odd; 1 = none)
  uint64_t seed = 0xC0A7AC70u;  // seed of the sketch Φ
};

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
