#include "server/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <future>
#include <set>

#include "core/error.h"
#include "core/timer.h"

namespace kvs::server {

using Clock = std::chrono::steady_clock;

struct Scheduler::Active {
  std::shared_ptr<Job> job;
  std::shared_ptr<ServedContext> ctx;             // the stored context answered from
  std::unique_ptr<ContextBuilder> builder;        // a context being built (or a compressed prompt)
  std::shared_ptr<const BuiltContext> built;      // the compressed prompt an answer continues
  std::unique_ptr<AnswerStepper> answer;
  // A compressed prompt whose tokens are scored (echo + logprobs): the full-cache pass over the
  // context that scores its tokens, run first on a cache of its own, then dropped.
  std::unique_ptr<AnswerStepper> scorer;
  std::vector<TokenLogprob> context_lp;           // what the scorer recorded
  size_t reserved = 0;                            // pages (admission control)
  Timer t;                                        // since admission
  double queued_s = 0, first_token_s = -1;
  size_t published = 0;                           // tokens published to the job
  size_t published_lp = 0;                        // of their log-probabilities
  bool prompt_published = false;                  // Job::set_prompt_logprobs done
  Stepper* stepper() {
    if (scorer) return scorer.get();
    return answer ? static_cast<Stepper*>(answer.get()) : builder.get();
  }
};

namespace {

size_t ceil_div(int64_t a, int64_t b) { return static_cast<size_t>((a + b - 1) / b); }

}  // namespace

Scheduler::Scheduler(Engine& engine, ContextStore& store, Metrics& metrics, const SchedulerOptions& opt)
    : engine_(engine), store_(store), metrics_(metrics), opt_(opt), rng_(std::random_device{}()) {
  if (opt_.parallel < 1) kvs::fail("--parallel must be >= 1, got {}", opt_.parallel);
  if (opt_.max_queue < 0) kvs::fail("--max-queue must be >= 0, got {}", opt_.max_queue);
  if (opt_.prefill_chunk < 1) kvs::fail("--prefill-chunk must be >= 1, got {}", opt_.prefill_chunk);
  restore_problems_ = store_.restore();
  store_.maintain(static_cast<int64_t>(std::time(nullptr)));
  for (const ContextInfo& i : store_.list()) infos_[i.id] = i;
  publish_gauges();
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown(); }

void Scheduler::shutdown() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (!thread_.joinable()) return;
  thread_.join();
  const ApiError bye(503, "the server is shutting down", "server_error", "", "shutting_down");
  for (auto& a : active_) {
    count_unfinished(*a);
    a->job->fail(bye);
  }
  active_.clear();
  std::deque<std::shared_ptr<Job>> queued;
  std::vector<std::function<void()>> cmds;
  {
    std::lock_guard<std::mutex> l(mu_);
    queued.swap(queue_);
    cmds.swap(commands_);
  }
  for (auto& j : queued) j->fail(bye);
  for (auto& c : cmds) c();
}

void Scheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) throw ApiError(503, "the server is shutting down", "server_error", "", "shutting_down");
    if (static_cast<int>(queue_.size()) >= opt_.max_queue && !(queue_.empty() && opt_.max_queue == 0)) {
      metrics_.rejected("queue_full");
      throw too_many_requests(fmt::format("the server is busy: {} requests are already waiting; retry later", queue_.size()),
                              "queue_full");
    }
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
}

int Scheduler::retry_after_s() const {
  size_t queued = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    queued = queue_.size();
  }
  const double s = (static_cast<double>(queued) + 1) * mean_run_s_.load() / opt_.parallel;
  return static_cast<int>(std::clamp(std::ceil(s), 1.0, 60.0));
}

std::optional<ContextInfo> Scheduler::context_info(const std::string& id) const {
  if (store_.shared()) return store_.lookup(id);  // thread-safe; the shared store is the truth
  std::lock_guard<std::mutex> l(mu_);
  const auto it = infos_.find(id);
  if (it == infos_.end()) return std::nullopt;
  return it->second;
}

std::vector<ContextInfo> Scheduler::contexts() const {
  if (store_.shared()) return store_.lookup_all();  // in creation order
  std::lock_guard<std::mutex> l(mu_);
  std::vector<ContextInfo> out;
  for (const auto& [id, i] : infos_) out.push_back(i);
  std::sort(out.begin(), out.end(), [](const ContextInfo& a, const ContextInfo& b) {
    if (a.created != b.created) return a.created < b.created;
    return a.seq != b.seq ? a.seq < b.seq : a.id < b.id;
  });
  return out;
}

ContextPage Scheduler::contexts_page(const std::string& after, size_t limit, bool descending) const {
  if (store_.shared()) return store_.lookup_page(after, limit, descending);
  std::vector<ContextInfo> all = contexts();  // oldest first
  if (descending) std::reverse(all.begin(), all.end());
  ContextPage page;
  size_t start = 0;
  if (!after.empty()) {
    const auto it = std::find_if(all.begin(), all.end(), [&](const ContextInfo& i) { return i.id == after; });
    if (it == all.end()) {
      page.after_found = false;
      return page;
    }
    start = static_cast<size_t>(it - all.begin()) + 1;
  }
  const size_t end = std::min(all.size(), start + limit);
  page.data.assign(all.begin() + static_cast<std::ptrdiff_t>(start), all.begin() + static_cast<std::ptrdiff_t>(end));
  page.has_more = end < all.size();
  return page;
}

bool Scheduler::remove_context(const std::string& id) {
  auto done = std::make_shared<std::promise<bool>>();
  std::future<bool> f = done->get_future();
  {
    std::lock_guard<std::mutex> l(mu_);
    if (stop_) return false;
    commands_.push_back([this, id, done] {
      bool removed = false;
      try {
        removed = store_.remove(id);
      } catch (const ApiError&) {
        done->set_exception(std::current_exception());  // a shared store: 503 (unreachable), 409 (another model)
        return;
      } catch (...) {
      }
      if (removed) {
        std::lock_guard<std::mutex> g(mu_);
        infos_.erase(id);
      }
      done->set_value(removed);
    });
  }
  cv_.notify_all();
  return f.get();  // rethrows the ApiError
}

void Scheduler::check_context_store() const { store_.check_writable(); }

size_t Scheduler::cap_pages() const {
  const PagePool& p = const_cast<Engine&>(engine_).page_pool();
  return p.max_bytes() ? p.max_bytes() / p.page_bytes() : 0;
}

size_t Scheduler::context_pages() const {
  std::set<const KvCache*> seen;
  size_t pages = 0;
  auto add = [&](const ServedContext* c) {
    if (!c || !c->built || !c->built->seq.cache) return;
    if (seen.insert(c->built->seq.cache.get()).second) pages += c->built->seq.cache->pages_held();
  };
  for (const auto& c : store_.all()) add(c.get());
  for (const auto& a : active_) add(a->ctx.get());
  return pages;
}

size_t Scheduler::reserved_pages() const {
  size_t r = 0;
  for (const auto& a : active_) r += a->reserved;
  return r;
}

size_t Scheduler::estimate_pages(const JobInput& in, const ServedContext* ctx) const {
  const KvLayout& l = engine_.kv_layout();
  const int64_t pt = l.page_tokens;
  const size_t heads = static_cast<size_t>(l.n_heads_total());
  const int64_t n = static_cast<int64_t>(in.tokens.size());
  const int64_t m = in.answer.max_new_tokens;
  if (in.kind == JobInput::Kind::CreateContext) return heads * (ceil_div(n, pt) + 1);
  if (!ctx) {
    // A fresh sequence: every head holds at most every token of the prompt and the answer; a
    // compressed prompt compacts its own (unshared) pages in place.
    const bool compressed = !in.compression.spec.press.is_full();
    // A compressed prompt whose tokens are scored holds the scorer's full cache of it first.
    const size_t scorer = compressed && in.score_prompt ? heads * (ceil_div(n, pt) + 1) : 0;
    return heads * (ceil_div(n + m, pt) + (compressed ? 2 : 0)) + scorer;
  }
  // A fork of a stored context: the shared last page is copied at the first append, then the
  // question and answer take fresh pages; decode-time eviction or a memory trigger compacts shared
  // pages into fresh copies of what each head keeps.
  const CompressionSpec& spec = ctx->built->spec;
  const int64_t L = ctx->built->seq.cache->max_len();
  const size_t plain = heads * (2 + ceil_div(n + m, pt));
  const bool evicts = !spec.press.is_full() && !spec.request.keeps_everything();
  if (evicts && spec.trigger.kind == Trigger::Kind::EveryN && m > spec.trigger.every_n) {
    const int64_t every = spec.trigger.every_n;
    return std::min(plain + heads * ceil_div(L + n + m, pt),
                    heads * (3 + ceil_div(n + every, pt) + ceil_div(L + n + 2 * every, pt)));
  }
  if (evicts && spec.trigger.kind == Trigger::Kind::MemoryCap) return plain + heads * ceil_div(L + n + m, pt);
  return plain;
}

std::string Scheduler::new_context_id() {
  for (;;) {
    const std::string id = fmt::format("ctx_{:016x}{:08x}", rng_(), static_cast<uint32_t>(rng_()));
    if (!store_.contains(id)) return id;
  }
}

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> l(mu_);
      if (active_.empty())
        cv_.wait_for(l, std::chrono::milliseconds(20), [&] { return stop_ || !commands_.empty() || !queue_.empty(); });
      if (stop_) return;
      run_commands(l);
    }
    try {
      expire_queue();
      drop_cancelled();
      sync_contexts();  // TTL, resident budget; the handlers' list of contexts
      admit();
      if (!active_.empty()) {
        step();
        if (opt_.step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt_.step_delay_ms));
      }
    } catch (const std::exception& e) {
      // Nothing a client sends should get here; if something does, the jobs in flight fail and
      // the server goes on.
      fmt::print(stderr, "kvshrink serve: internal error in a step: {}\n", e.what());
      const ApiError err(500, fmt::format("internal error: {}", e.what()), "server_error");
      for (auto& a : active_) a->job->fail(err);
      active_.clear();
    }
    publish_gauges();
  }
}

void Scheduler::run_commands(std::unique_lock<std::mutex>& l) {
  if (commands_.empty()) return;
  std::vector<std::function<void()>> cmds;
  cmds.swap(commands_);
  l.unlock();
  for (auto& c : cmds) c();
  l.lock();
}

void Scheduler::expire_queue() {
  std::vector<std::shared_ptr<Job>> expired, cancelled;
  {
    std::lock_guard<std::mutex> l(mu_);
    const auto now = Clock::now();
    for (auto it = queue_.begin(); it != queue_.end();) {
      if ((*it)->cancelled()) {
        cancelled.push_back(*it);
        it = queue_.erase(it);
      } else if (std::chrono::duration<double>(now - (*it)->enqueued).count() > opt_.queue_timeout_s) {
        expired.push_back(*it);
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& j : cancelled) {
    metrics_.cancelled();
    j->update([](JobSnapshot& s) { s.state = JobSnapshot::State::Cancelled; });
  }
  for (auto& j : expired) {
    metrics_.rejected("queue_timeout");
    j->fail(too_many_requests(fmt::format("the server is busy: not admitted within {} s (KV memory or parallel "
                                          "sequences in use); retry later",
                                          opt_.queue_timeout_s),
                              "queue_timeout"));
  }
}

void Scheduler::admit() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (queue_.empty() || static_cast<int>(active_.size()) >= opt_.parallel) return;
      job = queue_.front();
    }
    std::shared_ptr<ServedContext> ctx;
    const JobInput& in = job->input;
    const size_t cap = cap_pages();
    const size_t pb = engine_.page_pool().page_bytes();
    if (!in.context_id.empty()) {
      // A context on disk only is loaded back into the page pool: under the cap, room is made
      // first (resident contexts not in use go to disk); while sequences in flight hold the rest,
      // the job waits (first come, first served) instead of failing the load.
      if (const size_t load = cap ? ceil_div(static_cast<int64_t>(store_.load_bytes(in.context_id)), static_cast<int64_t>(pb)) : 0;
          load > 0) {
        if (load > cap) {
          {
            std::lock_guard<std::mutex> l(mu_);
            queue_.pop_front();
          }
          metrics_.rejected("kv_memory");
          job->fail(bad_request(fmt::format("context '{}' holds {} bytes of KV cache, more than the server's cap of {} "
                                            "bytes (--max-kv-bytes): it cannot be loaded by this server",
                                            in.context_id, load * pb, cap * pb),
                                "context_id", "kv_memory_exceeded"));
          continue;
        }
        if (!make_room(load, nullptr)) return;
      }
      try {
        ctx = store_.get(in.context_id);  // loaded back from disk (or Redis) if it is not in memory
      } catch (const ApiError& e) {  // a shared store: 503 (unreachable), 409 (another model)
        {
          std::lock_guard<std::mutex> l(mu_);
          queue_.pop_front();
        }
        job->fail(e);
        continue;
      } catch (const std::exception& e) {
        {
          std::lock_guard<std::mutex> l(mu_);
          queue_.pop_front();
        }
        job->fail(ApiError(500, fmt::format("context '{}' could not be loaded from disk: {}", in.context_id, e.what()),
                           "server_error", "", "context_unreadable"));
        continue;
      }
      if (!ctx) {
        {
          std::lock_guard<std::mutex> l(mu_);
          queue_.pop_front();
        }
        job->fail(not_found(fmt::format("no context '{}' (it was deleted?)", in.context_id), "context_not_found"));
        continue;
      }
    }
    const size_t est = estimate_pages(in, ctx.get());
    if (cap) {
      if (est + (ctx ? ctx->built->seq.cache->pages_held() : 0) > cap) {
        {
          std::lock_guard<std::mutex> l(mu_);
          queue_.pop_front();
        }
        metrics_.rejected("kv_memory");
        job->fail(bad_request(fmt::format("this request may need up to {} bytes of KV cache, more than the server's cap "
                                          "of {} bytes (--max-kv-bytes); use a shorter prompt, fewer max_tokens or "
                                          "kv_compression",
                                          est * pb, cap * pb),
                              "", "kv_memory_exceeded"));
        continue;
      }
      // Stored contexts make room (least recently used first, none in use); else wait (first
      // come, first served).
      if (!make_room(est, ctx.get())) return;
    }
    {
      std::lock_guard<std::mutex> l(mu_);
      queue_.pop_front();
    }
    auto a = std::make_unique<Active>();
    a->job = job;
    a->ctx = ctx;
    a->reserved = est;
    a->queued_s = std::chrono::duration<double>(Clock::now() - job->enqueued).count();
    try {
      if (in.kind == JobInput::Kind::CreateContext) {
        a->builder = std::make_unique<ContextBuilder>(engine_, in.compression.spec, in.tokens);
      } else if (ctx) {
        const bool stats = AnswerStepper::compresses_while_answering(ctx->built->spec);
        a->answer = std::make_unique<AnswerStepper>(engine_, ctx->built->seq.fork(stats), ctx->built->spec, in.tokens,
                                                    in.answer, ctx->built);
      } else if (!in.compression.spec.press.is_full() && in.tokens.size() >= 2) {
        std::vector<int32_t> head(in.tokens.begin(), in.tokens.end() - 1);
        if (in.score_prompt) {
          // The context's tokens are scored by an uncompressed pass over them and the first token
          // after them (docs/server.md, "Log-probabilities, echo and scoring under compression").
          AnswerOptions o;
          o.max_new_tokens = 0;
          o.logprobs = in.answer.logprobs;
          o.score_question = true;
          std::vector<int32_t> scored(in.tokens.begin(), in.tokens.begin() + static_cast<std::ptrdiff_t>(head.size()) + 1);
          a->scorer = std::make_unique<AnswerStepper>(engine_, Sequence{}, no_compression().spec, std::move(scored), o);
        }
        a->builder = std::make_unique<ContextBuilder>(engine_, in.compression.spec, std::move(head));
      } else {
        // No compression (a one-token prompt has no context to compress).
        AnswerOptions o = in.answer;
        o.score_question = in.score_prompt;
        a->answer = std::make_unique<AnswerStepper>(engine_, Sequence{}, no_compression().spec, in.tokens, o);
      }
    } catch (const std::exception& e) {
      job->fail(bad_request(e.what()));
      continue;
    }
    job->update([](JobSnapshot& s) { s.state = JobSnapshot::State::Running; });
    active_.push_back(std::move(a));
  }
}

size_t Scheduler::pinned_pages(const ServedContext* ctx) const {
  std::set<const KvCache*> seen;
  size_t pages = 0;
  auto add = [&](const ServedContext* c) {
    if (!c || !c->built || !c->built->seq.cache) return;
    if (seen.insert(c->built->seq.cache.get()).second) pages += c->built->seq.cache->pages_held();
  };
  add(ctx);
  for (const auto& a : active_) add(a->ctx.get());
  return pages;
}

bool Scheduler::make_room(size_t pages, const ServedContext* ctx) {
  const size_t cap = cap_pages();
  auto fits = [&] { return context_pages() + reserved_pages() + pages <= cap; };
  if (fits()) return true;
  std::vector<const ServedContext*> in_use{ctx};
  for (const auto& a : active_) in_use.push_back(a->ctx.get());
  while (!fits() && store_.release_for_kv(in_use, false)) {
  }
  if (fits()) return true;
  // Contexts with no file to reload from are deleted only when that admits this request now: when
  // what the sequences in flight hold (and the contexts they answer from, never touched) keeps it
  // out anyway, it waits for them rather than lose contexts for nothing.
  if (pinned_pages(ctx) + reserved_pages() + pages > cap) return false;
  while (!fits() && store_.release_for_kv(in_use, true)) last_sync_ = {};
  return fits();
}

void Scheduler::count_unfinished(const Active& a) {
  const JobInput& in = a.job->input;
  int64_t left = 0;  // prompt tokens not prefilled yet
  if (a.answer)
    left = a.answer->phase() == Stepper::Phase::Prefill ? a.answer->prefill_left() : 0;
  else if (a.builder)
    left = a.builder->prefill_left() + (in.kind == JobInput::Kind::Generate ? 1 : 0);
  const int64_t generated = a.answer ? static_cast<int64_t>(a.answer->tokens().size()) : 0;
  metrics_.tokens(std::max<int64_t>(0, static_cast<int64_t>(in.tokens.size()) - left), generated);
}

void Scheduler::drop_cancelled() {
  for (auto it = active_.begin(); it != active_.end();) {
    if ((*it)->job->cancelled()) {
      metrics_.cancelled();
      count_unfinished(**it);  // what it prefilled and generated counts, as for any other request
      (*it)->job->update([](JobSnapshot& s) { s.state = JobSnapshot::State::Cancelled; });
      it = active_.erase(it);  // its sequence's pages go back to the pool here
    } else {
      ++it;
    }
  }
}

void Scheduler::step() {
  std::vector<Stepper*> steppers;
  for (auto& a : active_) steppers.push_back(a->stepper());
  std::vector<StepFailure> failed;
  const StepStats st = batch_step(engine_, steppers, opt_.prefill_chunk, failed);
  metrics_.step(st.decode_rows, st.prefill_rows, st.seconds);
  std::set<Stepper*> bad;
  for (const StepFailure& f : failed) {
    for (auto& a : active_) {
      if (a->stepper() == f.who) {
        fail(*a, f.message, f.out_of_memory);
        bad.insert(f.who);
      }
    }
  }
  for (auto it = active_.begin(); it != active_.end();) {
    Active& a = **it;
    bool done = bad.count(a.stepper()) > 0;
    if (!done && a.scorer && a.scorer->phase() == Stepper::Phase::Done) {
      a.context_lp = a.scorer->question_logprobs();
      a.scorer.reset();  // its cache goes back to the pool; the press's own prefill starts next step
      ++it;
      continue;
    }
    if (!done && a.builder && !a.answer && a.builder->phase() == Stepper::Phase::Done) {
      if (a.job->input.kind == JobInput::Kind::CreateContext) {
        finish(a);
        done = true;
      } else {
        // A compressed prompt: its last token is the question, answered on the compressed cache.
        BuiltContext b = a.builder->take();
        a.builder.reset();
        if (!b.spec.press.is_full())
          metrics_.compression(b.spec.press.name, b.full_bytes, b.seq.cache->bytes_held());
        Sequence s = std::move(b.seq);
        a.built = std::make_shared<const BuiltContext>(std::move(b));
        const JobInput& in = a.job->input;
        // Its reservation shrinks to what it holds now plus the answer's growth (its pages are its
        // own: compaction happens in place), so that others can be admitted.
        const KvLayout& l = engine_.kv_layout();
        a.reserved = s.cache->pages_held() + static_cast<size_t>(l.n_heads_total()) *
                                                 (ceil_div(1 + in.answer.max_new_tokens, l.page_tokens) + 1);
        a.answer = std::make_unique<AnswerStepper>(engine_, std::move(s), a.built->spec,
                                                   std::vector<int32_t>{in.tokens.back()}, in.answer, a.built);
      }
    }
    if (!done && a.answer) {
      if (a.first_token_s < 0 && a.answer->phase() != Stepper::Phase::Prefill) a.first_token_s = a.t.seconds();
      publish(a);
      if (a.answer->phase() == Stepper::Phase::Done) {
        finish(a);
        done = true;
      }
    }
    it = done ? active_.erase(it) : it + 1;
  }
}

void Scheduler::publish_prompt_scores(Active& a) {
  if (!a.job->input.score_prompt || a.prompt_published || !a.answer || a.answer->phase() == Stepper::Phase::Prefill) return;
  // Entry k scores prompt token k + 1: the context's tokens from the scorer's full pass, then
  // the tokens fed after it on the compressed cache (all of them when nothing was compressed).
  std::vector<TokenLogprob> lp = std::move(a.context_lp);
  const auto& q = a.answer->question_logprobs();
  lp.insert(lp.end(), q.begin(), q.end());
  a.job->set_prompt_logprobs(std::move(lp));
  a.prompt_published = true;
}

void Scheduler::publish_token_logprobs(Active& a) {
  if (const auto& lp = a.answer->token_logprobs(); lp.size() > a.published_lp) {
    a.job->add_logprobs(std::span<const TokenLogprob>(lp).subspan(a.published_lp));
    a.published_lp = lp.size();
  }
}

void Scheduler::publish(Active& a) {
  publish_prompt_scores(a);
  if (a.answer->tokens().size() == a.published) return;
  publish_token_logprobs(a);
  a.published = a.answer->tokens().size();
  const std::string text = a.answer->text();
  const int64_t n = static_cast<int64_t>(a.published);
  a.job->update([&](JobSnapshot& s) {
    s.text = text;
    s.n_generated = n;
  });
}

void Scheduler::finish(Active& a) {
  const JobInput& in = a.job->input;
  mean_run_s_ = 0.8 * mean_run_s_.load() + 0.2 * a.t.seconds();
  if (in.kind == JobInput::Kind::CreateContext) {
    BuiltContext b = a.builder->take();
    auto sc = std::make_shared<ServedContext>();
    sc->info = in.context;
    sc->info.id = new_context_id();
    sc->info.created = static_cast<int64_t>(std::time(nullptr));
    sc->info.seq = ++context_seq_;
    sc->info.n_tokens = b.n_tokens;
    sc->info.kv_bytes_full = b.full_bytes;
    sc->info.kv_bytes_held = b.seq.cache->bytes_held();
    sc->info.keep_measured = b.keep_measured();
    sc->info.keep_chosen = b.keep_chosen();
    sc->info.compression = in.compression.echo;
    sc->args = in.compression.args;
    if (!b.spec.press.is_full()) metrics_.compression(b.spec.press.name, b.full_bytes, sc->info.kv_bytes_held);
    metrics_.tokens(b.n_tokens, 0);
    sc->built = std::make_shared<const BuiltContext>(std::move(b));
    try {
      store_.put(sc);
    } catch (const ApiError& e) {
      a.job->fail(e);  // 507: over the contexts directory's quota
      return;
    } catch (const std::exception& e) {
      a.job->fail(ApiError(500, fmt::format("the context could not be stored: {}", e.what()), "server_error"));
      return;
    }
    bool deleted = false;
    {
      std::lock_guard<std::mutex> l(mu_);
      infos_[sc->info.id] = sc->info;
      deleted = !store_.shared() && infos_.size() != store_.size();
    }
    // The put deleted older contexts (budget, quota): the list drops them before the client
    // hears of the new one.
    if (deleted) {
      last_sync_ = {};
      sync_contexts();
    }
    const ContextInfo info = sc->info;
    a.job->update([&](JobSnapshot& s) {
      s.state = JobSnapshot::State::Done;
      s.context = info;
    });
    return;
  }
  const AnswerStepper& ans = *a.answer;
  JobUsage u;
  const KvCache& c = *ans.sequence().cache;
  const BuiltContext* src = a.ctx ? a.ctx->built.get() : a.built.get();
  u.cached_tokens = a.ctx ? a.ctx->built->n_tokens : 0;
  u.prompt_tokens = u.cached_tokens + static_cast<int64_t>(in.tokens.size());
  u.completion_tokens = static_cast<int64_t>(ans.tokens().size());
  u.kv_bytes_full = full_context_bytes(c.layout(), c.n_past());
  u.kv_bytes_held = c.bytes_held();
  u.kv_bytes_peak = ans.kv_bytes_peak();
  // What the sequence holds at the end, measured: slots held over every position in every head
  // (decode-time evictions and memory-triggered compressions included).
  const size_t all_slots = static_cast<size_t>(c.n_past()) * static_cast<size_t>(c.layout().n_heads_total());
  u.keep_ratio = all_slots ? static_cast<double>(c.total_slots()) / static_cast<double>(all_slots) : 1.0;
  u.keep_chosen = src ? src->keep_chosen() : std::nullopt;
  u.press = src ? src->spec.press.name : in.compression.spec.press.name;
  u.evictions = ans.evictions();
  u.queued_s = a.queued_s;
  const double total = a.t.seconds();
  u.prefill_s = a.first_token_s >= 0 ? a.first_token_s : total;
  u.decode_s = total - u.prefill_s;
  metrics_.tokens(static_cast<int64_t>(in.tokens.size()), u.completion_tokens);
  const std::string text = ans.text();
  const std::string reason = ans.finish_reason() == FinishReason::Stop ? "stop" : "length";
  publish_token_logprobs(a);
  publish_prompt_scores(a);
  a.job->update([&](JobSnapshot& s) {
    s.state = JobSnapshot::State::Done;
    s.text = text;
    s.n_generated = u.completion_tokens;
    s.finish_reason = reason;
    s.usage = u;
  });
}

void Scheduler::fail(Active& a, const std::string& message, bool out_of_memory) {
  if (out_of_memory && a.answer && !a.answer->tokens().empty()) {
    // Stopped early by the KV cap: what was generated is the answer, cut for length.
    finish(a);
    a.job->update([](JobSnapshot& s) {
      s.finish_reason = "length";
      s.usage.kv_memory_exhausted = true;
    });
    return;
  }
  count_unfinished(a);
  if (out_of_memory) {
    metrics_.rejected("kv_memory");
    a.job->fail(too_many_requests(fmt::format("out of KV memory: {}; retry later", message), "kv_memory_exhausted"));
  } else {
    a.job->fail(bad_request(message));
  }
}

void Scheduler::sync_contexts() {
  const auto now = Clock::now();
  if (now - last_sync_ < std::chrono::milliseconds(200)) return;
  last_sync_ = now;
  store_.maintain(static_cast<int64_t>(std::time(nullptr)));
  if (store_.shared()) return;  // handlers ask the shared store itself: no copy to keep
  std::map<std::string, ContextInfo> fresh;
  for (const ContextInfo& i : store_.list()) fresh[i.id] = i;
  std::lock_guard<std::mutex> l(mu_);
  infos_.swap(fresh);
}

void Scheduler::publish_gauges() {
  SchedulerGauges g;
  PagePool& p = engine_.page_pool();
  g.kv_bytes_in_use = p.bytes_in_use();
  g.kv_bytes_high_water = p.high_water_bytes();
  g.kv_bytes_cap = p.max_bytes();
  g.kv_bytes_contexts = context_pages() * p.page_bytes();
  g.kv_bytes_reserved = reserved_pages() * p.page_bytes();
  g.kv_bytes_allocated = p.bytes_reserved();
  g.running = static_cast<int>(active_.size());
  for (const auto& a : active_) g.decoding += a->answer && a->answer->phase() == Stepper::Phase::Decode;
  g.contexts = store_.size();
  g.store = store_.stats();
  {
    std::lock_guard<std::mutex> l(mu_);
    g.queued = static_cast<int>(queue_.size());
  }
  metrics_.set_gauges(g);
}

}  // namespace kvs::server
