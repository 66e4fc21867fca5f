// Compactor's attention-based score and score blend (Chari & Van Durme 2025,
// ../shared/papers/compactor.txt §3.3-3.4).
//
// Eq. 5: a = concat_i 1^T softmax(Q[i] K[i]^T), chunk i = tokens [(i-1)C, iC): NON-causal
// attention inside each chunk (every query of the chunk sees every key of the chunk, none outside),
// then column sums, i.e. the attention each key receives from its chunk's queries.
// Eq. 6: s = (a - mean a) / std a + λ (o - mean o) / std o, o = leverage scores (press/math/leverage.h).
//
// Choices where the paper is open (official code checked: vnchari/compactor-vllm
// compression/compactor.py::non_causal_attn_scores and its Triton kernel; NVIDIA/kvpress
// non_causal_attention_press.py and compactor_press.py):
//  - Logit scale: Eq. 5 has no 1/sqrt(d), and both official implementations use none either
//    (compactor-vllm passes sm_scale = 1.0, kvpress multiplies Q K^T unscaled); default scale = 1,
//    settable. Queries and keys are POST-RoPE in both (the leverage part uses pre-RoPE keys).
//  - GQA: the column sums of the query heads of a KV group are averaged (kvpress; compactor-vllm
//    sums). The same factor for every KV head, so after the z-score of Eq. 6 the two are identical.
//    With the mean every chunk gives its keys an average score of exactly 1.
//  - Last, shorter chunk: a chunk on its own (Eq. 5 read literally). Both official codes pad it to
//    C and let the padded query rows add ~1/C to every key of that chunk (compactor-vllm on purpose,
//    "preserve attention mass"; kvpress through a -1e-9 mask); we do not pad.
//  - Not done here: kvpress multiplies a by the value norms and average-pools it (kernel 3); the
//    paper applies "mean pooling as SnapKV" (§3.3) — the press framework's pooling helper does that.
//  - z-score: population std (compactor-vllm's Triton epilogue; kvpress uses torch.std, n - 1).
//    Both official codes z-score a whole layer jointly — all KV heads (and all tokens) together —
//    which is what makes head-adaptive (cross-head) selection meaningful: pass the layer's
//    [n_head_kv][n] block to zscore(), not one head at a time.
//  - λ = 0.3 (paper, §4). compactor-vllm uses 0.5; kvpress defaults λ to the compression ratio.
//
// Complexity: O(n C n_head head_dim) time (n C logits per query head, one sgemm per query head and
// chunk), O(C^2 + C head_dim) scratch; no n x n matrix. Measured: n = 8k, 9 query / 3 KV heads,
// head_dim 64, C = 256: 0.09 s per layer on one core. Single-threaded (OpenBLAS with its own
// thread setting): the caller splits KV heads or layers across threads.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace kvs::math {

struct ChunkAttentionOptions {
  int chunk = 256;     // C, the paper's default (compactor-vllm uses 128)
  float scale = 1.0f;  // logit multiplier (see above)
};

// q: [n][n_head][head_dim] (query heads of a token back to back), k: [n][n_head_kv][head_dim].
// Returns a: [n_head_kv][n] — for each key, the attention it receives from the queries of its own
// chunk, averaged over the query heads of its GQA group (n_head % n_head_kv == 0).
std::vector<float> chunk_attention_scores(std::span<const float> q, std::span<const float> k, int64_t n,
                                          int n_head, int n_head_kv, int head_dim,
                                          const ChunkAttentionOptions& opt = {});

// In place: x <- (x - mean) / std over the whole span (population std, in double). A constant span
// becomes all zeros. Throws kvs::Error on a non-finite entry.
void zscore(std::span<float> x);

// Eq. 6: s = z(a) + λ z(o), a and o of equal length (each z-scored over its whole span).
std::vector<float> blend_scores(std::span<const float> a, std::span<const float> o, double lambda = 0.3);

}  // namespace kvs::math
