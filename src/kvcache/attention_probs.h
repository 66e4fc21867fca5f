// Attention probabilities on demand, for compression statistics. The forward pass keeps only
// each query's log-sum-exp (lse); from it, p[t][j] = exp(logit(scale * q_t . k_j) - lse_t) (logit:
// AttnShape's soft-capping, when set; keys outside a sliding window masked) is recomputed
// tile by tile (query block x key block via sgemm), never as a whole N x N matrix.
//
// Work is split into (KV head, query head, query block) tasks over the pool's threads; the tile
// says which thread runs it (`thread`, 0 .. pool size - 1), so a sink accumulates into per-thread
// arrays without locks and reduces them afterwards.
#pragma once
#include <cstdint>
#include <functional>

#include "core/thread_pool.h"
#include "kvcache/attention.h"
#include "kvcache/kv_cache.h"

namespace kvs {

struct ProbTile {
  int thread = 0;      // pool thread running this tile
  int kvh = 0;         // KV head
  int qh = 0;          // query head (kvh * group + g)
  int t0 = 0, nt = 0;  // query rows [t0, t0 + nt) of the batch
  int32_t k0 = 0, nk = 0;  // cache slots [k0, k0 + nk) of head kvh
  const float* p = nullptr;  // [nt][ld] probabilities (0 where the key is not visible)
  int64_t ld = 0;
};
using ProbSink = std::function<void(const ProbTile&)>;

// Queries t in [t_begin, n_tok) of a batch: q [n_tok][H][D] (post-RoPE), qpos [n_tok] increasing,
// lse [n_tok][H] from attention() (or null: computed here).
void for_each_prob_tile(const KvCache& cache, int layer, const AttnShape& s, const float* q, const int32_t* qpos,
                        const float* lse, int n_tok, int t_begin, ThreadPool& pool, const ProbSink& sink);

}  // namespace kvs
