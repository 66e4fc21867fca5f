// One answer generated step by step: CompressedContext::ask (prefill the question on a sequence,
// then decode with decode-time eviction) split so that a scheduler can advance many answers with
// one Engine::forward_batch per step (runtime/batch_step.h). For the same sequence, press and
// options it produces the same tokens as ask() (greedy; tested in tests/server), with the same
// semantics:
//   - decode-time eviction (EveryN triggers, a press that is not `full`, a request that does not
//     keep everything) keeps each head at what the sequence holds once the question is in
//     (mean_head_len after the question's prefill), every N decode steps;
//   - a MemoryCap trigger compresses before a step that would take THIS sequence's KV bytes past
//     the cap (CompressedContext counts the whole pool, which holds one sequence there; a server's
//     pool holds many);
//   - stop at an end-of-generation token (unless told not to), at a stop string (the text is cut
//     before it) or after max_new_tokens tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/batch_step.h"
#include "runtime/context_builder.h"
#include "runtime/sampler.h"
#include "runtime/session.h"
#include "runtime/token_logprobs.h"

namespace kvs {

enum class FinishReason { None, Stop, Length };

class AnswerStepper : public Stepper {
 public:
  // seq: the sequence to answer on, owned from here (a fork of a compressed context, a freshly
  // compressed prompt, or an empty sequence); question: tokens to prefill (non-empty); spec: the
  // press the sequence was compressed with (`full` for none); source: the context `seq` came
  // from, for the model probe of decode-time eviction (its tokens and NLL; may be null).
  AnswerStepper(Engine& engine, Sequence seq, CompressionSpec spec, std::vector<int32_t> question,
                AnswerOptions opt, std::shared_ptr<const BuiltContext> source = nullptr);

  Phase phase() const override { return phase_; }
  int64_t prefill_left() const override { return static_cast<int64_t>(question_.size()) - fed_; }
  // With AnswerOptions::score_question the question is prefilled alone, in chunks whose logits
  // are kept at every position (forward_batch keeps only the last row's).
  bool runs_alone() const override { return opt_.score_question && phase_ == Phase::Prefill; }
  void run_alone() override;
  Engine::BatchItem next_item(int max_rows) override;
  void after_step(std::span<const float> logits) override;
  // Samples now when after_step will sample from these logits (the same draw: the sampler is this
  // stepper's own), and after_step uses that token.
  void presample(std::span<const float> logits) noexcept override;

  // What has been generated so far (text cut at a stop string once one appears).
  const std::vector<int32_t>& tokens() const { return tokens_; }
  // AnswerOptions::logprobs >= 0: one entry per token in tokens() (and one more for an
  // end-of-generation token that stopped the answer); with score_question, one per
  // question token after the first (entry k scores question[k + 1]).
  const std::vector<TokenLogprob>& token_logprobs() const { return token_lp_; }
  const std::vector<TokenLogprob>& question_logprobs() const { return question_lp_; }
  const std::string& text() const { return text_; }
  FinishReason finish_reason() const { return finish_; }
  const Sequence& sequence() const { return seq_; }
  // Whether an answer under `spec` can compress while it runs (a decode trigger: every:N or
  // memory:, and a press that is not `full`). Only then does it keep the sequence's statistics
  // (which only its own compressions read) and collect them for its rows; otherwise it drops them
  // at construction, and a caller forking a context for it can fork without them.
  static bool compresses_while_answering(const CompressionSpec& spec);
  int32_t n_question() const { return static_cast<int32_t>(question_.size()); }
  size_t kv_bytes_peak() const { return peak_; }
  int32_t decode_budget() const { return budget_; }
  int evictions() const { return evictions_; }  // decode-time compressions (every:N and memory: triggers)
  double compress_seconds() const { return compress_s_; }

 private:
  // Samples from `logits` (or takes presample's token); finishes or readies the next decode token.
  void sample(std::span<const float> logits);
  // Whether after_step's next call samples (the decode phase, or the prefill's last chunk).
  bool samples_next() const;
  void compress_for_cap(int n_next);

  Engine& engine_;
  Sequence seq_;
  CompressionSpec spec_;
  std::vector<int32_t> question_;
  AnswerOptions opt_;
  std::shared_ptr<const BuiltContext> source_;
  Sampler sampler_;
  Phase phase_ = Phase::Prefill;
  FinishReason finish_ = FinishReason::None;
  int64_t fed_ = 0, pending_ = 0;
  std::vector<int32_t> tokens_;
  std::vector<TokenLogprob> token_lp_, question_lp_;
  std::string text_;
  int32_t next_ = -1;       // the token the next decode step feeds
  int32_t presampled_ = -1;  // presample's token for the next sample(), or -1
  bool evict_ = false;
  int32_t budget_ = 0;
  size_t peak_ = 0;
  int evictions_ = 0;
  double compress_s_ = 0;
};

}  // namespace kvs
