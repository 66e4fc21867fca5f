// The query-agnostic pipeline: prefill a context once, compress it (before any question is
// seen), then answer each question on a fork of the compressed cache, dropping the fork after.
// A press with a decode trigger (H2O, TOVA) keeps evicting on the fork while answering.
// `query_aware` instead compresses context + question together, per question (for comparison:
// a question inside SnapKV's window flatters it).
#pragma once
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "press/press.h"
#include "press/stats.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace kvs {

struct CompressionSpec {
  Press press;
  CompressRequest request;
  Trigger trigger;  // usually press.trigger
};

struct AnswerOptions {
  int max_new_tokens = 64;
  SamplerParams sampler;                 // greedy by default
  std::vector<std::string> stop;         // stop once the text contains one of these (not included)
  bool stop_at_eog = true;
};

struct Answer {
  std::vector<int32_t> tokens;
  std::string text;
  double prefill_seconds = 0;   // question (or context+question when query-aware)
  double decode_seconds = 0;
  double compress_seconds = 0;  // decode-time eviction, or all compression when query-aware
  size_t kv_bytes_peak = 0;     // largest KV bytes the sequence held while answering
  size_t kv_bytes_end = 0;
  int32_t max_head_len_end = 0; // longest KV head when the answer ended
};

class CompressedContext {
 public:
  CompressedContext(Engine& engine, CompressionSpec spec);

  // Prefills the context (collecting the statistics the press needs) and compresses it once
  // (OnPrefill / EveryN triggers) or whenever the pool passes the cap (MemoryCap).
  void prefill(std::span<const int32_t> context);
  // As above, collecting `extra` statistics besides the press's own, so that other presses can
  // be derived from this prefill (compress_from).
  void prefill(std::span<const int32_t> context, const StatsRequest& extra);
  // Compresses a copy-on-write fork of `base`'s prefilled, uncompressed cache with this context's
  // press, using a copy of base's statistics (they must include this press's needs). One prefill
  // then serves a whole grid of presses and keep ratios. Not for MemoryCap triggers (those
  // compress during prefill): they prefill afresh.
  void compress_from(const CompressedContext& base);
  // Answers on a fork; the compressed context is left untouched.
  Answer ask(std::span<const int32_t> question, const AnswerOptions& opt);
  // Query-aware baseline: prefill context + question into a fresh cache, compress, answer.
  // Needs prefill() to have been called (it reuses the context tokens, not the cache).
  Answer ask_query_aware(std::span<const int32_t> question, const AnswerOptions& opt);

  // Replaces the cache (loading a saved compressed context); statistics are not restored: a press
  // that evicts while decoding restarts its accumulation from zero for the loaded slots.
  void adopt(std::unique_ptr<KvCache> cache, size_t full_bytes, size_t full_slots);

  KvCache& cache() { return *cache_; }
  const KvCache& cache() const { return *cache_; }
  const CompressionSpec& spec() const { return spec_; }
  // KV bytes/slots the context held before compression, and after.
  size_t full_bytes() const { return full_bytes_; }
  size_t full_slots() const { return full_slots_; }
  const CompressResult& result() const { return result_; }
  double prefill_seconds() const { return prefill_s_; }
  int32_t context_tokens() const { return n_context_; }

 private:
  std::unique_ptr<StatsCollector> make_stats(const StatsRequest& extra = {}) const;
  void finish_prefill();
  void maybe_compress_for_cap(KvCache& c, StatsCollector* st, int n_next);
  // Continues generation from `logits` on `c`, evicting per the decode trigger.
  Answer decode(KvCache& c, StatsCollector* st, std::vector<float> logits, const AnswerOptions& opt, int32_t budget);

  Engine& engine_;
  CompressionSpec spec_;
  std::unique_ptr<KvCache> cache_;
  std::unique_ptr<StatsCollector> stats_;
  std::vector<int32_t> context_;  // kept for query-aware mode
  CompressResult result_;
  size_t full_bytes_ = 0, full_slots_ = 0;
  double prefill_s_ = 0;
  int32_t n_context_ = 0;
  int32_t decode_budget_ = 0;  // per-head tokens decode-time eviction keeps
};

}  // namespace kvs
