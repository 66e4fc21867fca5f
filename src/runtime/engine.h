// The inference engine: a loaded model, a thread pool, the KV page pool and the scratch of the
// forward pass, which itself lives in runtime/arch/forward.cpp (the steps each architecture runs
// differently: one file per architecture beside it, runtime/arch/block.h). forward() runs
// a token sequence over any KvCache, in prefill chunks of n_batch tokens or single-token decode.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "kvcache/attention.h"
#include "kvcache/kv_cache.h"
#include "press/observer.h"
#include "press/stats.h"
#include "kvcache/page_pool.h"
#include "model/model.h"
#include "runtime/arch/forward.h"

namespace kvs {

struct EngineParams {
  int n_threads = 0;            // 0 = all cores
  // KV cache storage: F16 (default: half the bytes per decode step, same quality on the testbed;
  // docs/benchmarks/issue14-f16-kv-quality.md) or F32 (tests comparing with F32 references pin it).
  DType kv_dtype = DType::F16;
  int page_tokens = 32;         // tokens per KV page
  size_t kv_max_bytes = 0;      // cap on KV pool bytes (0 = none)
  int n_batch = 512;            // prefill chunk (tokens per forward step)
  bool llamacpp_numerics = false;  // round Q and attention probabilities to F16 (AttnShape::f16_compat)
};

enum class Logits { None, Last, All };

class Engine {
 public:
  Engine(const Model& model, const EngineParams& p = {});
  ~Engine();

  const Model& model() const { return model_; }
  const HParams& hp() const { return model_.hp; }
  const EngineParams& params() const { return params_; }
  ThreadPool& pool() { return pool_; }
  PagePool& page_pool() { return *page_pool_; }
  const KvLayout& kv_layout() const { return layout_; }
  AttnShape attn_shape() const;
  std::unique_ptr<KvCache> new_cache() { return std::make_unique<KvCache>(*page_pool_, layout_); }
  // A statistics collector for this model's caches, or null when `req` asks for nothing.
  std::unique_ptr<StatsCollector> new_stats(const StatsRequest& req);

  // Feeds `tokens` at positions cache.n_past() ... and appends their K/V to `cache`.
  // Returns logits: none, the last token's [n_vocab], or all [n_tok][n_vocab] (with a row
  // selector in `hooks`: one row per token still alive at the end, see hooks.logits_rows).
  // Throws kvs::Error if the KV pool cannot hold the new tokens (cap reached).
  std::vector<float> forward(KvCache& cache, std::span<const int32_t> tokens, Logits mode,
                             LayerObserver* observer = nullptr);
  std::vector<float> forward(KvCache& cache, std::span<const int32_t> tokens, Logits mode, const ForwardHooks& hooks);
  // Same with explicit positions (must be increasing and >= cache.n_past()).
  std::vector<float> forward_at(KvCache& cache, std::span<const int32_t> tokens, std::span<const int32_t> pos,
                                Logits mode, const ForwardHooks& hooks = {});

  // One sequence's step in a batched forward (continuous batching: a decode token, or a chunk of
  // a prompt being prefilled, of each sequence in flight).
  struct BatchItem {
    KvCache* cache = nullptr;            // the sequence's own cache
    std::span<const int32_t> tokens;     // fed at positions cache->n_past() ...
    LayerObserver* observer = nullptr;   // sees this sequence's rows only
    bool want_logits = true;             // return the logits of its last token
  };
  // Feeds every item's tokens in shared forward passes of up to n_batch rows: the projections and
  // FFN read the weights once for all sequences; attention runs per sequence over its own cache.
  // Returns per item the last token's logits [n_vocab] (empty when not wanted). Gives the same
  // result as running each item alone. Throws kvs::Error (pool cap, bad tokens) before any item's
  // cache is changed when the whole batch cannot be planned.
  std::vector<std::vector<float>> forward_batch(std::span<const BatchItem> items);
  // The same with the logits left in the engine: per item a span of [n_vocab] (empty when not
  // wanted), valid until the next forward_batch / forward_batch_spans / trim_batch_logits call.
  // Spares a step the allocation and copy of the vectors (16 sequences x a 49k vocabulary: 3 MB
  // faulted in, copied and freed every step). The continuous batching
  // step (runtime/batch_step.h) uses it and calls trim_batch_logits() when done with the spans.
  std::vector<std::span<const float>> forward_batch_spans(std::span<const BatchItem> items);
  // Frees the logits kept for the spans when they are wider than kKeptLogitRows rows (a wide step
  // of many prompt chunks must not pin them for the engine's lifetime).
  void trim_batch_logits();

  // Queries of hidden states entering `layer` (attn_norm, W_q + bias, RoPE), exactly as the
  // forward computes them. hidden [n][n_embd]; rope_cs [n][rope_dim] (cos, sin) pairs, or one row
  // shared by all when rope_shared; q_out [n][n_head][head_dim].
  void project_queries(int layer, const float* hidden, int n, const float* rope_cs, bool rope_shared, float* q_out);
  // Same from the attention block's input (rows already through attn_norm): W_q + bias, RoPE.
  void project_attn_input_queries(int layer, const float* attn_in, int n, const float* rope_cs, bool rope_shared,
                                  float* q_out);

 private:
  arch::Runtime runtime();

  const Model& model_;
  EngineParams params_;
  ThreadPool pool_;
  std::unique_ptr<backend::Backend> backend_;  // the forward's compute (the CPU's, over pool_)
  KvLayout layout_;
  std::unique_ptr<PagePool> page_pool_;
  AttnScratch attn_;
  arch::Activations act_;          // one chunk's activations
  AlignedBuffer<float> probe_xn_;  // [n][n_embd] scratch of project_queries
  // [segments][n_vocab] forward_batch's last-row logits, kept between calls: a fresh 3 MB vector per
  // step (16 sequences, 49k vocabulary) is an mmap, hundreds of zeroed page faults and an munmap
  // every step. Released after a step wider than kKeptLogitRows segments.
  static constexpr int kKeptLogitRows = 64;
  std::vector<float> batch_logits_;
  // [items][n_vocab] the logits of items finished before a batch's last pass (a batch wider than
  // n_batch rows goes in several passes, each overwriting batch_logits_); forward_batch_spans
  // points into it for them.
  std::vector<float> batch_early_;
};

}  // namespace kvs
