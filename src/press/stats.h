// Attention statistics for compression methods, computed only when a method asks for them.
//
// The collector watches the forward pass (LayerObserver) and keeps what was requested, in memory
// bounded by the cache (per slot) or by the model's shape (per layer/head), never by the number
// of queries seen:
//  - per (layer, KV head) and cache slot: column sums of attention over every observed query and
//    the GQA group (H2O, D2O), column maxima (KVzip-style), pre-RoPE keys (Compactor);
//  - per layer: the last W queries (SnapKV's observation window, TOVA's and GVote's last query:
//    their attention is computed against the cache when scoring), running per-channel mean and
//    variance of the attention block's input, attn_norm(hidden) (GVote's Gaussian);
//  - per (layer, query head): the Gram matrix sum q q^T, sum q and count of the queries
//    (UNComp's matrix entropy: the covariance, never the queries themselves);
//  - per (layer, KV head) and cache slot: NON-causal chunked attention (Compactor, Eq. 5): positions
//    are cut into chunks of C; once a chunk's last query has been seen (its keys are then all in
//    the cache), the softmax of each of its queries over the chunk's keys alone (unscaled logits)
//    is summed per key and averaged over the query heads of the group. Only the current chunk's
//    queries are buffered per layer ([<= C][n_head][head_dim]); the last, partial chunk is added
//    when the statistic is read (chunk_attention()), without changing the collector.
// Per-slot arrays follow the cache: call apply_edit() with every edit applied to it.
// Probabilities are recomputed tile by tile from each query's log-sum-exp
// (kvcache/attention_probs.h), never stored as a matrix.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "core/thread_pool.h"
#include "kvcache/attention.h"
#include "kvcache/kv_cache.h"
#include "press/math/channel_stats.h"
#include "press/observer.h"

namespace kvs {

enum class QueryGram : uint8_t { Off, PreRope, PostRope };

struct StatsRequest {
  bool col_sum = false;        // sum over observed queries (and the query heads of the group)
  bool col_sum_query_heads = false;  // the same sums kept per query head of the group as well
  bool col_max = false;        // max over observed queries and group
  int window = 0;              // keep the last `window` queries of every layer (at least; Window)
  bool pre_rope_keys = false;  // keep pre-RoPE keys of every observed token
  QueryGram query_gram = QueryGram::Off;  // Gram matrix of each query head's queries
  bool attn_input_moments = false;  // per-channel mean and variance of each layer's attention input
  int chunk_attention = 0;     // C > 0: non-causal attention within chunks of C positions (Compactor)

  bool any() const { return *this != StatsRequest{}; }
  bool operator==(const StatsRequest&) const = default;
  // The union: what either asks for.
  StatsRequest& operator|=(const StatsRequest& o);
  // True when everything `need` asks for is collected under this request.
  bool covers(const StatsRequest& need) const;
};

class StatsCollector : public LayerObserver {
 public:
  // n_embd: width of the hidden states (for attn_input_moments).
  StatsCollector(const KvLayout& layout, const AttnShape& shape, int n_embd, const StatsRequest& req, ThreadPool& pool);

  void on_layer(const LayerView& v) override;
  bool needs_pre_rope() const override {
    return req_.pre_rope_keys || req_.query_gram == QueryGram::PreRope;
  }

  // Keeps per-slot arrays aligned with the cache after `edit` was applied to it.
  void apply_edit(const CacheEdit& edit);
  // Drops from every per-slot array the slots a sliding window has dropped from the cache's head
  // since (HeadCache::slid), so that array index = cache slot again. compress() calls it first.
  void sync(const KvCache& cache);
  // A copy (for a forked cache that continues to collect).
  std::unique_ptr<StatsCollector> clone() const { return std::make_unique<StatsCollector>(*this); }
  // A copy that keeps and continues to collect only `req` (which this request must cover): a
  // press derived from a shared prefill pays only for its own statistics afterwards.
  std::unique_ptr<StatsCollector> clone_subset(const StatsRequest& req) const;

  const StatsRequest& request() const { return req_; }
  // Wall-clock seconds spent collecting (the statistics' share of prefill/decode time).
  double seconds() const { return seconds_; }
  const KvLayout& layout() const { return layout_; }
  const AttnShape& shape() const { return shape_; }

  // [len] per slot of head (layer, kvh); empty if not requested.
  const std::vector<float>& col_sum(int layer, int kvh) const { return heads_[idx(layer, kvh)].col_sum; }
  const std::vector<float>& col_max(int layer, int kvh) const { return heads_[idx(layer, kvh)].col_max; }
  // [len][group]: column sums of each query head g of the group (query head kvh * group + g) over
  // the observed queries (col_sum_query_heads); empty if not requested.
  const std::vector<float>& col_sum_query_heads(int layer, int kvh) const { return heads_[idx(layer, kvh)].col_sum_qh; }
  // [len][head_dim] pre-RoPE keys of head (layer, kvh).
  const std::vector<float>& pre_rope_keys(int layer, int kvh) const { return heads_[idx(layer, kvh)].k_pre; }
  // Queries observed per layer (for averages).
  int64_t n_queries(int layer) const { return n_queries_[static_cast<size_t>(layer)]; }
  // Variance over the head's slots of the mean attention each slot received
  // (col_sum / n_queries); needs col_sum. D2O-style layer budgets build on it.
  double attention_variance(int layer, int kvh) const;
  // Per-channel mean and variance of the attention block's input of `layer` (LayerView::attn_in,
  // attn_norm of the residual stream) over every query the layer saw; dim() 0 if not requested.
  const math::ChannelStats& attn_input_stats(int layer) const { return attn_in_[static_cast<size_t>(layer)]; }

  // Gram statistics of query head qh of a layer (query_gram): gram [D][D] = sum q q^T (upper and
  // lower triangles filled), sum [D] = sum q, count = queries. covariance() = gram/n - mean mean^T.
  struct Gram {
    std::vector<double> gram, sum;
    int64_t count = 0;
    std::vector<double> covariance() const;
  };
  const Gram& query_gram(int layer, int qh) const { return grams_[static_cast<size_t>(layer * shape_.n_head + qh)]; }

  // The last queries of a layer: at least the last `window` (all when fewer were seen), at most
  // 2 x window — trimmed in batches, so that a decoding sequence does not move the whole window
  // at every token (16 sequences x 30 layers x 64 queries: ~70 MB of memmove per step). Readers
  // take the tail they need.
  struct Window {
    std::vector<float> q;      // [w][n_head][head_dim] post-RoPE, oldest first
    std::vector<int32_t> pos;  // [w]
    int size() const { return static_cast<int>(pos.size()); }
  };
  const Window& window(int layer) const { return windows_[static_cast<size_t>(layer)]; }

  // Non-causal chunked attention of `layer` (chunk_attention = C): a[kvh][slot], the attention each
  // slot received from the queries of its own chunk of C positions (softmax over that chunk's keys
  // held in the cache, logits q.k unscaled), summed over those queries and averaged over the
  // query heads of the group. Completed chunks come from the per-slot array; the chunk still
  // being filled (the last, shorter one) is computed here from its buffered queries, as a chunk
  // on its own, against `cache` (the cache this collector follows). Empty vectors if not requested.
  std::vector<std::vector<float>> chunk_attention(const KvCache& cache, int layer) const;
  // Number of queries buffered for the chunk still being filled (at most C).
  int chunk_pending(int layer) const { return static_cast<int>(chunks_[static_cast<size_t>(layer)].pos.size()); }

 private:
  struct Head {
    std::vector<float> col_sum, col_max, k_pre;
    std::vector<float> col_sum_qh;  // [len][group] (col_sum_query_heads)
    std::vector<float> chunk_attn;  // [len] non-causal chunk attention of completed chunks
    int64_t slid = 0;               // the cache head's HeadCache::slid these arrays follow
  };
  void sync_head(Head& h, const HeadCache& c);
  // The queries of one layer's chunk still being filled (chunk_attention).
  struct ChunkBuffer {
    std::vector<float> q;      // [n][n_head][head_dim] post-RoPE
    std::vector<int32_t> pos;  // [n]
  };
  size_t idx(int layer, int kvh) const { return static_cast<size_t>(layer * layout_.n_head_kv + kvh); }
  void collect(const LayerView& v);
  void collect_attention(const LayerView& v);
  void collect_grams(const LayerView& v);
  void collect_chunks(const LayerView& v);
  // Adds the non-causal attention of `buf`'s queries over the slots of `layer` whose positions lie
  // in their chunk ([c C, (c + 1) C), c = buf.pos[0] / C) to out[kvh][slot] (sized like the heads).
  void chunk_scores(const KvCache& c, int layer, const ChunkBuffer& buf, std::vector<std::vector<float>*>& out) const;

  KvLayout layout_;
  AttnShape shape_;
  int n_embd_ = 0;
  StatsRequest req_;
  ThreadPool* pool_;
  std::vector<Head> heads_;                  // [n_layer * n_head_kv]
  std::vector<Window> windows_;              // [n_layer]
  std::vector<int64_t> n_queries_;           // [n_layer]
  std::vector<Gram> grams_;                  // [n_layer * n_head] (query_gram only)
  std::vector<math::ChannelStats> attn_in_;  // [n_layer], each over n_embd channels (attn_input_moments)
  std::vector<ChunkBuffer> chunks_;          // [n_layer] (chunk_attention only)
  double seconds_ = 0;
};

}  // namespace kvs
