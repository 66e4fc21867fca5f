// The query-agnostic pipeline: prefill a context once, compress it (before any question is
// seen), then answer each question on a fork of the compressed cache, dropping the fork after.
// A press with a decode trigger (H2O, TOVA) keeps evicting on the fork while answering.
// `query_aware` instead compresses context + question together, per question (for comparison:
// a question inside SnapKV's window flatters it): set_context() keeps the context's tokens without
// prefilling them, and each ask_query_aware() prefills context + question once and reports the
// compression it answered from (Answer::compression).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "press/press.h"
#include "press/stats.h"
#include "runtime/compression_spec.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"

namespace kvs {

// One sequence's compressible state: its cache, the statistics its press collects and the press's
// per-sequence state. fork() shares the cache copy-on-write and copies the rest (the statistics
// only when with_stats: a fork that will not compress has no use for them).
struct Sequence {
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<StatsCollector> stats;  // null when the press needs none
  PressState state;
  Sequence fork(bool with_stats = true) const;
};

// Mean tokens held per (layer, KV head), rounded: the per-head budget that keeps a sequence's
// memory where it is (decode-time eviction while answering).
int32_t mean_head_len(const KvCache& cache);

// Evicts every head of `seq` back to `budget` tokens (CompressRequest::max_tokens) with the
// spec's press; returns what compress() reports. Decode-time eviction and streaming perplexity.
CompressResult evict_to_budget(Engine& engine, Sequence& seq, const CompressionSpec& spec, int32_t budget,
                               ModelProbe* probe = nullptr);

struct AnswerOptions {
  int max_new_tokens = 64;
  SamplerParams sampler;                 // greedy by default
  std::vector<std::string> stop;         // stop once the text contains one of these (not included)
  bool stop_at_eog = true;
  // >= 0: AnswerStepper records the log-probability of each token it generates (and, with
  // score_question, of each question token after the first) with this many most likely tokens.
  int logprobs = -1;
  bool score_question = false;
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
  int32_t decode_budget = 0;    // per-head tokens decode-time eviction kept (0: no eviction)
  // Query-aware answers: the compression of context + question this answer was generated from
  // (slots_before / bytes_before: every context and question token in every head, in whole pages,
  // as CompressedContext::full_slots / full_bytes count a context; after: what the cache held once
  // compressed, before the answer's first token). Empty for query-agnostic answers.
  std::optional<CompressResult> compression;
};

class CompressedContext {
 public:
  CompressedContext(Engine& engine, CompressionSpec spec);

  // Prefills the context (collecting what the press needs: statistics, the context's NLL) and
  // compresses it once (OnPrefill / EveryN triggers) or whenever the pool passes the cap
  // (MemoryCap). `extra` asks for more, so that other presses can be derived from this prefill
  // (compress_from).
  void prefill(std::span<const int32_t> context, const Needs& extra = {});
  // Query-aware use only: keeps the context's tokens without prefilling or compressing them (the
  // cache stays empty; full_slots / full_bytes are the context's). Each ask_query_aware() then
  // prefills context + question once, so nothing is prefilled only to be thrown away.
  void set_context(std::span<const int32_t> context);
  // Compresses a copy-on-write fork of `base`'s prefilled, uncompressed cache with this context's
  // press, using the part of base's statistics this press needs (so that answering collects only
  // its own). One prefill then serves a whole grid of presses and keep ratios. Not for MemoryCap
  // triggers (those compress during prefill): they prefill afresh.
  void compress_from(const CompressedContext& base);
  // Answers on a fork; the compressed context is left untouched.
  Answer ask(std::span<const int32_t> question, const AnswerOptions& opt);
  // Query-aware baseline: prefill context + question into a fresh cache, compress, answer; the
  // answer's `compression` is that compression. Needs set_context() or prefill() first (it reuses
  // the context tokens, not the cache).
  Answer ask_query_aware(std::span<const int32_t> question, const AnswerOptions& opt);
  // The sequence ask_query_aware answers from: context + question prefilled into a fresh cache
  // and compressed; the question's last logits go to `logits`, the compression to `result`.
  Sequence prefill_query_aware(std::span<const int32_t> question, std::vector<float>* logits,
                               double* prefill_seconds = nullptr, double* compress_seconds = nullptr,
                               CompressResult* result = nullptr);

  // Replaces the cache (loading a saved compressed context); statistics are not restored: a press
  // that evicts while decoding restarts its accumulation from zero for the loaded slots. The
  // press state saved with the cache is restored.
  void adopt(std::unique_ptr<KvCache> cache, size_t full_bytes, size_t full_slots, PressState state = {});

  KvCache& cache() { return *seq_.cache; }
  const KvCache& cache() const { return *seq_.cache; }
  const StatsCollector* stats() const { return seq_.stats.get(); }
  const PressState& press_state() const { return seq_.state; }
  const CompressionSpec& spec() const { return spec_; }
  // KV bytes/slots the context held before compression, and after.
  size_t full_bytes() const { return full_bytes_; }
  size_t full_slots() const { return full_slots_; }
  const CompressResult& result() const { return result_; }
  // Fraction of the context's slots kept (measured), and what an adaptive press chose.
  double keep_measured() const { return full_slots_ ? static_cast<double>(cache().total_slots()) / full_slots_ : 1.0; }
  std::optional<double> keep_chosen() const { return result_.keep_chosen; }
  double prefill_seconds() const { return prefill_s_; }
  int32_t context_tokens() const { return n_context_; }
  // The context's token ids as prefilled (empty for a cache adopted from a file).
  const std::vector<int32_t>& context_ids() const { return context_; }
  // Per-token NLL of the context ([n - 1]; empty unless the press asked for it).
  const std::vector<float>& context_nll() const { return nll_; }
  // Called after every prefill chunk (context, or question on a fork) with the tokens fed so far
  // and the tokens of that prefill: a progress display (core/progress.h). Empty: none.
  void set_prefill_progress(std::function<void(size_t done, size_t total)> fn) { on_prefill_ = std::move(fn); }

 private:
  void compress_for_cap(Sequence& s, int n_next);
  void finish_prefill();
  // Prefills `tokens` into `s` (statistics, NLL when needed); returns the last logits if asked.
  std::vector<float> run_prefill(Sequence& s, std::span<const int32_t> tokens, bool last_logits,
                                 std::vector<float>* nll);
  // Continues generation from `logits` on `s`, evicting per the decode trigger.
  Answer decode(Sequence& s, std::vector<float> logits, const AnswerOptions& opt);

  Engine& engine_;
  CompressionSpec spec_;
  Sequence seq_;
  std::vector<int32_t> context_;  // kept for query-aware mode and the probe
  std::vector<float> nll_;
  CompressResult result_;
  size_t full_bytes_ = 0, full_slots_ = 0;
  size_t prefilled_slots_ = 0;  // slots held right after the context's prefill, before compression
  double prefill_s_ = 0;
  int32_t n_context_ = 0;
  std::function<void(size_t, size_t)> on_prefill_;
};

}  // namespace kvs
