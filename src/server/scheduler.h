// The scheduler: the one thread that owns the engine. Requests become Jobs; a bounded queue holds
// those not yet admitted; admitted ones run together by continuous batching (runtime/batch_step.h:
// one forward_batch per step for the next token of every decoding sequence plus prompt chunks of
// the prefilling ones; sequences join and leave between steps).
//
// Admission control (a job is admitted when fewer than `parallel` run and, under a KV cap, its
// worst case fits): every admitted job reserves the pages it may still allocate (its prompt, its
// answer's growth, the copies copy-on-write and compaction may make), stored contexts hold what
// they hold; a job is admitted only if stored + reserved + its reservation fit the cap, so the
// page pool never refuses a step (if an estimate were wrong the pool's own cap still refuses the
// step before any change: the sequence is stopped, never the process). A job that cannot fit even
// an empty server is refused at once (400); one that does not fit now waits in the queue (FIFO)
// until it does, or gets 429 after `queue_timeout_s`; a full queue answers 429 at once.
//
// Cancellation: a job whose client went away is flagged by its handler; between steps the
// scheduler drops it, and its sequence's pages go back to the pool.
#pragma once
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "model/model.h"
#include "runtime/answer_stepper.h"
#include "runtime/context_builder.h"
#include "runtime/engine.h"
#include "server/context_store.h"
#include "server/job.h"
#include "server/metrics.h"

namespace kvs::server {

struct SchedulerOptions {
  int parallel = 16;             // sequences in flight at most
  int max_queue = 64;            // requests waiting for admission at most (429 beyond)
  double queue_timeout_s = 120;  // longest wait for admission (429 after)
  int prefill_chunk = 256;       // prompt tokens fed per step, over all prefilling sequences
  int step_delay_ms = 0;         // pause after every step (tests: a tiny model outruns any client)
};

class Scheduler {
 public:
  // Starts the scheduler thread. The store is restored first (its problems are returned by
  // restore_problems()).
  Scheduler(Engine& engine, ContextStore& store, Metrics& metrics, const SchedulerOptions& opt);
  ~Scheduler();  // shutdown()
  // Stops the thread; running and queued jobs fail with 503 (their handlers return), later
  // submits too. Idempotent.
  void shutdown();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a job. Throws ApiError: 429 when the queue is full, 400 when the job can never fit
  // under the KV cap.
  void submit(std::shared_ptr<Job> job);

  // Stored contexts, for handlers (copies; safe from any thread).
  std::optional<ContextInfo> context_info(const std::string& id) const;
  std::vector<ContextInfo> contexts() const;
  // One page of them in creation order (newest first when `descending`) after the context named
  // `after` ("": from the start); a shared store reads only that page of its index.
  ContextPage contexts_page(const std::string& after, size_t limit, bool descending) const;
  // Drops a context (on the scheduler thread, between steps); false if unknown. Questions
  // running on it finish normally (their forks keep the pages they share until then). Throws
  // the shared store's ApiError (503, 409).
  bool remove_context(const std::string& id);
  // Throws ApiError 503 when a new context could not be stored now (a shared store that is down).
  void check_context_store() const;

  // Seconds a refused client should wait before retrying (429's Retry-After): the queue ahead of
  // it times the mean time a request runs, over the parallel slots; 1..60.
  int retry_after_s() const;

  const std::vector<std::string>& restore_problems() const { return restore_problems_; }
  const Engine& engine() const { return engine_; }

  // Worst-case pages a job may allocate (its reservation); `ctx` is its stored context, if any.
  size_t estimate_pages(const JobInput& in, const ServedContext* ctx) const;

 private:
  struct Active;
  void loop();
  void run_commands(std::unique_lock<std::mutex>& l);
  void expire_queue();
  void admit();
  bool start(std::shared_ptr<Job> job);  // false: refused (the job was failed)
  void drop_cancelled();
  void count_unfinished(const Active& a);  // tokens of a job that leaves without finish()
  void step();
  void publish(Active& a);
  void publish_prompt_scores(Active& a);  // once the prompt is prefilled (JobInput::score_prompt)
  void publish_token_logprobs(Active& a);  // the answer's log-probabilities not yet in the job
  void finish(Active& a);
  void fail(Active& a, const std::string& message, bool out_of_memory);
  void publish_gauges();
  // The store's TTL and resident budget (at most every 200 ms), and the handlers' copy of the
  // contexts' infos (resident flags, contexts the store deleted).
  void sync_contexts();
  size_t context_pages() const;  // pages of stored contexts and of deleted ones still answered from
  size_t pinned_pages(const ServedContext* ctx) const;  // of those, what `ctx` and the sequences in flight hold
  // Frees room under the cap for `pages` more (stored contexts not in use go to disk; without a
  // file they are deleted when that admits the request now). False: wait.
  bool make_room(size_t pages, const ServedContext* ctx);
  size_t reserved_pages() const;
  size_t cap_pages() const;
  std::string new_context_id();

  Engine& engine_;
  ContextStore& store_;
  Metrics& metrics_;
  SchedulerOptions opt_;
  std::vector<std::string> restore_problems_;

  mutable std::mutex mu_;  // guards queue_, commands_, infos_, stop_
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::vector<std::function<void()>> commands_;
  std::map<std::string, ContextInfo> infos_;
  std::chrono::steady_clock::time_point last_sync_{};  // scheduler thread only
  bool stop_ = false;
  std::atomic<double> mean_run_s_{1.0};  // moving average of admission-to-end time

  std::vector<std::unique_ptr<Active>> active_;  // scheduler thread only
  std::mt19937_64 rng_;
  uint64_t context_seq_ = 0;  // creation order of contexts (scheduler thread)
  std::thread thread_;
};

}  // namespace kvs::server
