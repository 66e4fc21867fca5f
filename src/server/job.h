// One request's work as the scheduler sees it (the input the handler prepared) and as the handler
// sees it (a snapshot of the progress, updated by the scheduler after every step, waited on by
// the handler). Cancelling (the client went away) is a flag the scheduler reads between steps.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/session.h"
#include "runtime/token_logprobs.h"
#include "server/api_error.h"
#include "server/api_request.h"
#include "server/served_context.h"

namespace kvs::server {

struct JobInput {
  enum class Kind { Generate, CreateContext };
  Kind kind = Kind::Generate;
  std::string context_id;       // Generate: answer from this stored context (empty: a fresh sequence)
  std::vector<int32_t> tokens;  // Generate: the prompt (fresh) or the question (context); CreateContext: the context
  Compression compression;      // of a fresh prompt (its last token is the question) or of a new context
  AnswerOptions answer;         // Generate
  ContextInfo context;          // CreateContext: format, roles and compression echo of the new context
  // Generate with echo + logprobs: the log-probability of every prompt token after the first
  // (answer.logprobs most likely tokens each); see Job::prompt_logprobs().
  bool score_prompt = false;
};

// What a finished generation used (OpenAI's usage plus the KV figures).
struct JobUsage {
  int64_t prompt_tokens = 0;   // context + prompt tokens the answer attends to
  int64_t cached_tokens = 0;   // of which came from a stored context (not prefilled by this request)
  int64_t completion_tokens = 0;
  size_t kv_bytes_full = 0;    // what the sequence would hold uncompressed (whole pages)
  size_t kv_bytes_held = 0;    // what it held at the end
  size_t kv_bytes_peak = 0;
  double keep_ratio = 1.0;     // fraction of the context's slots kept by compression
  std::optional<double> keep_chosen;
  std::string press = "full";
  int evictions = 0;           // decode-time compressions
  bool kv_memory_exhausted = false;  // stopped early: the KV pool's cap was reached
  double queued_s = 0, prefill_s = 0, decode_s = 0;  // wall time in the queue, to the first token, after it
};

struct JobSnapshot {
  enum class State { Queued, Running, Done, Failed, Cancelled };
  State state = State::Queued;
  uint64_t version = 0;
  std::string text;             // generated so far (Generate)
  int64_t n_generated = 0;
  size_t n_logprobs = 0;        // generated tokens' log-probabilities published (Job::logprobs)
  bool prompt_scored = false;   // Job::prompt_logprobs() is set (JobInput::score_prompt, once prefilled)
  std::string finish_reason;    // "stop" | "length" when Done
  JobUsage usage;
  std::optional<ApiError> error;   // when Failed
  std::optional<ContextInfo> context;  // CreateContext, when Done
};

class Job {
 public:
  explicit Job(JobInput in) : input(std::move(in)), enqueued(std::chrono::steady_clock::now()) {}
  JobInput input;
  const std::chrono::steady_clock::time_point enqueued;

  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  // Handler side: waits until the snapshot's version passes `seen` or `timeout` elapses (a
  // streamed answer: every token is progress).
  JobSnapshot wait(uint64_t seen, std::chrono::milliseconds timeout);
  // Handler side, an answer sent whole: waits until done(snapshot) or `timeout` elapses, woken only
  // when the job's state changes (admitted, finished, failed, cancelled), not at every token — a
  // handler thread per request woken every decode step takes the compute threads' cores once per
  // sequence and step.
  JobSnapshot wait_for_state(bool (*done)(const JobSnapshot&), std::chrono::milliseconds timeout);
  JobSnapshot snapshot();

  // Scheduler side.
  void update(const std::function<void(JobSnapshot&)>& fn);
  void fail(const ApiError& e);
  // Appends generated tokens' log-probabilities (append-only, so that a streamed answer copies
  // only what is new) and sets the snapshot's n_logprobs; sets the prompt's (before Done).
  void add_logprobs(std::span<const TokenLogprob> more);
  void set_prompt_logprobs(std::vector<TokenLogprob> lp);

  // Handler side: entries [from, to) of the generated tokens' log-probabilities; the prompt's
  // (JobInput::score_prompt; entry k scores prompt token k + 1).
  std::vector<TokenLogprob> logprobs(size_t from, size_t to);
  std::vector<TokenLogprob> prompt_logprobs();

 private:
  std::vector<TokenLogprob> logprobs_, prompt_logprobs_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;        // every update
  std::condition_variable state_cv_;  // updates that change s_.state
  JobSnapshot s_;
};

}  // namespace kvs::server
