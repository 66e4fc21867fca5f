// A compressed context built step by step: what CompressedContext::prefill does in one call
// (prefill with the statistics the press needs, then compress once), split into prompt chunks so
// that a scheduler can interleave them with other sequences' decode steps (runtime/batch_step.h).
//
// Presses whose prefill cannot go through Engine::forward_batch — they need every context logit
// (Needs::context_nll), prune rows while prefilling (Scorer::prunes_prefill) or compress during
// the prefill under a memory trigger — are prefilled whole by CompressedContext in one step
// (whole() is true): the same result, but that step holds the engine for the whole prefill.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "runtime/batch_step.h"
#include "runtime/compression_spec.h"
#include "runtime/session.h"

namespace kvs {

// A prefilled, compressed context: the sequence answers fork from, its press, what the model
// probe needs (the context's tokens and NLL) and what compression kept.
struct BuiltContext {
  CompressionSpec spec;
  Sequence seq;
  std::vector<int32_t> tokens;  // the context's tokens (a cache loaded from a file: its context_ids, or empty)
  std::vector<float> nll;       // [n - 1] per-token NLL, when the press asked for it
  size_t full_bytes = 0;        // KV bytes / slots of the uncompressed context (whole pages)
  size_t full_slots = 0;
  size_t kept_slots = 0;        // slots held once compressed (the sequence may be moved out later)
  CompressResult result;        // of the compression after prefill
  int32_t n_tokens = 0;
  double prefill_seconds = 0, compress_seconds = 0;
  // Fraction of the context's slots kept, and what an adaptive press chose.
  double keep_measured() const;
  std::optional<double> keep_chosen() const { return result.keep_chosen; }
};

// KV bytes / slots of `n` uncompressed tokens in every head (whole pages), as
// CompressedContext::full_bytes() counts them.
size_t full_context_bytes(const KvLayout& l, int64_t n);

class ContextBuilder : public Stepper {
 public:
  // tokens: the context (non-empty). Throws kvs::Error for an empty context.
  ContextBuilder(Engine& engine, CompressionSpec spec, std::vector<int32_t> tokens);

  // True when this press's prefill runs whole in one step (see the file comment).
  static bool needs_whole_prefill(const CompressionSpec& spec);
  bool whole() const { return whole_; }

  Phase phase() const override { return done_ ? Phase::Done : Phase::Prefill; }
  int64_t prefill_left() const override { return static_cast<int64_t>(out_.tokens.size()) - fed_; }
  bool runs_alone() const override { return whole_ && !done_; }
  void run_alone() override;
  Engine::BatchItem next_item(int max_rows) override;
  void after_step(std::span<const float> logits) override;

  // The context, once phase() is Done (moves it out).
  BuiltContext take();

 private:
  void finish();

  Engine& engine_;
  BuiltContext out_;
  bool whole_ = false, done_ = false;
  int64_t fed_ = 0, pending_ = 0;  // tokens fed; tokens in the item handed out
  double prefill_s_ = 0;
};

}  // namespace kvs
