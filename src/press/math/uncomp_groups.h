// UNComp's grouping and budgets (Xiong et al., ../shared/papers/uncomp.txt): head groups by
// truncated effective rank with a majority vote over calibration samples (§3.3.1, §3.3.3,
// Algorithm 1), layer groups from the inter-layer entropy drop (§3.3.2, Eqs. 8-10), and the stepped
// per-group KV budgets (Eq. 11) scaled to a requested total.
//
// Conventions: group 0 holds the heads with the LARGEST erank_k and gets the largest budget (the
// paper's g = 1, N_{i,1} = 640). Heads are those of one layer (UNComp groups per layer; the caller
// loops over layers and decides whether "head" means query head or KV head).
//
// Choices where the paper is open (official code checked: menik1126/UNComp
// uncomp/uncomp_utils.py "head_type_search_8", run_longbench.py/run_gsm8k.py loading of the votes,
// uncomp/stage_division.py, uncomp/llama_model.py hidden-state pruning):
//  - Per-sample assignment: heads sorted by erank, cut into M groups of equal size (official: labels
//    from argsort, H/M heads per label). When M does not divide H, the first H mod M groups get one
//    extra head (as the official layer grouping does). With fewer heads than groups (GQA models:
//    4 KV heads, M = 8) the heads' ranks spread over the whole ladder — rank r in group
//    round(r (M - 1) / (H - 1)): 4 heads take groups 0, 2, 5, 7, i.e. budgets 640, 492, 270, 122
//    (mean 381, as the full ladder's) — rather than the first H groups (640 ... 418 only).
//    Ties in erank: the lower head index ranks first.
//  - Majority vote (Algorithm 1 line 12). VoteMode::Balanced (default, official): groups keep their
//    sizes; from the lowest-erank group to the highest (the official loop order), each takes, among
//    the heads not yet placed, the ones most often voted into it (ties: lower head index).
//    VoteMode::PerHead (the paper's words read literally): each head takes its most frequent label
//    (ties: the larger-budget group); group sizes may then differ.
//  - Layer groups (Eq. 8): a new group starts after layer i when Δc_i = erank_i - erank_{i+1} > ε
//    (official stage_division: a new segment when erank_{i+1} - erank_i < -1, i.e. ε = 1 on its
//    scale). Eq. 9 counts the boundaries; the number of groups is that count + 1.
//  - Stage token counts (Eq. 10, N_{i+1} = N_i + Δn): the first group keeps every token; later
//    groups step DOWN by `step` tokens per group (the paper's Δn is a decrement here; the official
//    code uses step = (N_max - N_min) // (C - 1), linear from the full length to N_min), never
//    below `min_keep` (the question / last tokens are never pruned).
//  - Stepped head budgets (Eq. 11, N_{g+1} = N_g - Δn; paper: 8 groups, N_1 = 640, Δn = 74, mean
//    381 ~ the 384 of the baselines): each head weighs N_{g(h)}; the requested total is split in
//    proportion with exact integer rounding and per-head caps (press/math/apportion.h), so heads of
//    one group may differ by one token. The official code uses the fixed sizes (window included)
//    with no rescaling.
// Complexity: all O(heads x samples + heads log heads) or O(layers); negligible.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace kvs::math {

// Sizes of M groups over n_heads heads: floor(n/M), the first n mod M one larger; n < M: one head
// in each of n groups spread evenly over 0 .. M-1 (both ends included).
std::vector<int> uncomp_group_sizes(int n_heads, int m);

// One sample: label[h] in [0, M), group 0 = largest erank. erank: [n_heads].
std::vector<int> uncomp_assign_head_groups(std::span<const double> erank, int m);

enum class VoteMode { Balanced, PerHead };

// labels: [n_samples][n_heads] (each row from uncomp_assign_head_groups). Returns [n_heads].
std::vector<int> uncomp_majority_vote(std::span<const int> labels, int n_samples, int n_heads, int m,
                                      VoteMode mode = VoteMode::Balanced);

// Eq. 8: layer_erank [L] (erank_k of each layer's queries) -> group id per layer, 0 = first group.
std::vector<int> uncomp_layer_groups(std::span<const double> layer_erank, double eps = 1.0);

// Eq. 10: tokens kept by each of n_groups layer groups: n_tokens, n_tokens - step, ... (>= min_keep,
// <= n_tokens).
std::vector<int64_t> uncomp_stage_tokens(int n_groups, int64_t n_tokens, int64_t step, int64_t min_keep);

// Eq. 11: N_g = n1 - g * dn, g = 0..M-1 (throws unless all are > 0).
std::vector<double> uncomp_stepped_sizes(int m, double n1 = 640.0, double dn = 74.0);

// Per-head budgets: weights N_{label[h]}, split of `total` (exact) with caps [n_heads] (or empty).
std::vector<int64_t> uncomp_head_budgets(std::span<const int> labels, int m, int64_t total,
                                         std::span<const int64_t> caps = {}, double n1 = 640.0,
                                         double dn = 74.0);

}  // namespace kvs::math
