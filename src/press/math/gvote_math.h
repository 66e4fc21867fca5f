// GVote's numerical pieces (Tang et al., "GVote: Adaptive Per-Request KV-Cache Compression Without
// Manually Setting Budget", ../shared/papers/gvote.txt §3.3, Algorithm 1, Appendix A Listing 1):
//   lines 1-3  B_step = |TopP(A_0, p_nuc)|, A_0 the last real query's attention (per query head)
//   line 4     μ, σ² of the attention input, channel-wise           (math/channel_stats.h, kept by
//              the statistics collector: StatsRequest::attn_input_moments)
//   line 5     S synthetic hidden states h̃ ~ N(μ, σ²)                (gvote_sample_hidden)
//   line 6     cos/sin averaged over the next n_f positions         (ModelProbe::rope_table_mean)
//   line 7     Q̃ = RoPE(h̃ W_q, P)                                   (the caller: model weights)
//   lines 8-10 each synthetic query votes for its top-B_step keys; keep the union over samples and
//              over the query heads of the GQA group                 (gvote_union_votes)
//
// Choices where the paper is open (no repository; the reference is the appendix listing):
//  - Top-p size: the listing's sum(cumsum(sorted desc) < p) + 1, i.e. the smallest m whose top-m
//    mass reaches p, clamped to [1, n]; p >= 1 keeps all n (the listing's +1 could exceed n when
//    rounding leaves the total mass just under 1). Sums in double.
//  - μ, σ: the listing's torch.mean / torch.std over the sequence, std UNBIASED (n - 1). Its
//    `hidden_states` is the attention module's input, which in HF models is the output of the
//    layer's input RMSNorm: the listing projects the samples with q_proj only, no norm. So the
//    statistics belong to the NORMALISED hidden states (LayerView::attn_in) and the samples are
//    not normalised again (ModelProbe::project_attn_input_queries).
//  - RNG: core/rng.h (SplitMix64 + polar normals), reproducible across platforms; samples drawn
//    in row-major order (sample, channel).
//  - Averaged RoPE (line 6, listing; computed by ModelProbe::rope_table_mean from the model's own
//    inverse frequencies): positions start .. start + n_f - 1 where start = the number of context
//    tokens (the next position); cos and sin are averaged SEPARATELY (so the pair is a rotation
//    scaled by |mean| <= 1, as in the listing), angles in double as the engine computes them
//    (pos * inv_freq), applied by the model's own RoPE style (the listing's rotate helper mixes
//    the interleaved and half layouts). The paper gives no value for n_f.
//  - Votes: top-B by logit (the 1/sqrt(d) scale does not change a ranking, so raw dot products);
//    ties toward the higher key index (the more recent slot, as the project's top-k selector);
//    B is per query head (the listing's b_step_per_head), clamped to n.
//
// Complexity: top-p O(n log n); union O(G S n (D + 1)) time with O(n + D) scratch (one logit row at a
// time, nth_element per row); sampling O(S d).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace kvs::math {

// |TopP(probs, p_nuc)|: probs [n] (>= 0, summing to ~1, any order). 0 for n = 0.
int64_t gvote_top_p_size(std::span<const float> probs, double p_nuc = 0.95);

// S rows of μ + σ ⊙ z, z ~ N(0, I): [n_samples][d], d = mu.size() = sigma.size().
std::vector<float> gvote_sample_hidden(std::span<const float> mu, std::span<const float> sigma, int n_samples,
                                       uint64_t seed);

// Marks the top-b entries of one logit row in keep[n] (ties: higher index first). b clamped to n.
void gvote_vote_top_b(std::span<const float> logits, int64_t b, std::vector<uint8_t>& keep);

// One KV head: q [n_group][n_samples][head_dim] synthetic (post-RoPE) queries of the group's query
// heads, keys [n][key_stride] (first head_dim floats of each row), budgets [n_group] (B_step of each
// query head). Returns keep [n]: 1 if any (head, sample) voted for the key.
std::vector<uint8_t> gvote_union_votes(std::span<const float> q, int n_group, int n_samples,
                                       std::span<const float> keys, int64_t n, int head_dim, int64_t key_stride,
                                       std::span<const int64_t> budgets);

}  // namespace kvs::math
