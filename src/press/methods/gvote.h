// GVote (Tang et al., "GVote: Adaptive Per-Request KV-Cache Compression Without Manually Setting
// Budget"; ../shared/papers/gvote.txt §3.3, Algorithm 1 and the Appendix A listing) as press parts.
// Per request, per layer and KV head, no keep ratio:
//   1. A_0 = the last real query's attention; B_step = |TopP(A_0, p_nuc)| per query head (lines 1-3);
//   2. S hidden states h̃ ~ N(μ, σ²) fitted channel-wise to the attention module's input during
//      prefill — attn_norm of the residual stream, the listing's `hidden_states` (lines 4-5) —,
//      projected to queries by W_q (+ bias) and RoPE with cos/sin averaged over the next n_f
//      positions, no norm applied again (lines 6-7; the model probe);
//   3. each synthetic query votes for its top-B_step keys; the head keeps the union over the
//      samples and over the query heads of its GQA group (lines 8-11).
// GVoteScorer marks the union (score 1, others 0); GVoteAllocator ("gvote", adaptive) keeps the
// marked slots plus the protected ones and reports the keep ratio it chose. The numerics are
// press/math/gvote_math.h (its header lists the choices where the paper is open); the choices
// specific to these parts are beside the code in gvote.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "press/registry.h"

namespace kvs {

struct GVoteParams {
  double p_nuc = 0.95;   // nucleus threshold of B_step
  int samples = 8;       // S synthetic hidden states per layer
  int n_future = 512;    // n_f positions RoPE is averaged over
};

// Lines 1-3 and 8-11 for one layer, without the model: q_last [n_head][head_dim] is the last real
// query (post-RoPE) at position q_pos, q_syn [n_samples][n_head][head_dim] the synthetic queries
// (post-RoPE). Returns keep[kvh][slot] (1 = some sample of some query head of the group voted for
// the slot); b_step (if given) receives B_step of every query head, [n_head].
std::vector<std::vector<uint8_t>> gvote_layer_votes(const KvCache& cache, int layer, const AttnShape& shape,
                                                    const float* q_last, int32_t q_pos, const float* q_syn,
                                                    int n_samples, double p_nuc, std::vector<int64_t>* b_step = nullptr);

// Lines 6-7: queries of attention inputs [n][n_embd] of `layer` (already normed: W_q + bias, no
// norm), with RoPE averaged over positions first .. first + n_future - 1: [n][n_head][head_dim].
std::vector<float> gvote_project(ModelProbe& probe, int layer, const float* attn_in, int n, int32_t first, int n_future);

// Lines 4-5: S attention inputs drawn from N(μ, σ²) fitted channel-wise to the layer's attention
// inputs seen during prefill (the collector's attn-input moments; σ unbiased, n - 1, as the
// listing's torch.std; σ = 0 when the layer saw one token). [n_samples][n_embd]. `seed` is mixed
// with the layer index.
std::vector<float> gvote_sample_layer(const StatsCollector& stats, int layer, int n_samples, uint64_t seed);

class GVoteScorer : public Scorer {
 public:
  explicit GVoteScorer(GVoteParams p = {}) : p_(p) {}
  std::string name() const override { return "gvote"; }
  Needs needs() const override { return {.stats = {.window = 1, .attn_input_moments = true}, .probe = true}; }
  Scores score(const PressEnv& env) const override;

 private:
  GVoteParams p_;
};

// Adaptive: every head keeps the slots its scorer marked (score > 0: GVote's union of votes) and
// its protected slots; keep_chosen = slots kept / slots held.
class GVoteAllocator : public BudgetAllocator {
 public:
  std::string name() const override { return "gvote"; }
  Allocation allocate(const Scores& scores, const PressEnv& env) const override;
  bool adaptive() const override { return true; }
};

void add_gvote_presses(std::vector<PressInfo>& presses);
void add_gvote_allocators(std::vector<AllocatorInfo>& allocators);

}  // namespace kvs
