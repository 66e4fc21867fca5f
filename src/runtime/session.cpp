#include "runtime/session.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/timer.h"

namespace kvs {

CompressedContext::CompressedContext(Engine& engine, CompressionSpec spec)
    : engine_(engine), spec_(std::move(spec)), cache_(engine.new_cache()) {}

std::unique_ptr<StatsCollector> CompressedContext::make_stats(const StatsRequest& extra) const {
  StatsRequest need = spec_.press.needs();
  need |= extra;
  if (!need.any()) return nullptr;
  auto st = std::make_unique<StatsCollector>(engine_.kv_layout(), engine_.attn_shape(), need, engine_.pool());
  st->set_n_embd(engine_.hp().n_embd);
  return st;
}

void CompressedContext::maybe_compress_for_cap(KvCache& c, StatsCollector* st, int n_next) {
  if (spec_.trigger.kind != Trigger::Kind::MemoryCap || spec_.press.is_full()) return;
  PagePool& pool = engine_.page_pool();
  const size_t need = (pool.pages_in_use() + c.pages_needed_for_append(n_next)) * pool.page_bytes();
  if (need <= spec_.trigger.cap_bytes) return;
  CompressRequest r = spec_.request;
  compress(c, st, spec_.press, r, engine_.attn_shape(), engine_.pool());
}

void CompressedContext::prefill(std::span<const int32_t> context) { prefill(context, StatsRequest{}); }

void CompressedContext::prefill(std::span<const int32_t> context, const StatsRequest& extra) {
  if (context.empty()) fail("empty context");
  cache_->clear();
  stats_ = make_stats(extra);
  context_.assign(context.begin(), context.end());
  n_context_ = static_cast<int32_t>(context.size());
  Timer t;
  const int nb = engine_.params().n_batch;
  for (size_t b = 0; b < context.size(); b += static_cast<size_t>(nb)) {
    const size_t n = std::min<size_t>(static_cast<size_t>(nb), context.size() - b);
    maybe_compress_for_cap(*cache_, stats_.get(), static_cast<int>(n));
    engine_.forward(*cache_, context.subspan(b, n), Logits::None, stats_.get());
  }
  prefill_s_ = t.seconds();
  full_bytes_ = cache_->bytes_held();
  full_slots_ = cache_->total_slots();
  finish_prefill();
}

void CompressedContext::finish_prefill() {
  if (spec_.trigger.kind != Trigger::Kind::MemoryCap)
    result_ = compress(*cache_, stats_.get(), spec_.press, spec_.request, engine_.attn_shape(), engine_.pool());
  else
    result_.slots_after = cache_->total_slots(), result_.bytes_after = cache_->bytes_held();
  const KvLayout& l = cache_->layout();
  decode_budget_ = static_cast<int32_t>(std::lround(static_cast<double>(cache_->total_slots()) / l.n_heads_total()));
}

void CompressedContext::compress_from(const CompressedContext& base) {
  if (spec_.trigger.kind == Trigger::Kind::MemoryCap) {
    prefill(base.context_);
    return;
  }
  if (base.context_.empty()) fail("compress_from: the base context was not prefilled");
  const StatsRequest need = spec_.press.needs();
  const StatsRequest have = base.stats_ ? base.stats_->request() : StatsRequest{};
  if ((need.col_sum && !have.col_sum) || (need.col_max && !have.col_max) || need.window > have.window ||
      (need.pre_rope_keys && !have.pre_rope_keys) || (need.queries && !have.queries) ||
      (need.hidden_moments && !have.hidden_moments))
    fail("compress_from: the base prefill did not collect the statistics press '{}' needs", spec_.press.name);
  if (base.full_slots_ != base.cache_->total_slots())
    fail("compress_from: the base context is already compressed");
  cache_ = base.cache_->fork();
  stats_ = base.stats_ ? base.stats_->clone() : nullptr;
  context_ = base.context_;
  n_context_ = base.n_context_;
  prefill_s_ = base.prefill_s_;
  full_bytes_ = base.full_bytes_;
  full_slots_ = base.full_slots_;
  finish_prefill();
}

void CompressedContext::adopt(std::unique_ptr<KvCache> cache, size_t full_bytes, size_t full_slots) {
  cache_ = std::move(cache);
  // A .kvc holds the KV only, not the statistics: start a fresh collector, as prefill() does, so a
  // press that evicts while decoding (H2O, TOVA) has them on the fork. The loaded slots start at
  // zero and accumulate the attention of the questions and answers asked from here on.
  stats_ = make_stats();
  context_.clear();
  full_bytes_ = full_bytes;
  full_slots_ = full_slots;
  n_context_ = cache_->n_past();
  result_ = CompressResult{};
  result_.slots_after = cache_->total_slots();
  result_.bytes_after = cache_->bytes_held();
  decode_budget_ =
      static_cast<int32_t>(std::lround(static_cast<double>(cache_->total_slots()) / cache_->layout().n_heads_total()));
}

Answer CompressedContext::ask(std::span<const int32_t> question, const AnswerOptions& opt) {
  if (question.empty()) fail("empty question");
  Answer a;
  std::unique_ptr<KvCache> fork = cache_->fork();
  std::unique_ptr<StatsCollector> st = stats_ ? stats_->clone() : nullptr;
  Timer t;
  std::vector<float> logits = engine_.forward(*fork, question, Logits::Last, st.get());
  a.prefill_seconds = t.seconds();
  Answer d = decode(*fork, st.get(), std::move(logits), opt, decode_budget_);
  d.prefill_seconds = a.prefill_seconds;
  return d;
}

Answer CompressedContext::ask_query_aware(std::span<const int32_t> question, const AnswerOptions& opt) {
  if (context_.empty()) fail("query-aware answering needs the context tokens (not available for a loaded cache)");
  if (question.empty()) fail("empty question");
  std::vector<int32_t> all = context_;
  all.insert(all.end(), question.begin(), question.end());
  auto c = engine_.new_cache();
  auto st = make_stats();
  Timer t;
  std::vector<float> logits;
  const int nb = engine_.params().n_batch;
  for (size_t b = 0; b < all.size(); b += static_cast<size_t>(nb)) {
    const size_t n = std::min<size_t>(static_cast<size_t>(nb), all.size() - b);
    maybe_compress_for_cap(*c, st.get(), static_cast<int>(n));
    logits = engine_.forward(*c, std::span<const int32_t>(all).subspan(b, n),
                             b + n == all.size() ? Logits::Last : Logits::None, st.get());
  }
  const double prefill_s = t.seconds();
  Timer tc;
  if (spec_.trigger.kind != Trigger::Kind::MemoryCap)
    compress(*c, st.get(), spec_.press, spec_.request, engine_.attn_shape(), engine_.pool());
  const double comp_s = tc.seconds();
  const int32_t budget =
      static_cast<int32_t>(std::lround(static_cast<double>(c->total_slots()) / c->layout().n_heads_total()));
  Answer a = decode(*c, st.get(), std::move(logits), opt, budget);
  a.prefill_seconds = prefill_s;
  a.compress_seconds += comp_s;
  return a;
}

Answer CompressedContext::decode(KvCache& c, StatsCollector* st, std::vector<float> logits, const AnswerOptions& opt,
                                 int32_t budget) {
  Answer a;
  const Tokenizer& tok = *engine_.model().tokenizer;
  Sampler sampler(opt.sampler);
  a.kv_bytes_peak = c.bytes_held();
  Timer t;
  double compress_s = 0;
  // keep 1.0 means no compression at all, also while decoding.
  const bool evict = spec_.trigger.kind == Trigger::Kind::EveryN && !spec_.press.is_full() &&
                     (spec_.request.keep < 1.0 || spec_.request.max_tokens > 0);
  for (int step = 0; step < opt.max_new_tokens; ++step) {
    const int32_t next = sampler.sample(logits);
    if (opt.stop_at_eog && tok.is_eog(next)) break;
    a.tokens.push_back(next);
    a.text += tok.token_bytes(next);
    bool stop = false;
    for (const auto& s : opt.stop) {
      const auto p = a.text.find(s);
      if (!s.empty() && p != std::string::npos) {
        a.text.resize(p);
        stop = true;
      }
    }
    if (stop || step + 1 == opt.max_new_tokens) break;
    maybe_compress_for_cap(c, st, 1);
    logits = engine_.forward(c, std::span<const int32_t>(&next, 1), Logits::Last, st);
    a.kv_bytes_peak = std::max(a.kv_bytes_peak, c.bytes_held());
    if (evict && (step + 1) % spec_.trigger.every_n == 0 && c.max_len() > budget) {
      Timer tc;
      CompressRequest r = spec_.request;
      r.max_tokens = budget;
      compress(c, st, spec_.press, r, engine_.attn_shape(), engine_.pool());
      compress_s += tc.seconds();
    }
  }
  a.decode_seconds = t.seconds() - compress_s;
  a.compress_seconds = compress_s;
  a.kv_bytes_end = c.bytes_held();
  a.max_head_len_end = c.max_len();
  return a;
}

}  // namespace kvs
