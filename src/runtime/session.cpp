#include "runtime/session.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/timer.h"
#include "runtime/engine_probe.h"

namespace kvs {

Sequence Sequence::fork(bool with_stats) const {
  Sequence s;
  s.cache = cache->fork();
  s.stats = stats && with_stats ? stats->clone() : nullptr;
  s.state = state;
  return s;
}

int32_t mean_head_len(const KvCache& cache) {
  return static_cast<int32_t>(std::lround(static_cast<double>(cache.total_slots()) / cache.layout().n_heads_total()));
}

CompressResult evict_to_budget(Engine& engine, Sequence& seq, const CompressionSpec& spec, int32_t budget,
                               ModelProbe* probe) {
  CompressRequest r = spec.request;
  r.max_tokens = budget;
  return compress(*seq.cache, seq.stats.get(), spec.press, r, engine.attn_shape(), engine.pool(), {probe, &seq.state});
}

CompressedContext::CompressedContext(Engine& engine, CompressionSpec spec) : engine_(engine), spec_(std::move(spec)) {
  seq_.cache = engine_.new_cache();
}

void CompressedContext::compress_for_cap(Sequence& s, int n_next) {
  if (spec_.trigger.kind != Trigger::Kind::MemoryCap || spec_.press.is_full()) return;
  PagePool& pool = engine_.page_pool();
  const size_t need = (pool.pages_in_use() + s.cache->pages_needed_for_append(n_next)) * pool.page_bytes();
  if (need <= spec_.trigger.cap_bytes) return;
  EngineProbe probe(engine_, context_, nll_);
  compress(*s.cache, s.stats.get(), spec_.press, spec_.request, engine_.attn_shape(), engine_.pool(),
           {&probe, &s.state});
}

std::vector<float> CompressedContext::run_prefill(Sequence& s, std::span<const int32_t> tokens, bool last_logits,
                                                  std::vector<float>* nll) {
  const int nb = engine_.params().n_batch;
  const size_t V = static_cast<size_t>(engine_.hp().n_vocab);
  ForwardHooks hooks;
  hooks.observer = s.stats.get();
  // A press that prunes rows while a fresh context is prefilled (UNComp group-stage) gives its
  // row selector here: never while a question is added to a prefilled cache, nor when every
  // context logit is needed (pruned rows have none). Tokens after the context (the question of a
  // query-aware prefill) are never pruned.
  std::unique_ptr<RowSelector> rows;
  const AttnShape shape = engine_.attn_shape();
  if (s.cache->n_past() == 0 && !nll && spec_.press.prunes_prefill(spec_.request)) {
    EngineProbe probe(engine_, context_, nll_);
    PrefillRows pr;
    pr.n_tokens = static_cast<int64_t>(tokens.size());
    pr.keep_last = static_cast<int64_t>(tokens.size() - std::min(tokens.size(), context_.size()));
    pr.n_batch = nb;
    pr.stats = s.stats.get();
    pr.shape = &shape;
    pr.pool = &engine_.pool();
    pr.request = &spec_.request;
    pr.probe = &probe;
    rows = spec_.press.prefill_rows(pr);
    hooks.rows = rows.get();
  }
  std::vector<float> logits;
  if (nll) nll->clear();
  // With a row selector the engine runs the whole prefill in one call, layer-major (over n_batch
  // chunks inside), so that the pruning ranks the whole context whatever n_batch is.
  const size_t step = rows ? std::max<size_t>(tokens.size(), 1) : static_cast<size_t>(nb);
  for (size_t b = 0; b < tokens.size(); b += step) {
    const size_t n = std::min<size_t>(step, tokens.size() - b);
    const bool last = b + n == tokens.size();
    compress_for_cap(s, static_cast<int>(n));
    const Logits mode = nll ? Logits::All : (last && last_logits ? Logits::Last : Logits::None);
    logits = engine_.forward(*s.cache, tokens.subspan(b, n), mode, hooks);
    if (on_prefill_) on_prefill_(b + n, tokens.size());
    if (nll) {
      // Row i predicts token b + i + 1 (the next chunk's first token for the last row).
      for (size_t i = 0; i < n && b + i + 1 < tokens.size(); ++i)
        nll->push_back(static_cast<float>(token_nll({logits.data() + i * V, V}, tokens[b + i + 1])));
      if (last && last_logits) logits.erase(logits.begin(), logits.end() - static_cast<std::ptrdiff_t>(V));
    }
  }
  return last_logits ? logits : std::vector<float>{};
}

namespace {

// What `tokens` uncompressed tokens hold: every token in every head, in whole pages.
void uncompressed_size(const KvLayout& l, size_t tokens, size_t& slots, size_t& bytes) {
  const size_t heads = static_cast<size_t>(l.n_heads_total());
  slots = tokens * heads;
  bytes = (tokens + l.page_tokens - 1) / l.page_tokens * heads * l.page_bytes();
}

}  // namespace

void CompressedContext::set_context(std::span<const int32_t> context) {
  if (context.empty()) fail("empty context");
  seq_ = Sequence{};
  seq_.cache = engine_.new_cache();
  context_.assign(context.begin(), context.end());
  nll_.clear();
  n_context_ = static_cast<int32_t>(context.size());
  prefill_s_ = 0;
  prefilled_slots_ = 0;
  uncompressed_size(seq_.cache->layout(), context.size(), full_slots_, full_bytes_);
  result_ = CompressResult{};
  result_.slots_before = full_slots_;
  result_.bytes_before = full_bytes_;
}

void CompressedContext::prefill(std::span<const int32_t> context, const Needs& extra) {
  if (context.empty()) fail("empty context");
  check_protection_fits(spec_, static_cast<int64_t>(context.size()));
  Needs need = spec_.press.needs();
  need |= extra;
  seq_ = Sequence{};
  seq_.cache = engine_.new_cache();
  seq_.stats = engine_.new_stats(need.stats);
  context_.assign(context.begin(), context.end());
  n_context_ = static_cast<int32_t>(context.size());
  Timer t;
  run_prefill(seq_, context, false, need.context_nll ? &nll_ : nullptr);
  prefilled_slots_ = seq_.cache->total_slots();  // before compression (sliding-window layers hold their window)
  if (!need.context_nll) nll_.clear();
  prefill_s_ = t.seconds();
  // What the uncompressed context holds: every token in every head, in whole pages (a memory-cap
  // trigger or a prefill that prunes rows holds less already).
  uncompressed_size(seq_.cache->layout(), context.size(), full_slots_, full_bytes_);
  finish_prefill();
}

void CompressedContext::finish_prefill() {
  if (spec_.trigger.kind == Trigger::Kind::MemoryCap) {
    result_ = CompressResult{};
    result_.slots_before = full_slots_;
    result_.bytes_before = full_bytes_;
    result_.slots_after = seq_.cache->total_slots();
    result_.bytes_after = seq_.cache->bytes_held();
    return;
  }
  EngineProbe probe(engine_, context_, nll_);
  result_ = compress(*seq_.cache, seq_.stats.get(), spec_.press, spec_.request, engine_.attn_shape(), engine_.pool(),
                     {&probe, &seq_.state});
}

void CompressedContext::compress_from(const CompressedContext& base) {
  // A press that prunes rows during prefill cannot start from the shared, unpruned prefill.
  if (spec_.trigger.kind == Trigger::Kind::MemoryCap || spec_.press.prunes_prefill(spec_.request)) {
    prefill(base.context_);
    return;
  }
  if (base.context_.empty()) fail("compress_from: the base context was not prefilled");
  check_protection_fits(spec_, static_cast<int64_t>(base.context_.size()));
  const Needs need = spec_.press.needs();
  const StatsRequest have = base.seq_.stats ? base.seq_.stats->request() : StatsRequest{};
  if (!have.covers(need.stats) || (need.context_nll && base.nll_.empty()))
    fail("compress_from: the base prefill did not collect what press '{}' needs", spec_.press.name);
  if (base.prefilled_slots_ != base.seq_.cache->total_slots())
    fail("compress_from: the base context is already compressed");
  seq_ = Sequence{};
  seq_.cache = base.seq_.cache->fork();
  seq_.stats = need.stats.any() ? base.seq_.stats->clone_subset(need.stats) : nullptr;
  context_ = base.context_;
  nll_ = need.context_nll ? base.nll_ : std::vector<float>{};
  n_context_ = base.n_context_;
  prefill_s_ = base.prefill_s_;
  full_bytes_ = base.full_bytes_;
  full_slots_ = base.full_slots_;
  prefilled_slots_ = base.prefilled_slots_;
  finish_prefill();
}

void CompressedContext::adopt(std::unique_ptr<KvCache> cache, size_t full_bytes, size_t full_slots, PressState state) {
  seq_ = Sequence{};
  seq_.cache = std::move(cache);
  // A .kvc holds the KV and the press state, not the statistics: start a fresh collector, as
  // prefill() does, so a press that evicts while decoding (H2O, TOVA) has them on the fork. The
  // loaded slots start at zero and accumulate the attention of the questions and answers asked
  // from here on.
  seq_.stats = engine_.new_stats(spec_.press.needs().stats);
  seq_.state = std::move(state);
  context_.clear();
  nll_.clear();
  full_bytes_ = full_bytes;
  full_slots_ = full_slots;
  n_context_ = seq_.cache->n_past();
  result_ = CompressResult{};
  result_.slots_before = full_slots;
  result_.bytes_before = full_bytes;
  result_.slots_after = seq_.cache->total_slots();
  result_.bytes_after = seq_.cache->bytes_held();
}

Answer CompressedContext::ask(std::span<const int32_t> question, const AnswerOptions& opt) {
  if (question.empty()) fail("empty question");
  Sequence fork = seq_.fork();
  Timer t;
  std::vector<float> logits = run_prefill(fork, question, true, nullptr);
  const double prefill_s = t.seconds();
  Answer a = decode(fork, std::move(logits), opt);
  a.prefill_seconds = prefill_s;
  return a;
}

Sequence CompressedContext::prefill_query_aware(std::span<const int32_t> question, std::vector<float>* logits,
                                                double* prefill_seconds, double* compress_seconds,
                                                CompressResult* result) {
  if (context_.empty()) fail("query-aware answering needs the context tokens (not available for a loaded cache)");
  if (question.empty()) fail("empty question");
  std::vector<int32_t> all = context_;
  all.insert(all.end(), question.begin(), question.end());
  const Needs need = spec_.press.needs();
  Sequence s;
  s.cache = engine_.new_cache();
  s.stats = engine_.new_stats(need.stats);
  std::vector<float> nll;
  Timer t;
  std::vector<float> last = run_prefill(s, all, true, need.context_nll ? &nll : nullptr);
  if (prefill_seconds) *prefill_seconds = t.seconds();
  Timer tc;
  CompressResult r;
  if (spec_.trigger.kind != Trigger::Kind::MemoryCap) {
    EngineProbe probe(engine_, all, nll);
    r = compress(*s.cache, s.stats.get(), spec_.press, spec_.request, engine_.attn_shape(), engine_.pool(),
                 {&probe, &s.state, static_cast<int32_t>(question.size())});
  }
  if (compress_seconds) *compress_seconds = tc.seconds();
  if (result) {
    // Measured against every token of context + question in every head (as full_slots counts a
    // context: a sliding-window layer holds only its window even before compression).
    uncompressed_size(s.cache->layout(), all.size(), r.slots_before, r.bytes_before);
    r.slots_after = s.cache->total_slots();
    r.bytes_after = s.cache->bytes_held();
    *result = r;
  }
  if (logits) *logits = std::move(last);
  return s;
}

Answer CompressedContext::ask_query_aware(std::span<const int32_t> question, const AnswerOptions& opt) {
  std::vector<float> logits;
  double prefill_s = 0, comp_s = 0;
  CompressResult r;
  Sequence s = prefill_query_aware(question, &logits, &prefill_s, &comp_s, &r);
  Answer a = decode(s, std::move(logits), opt);
  a.prefill_seconds = prefill_s;
  a.compress_seconds += comp_s;
  a.compression = r;
  return a;
}

Answer CompressedContext::decode(Sequence& s, std::vector<float> logits, const AnswerOptions& opt) {
  Answer a;
  const Tokenizer& tok = *engine_.model().tokenizer;
  Sampler sampler(opt.sampler);
  KvCache& c = *s.cache;
  a.kv_bytes_peak = c.bytes_held();
  // Decode-time eviction keeps each head at what the sequence holds once the question is in (the
  // compressed context + the question): the answer is generated in constant memory and the
  // question is never trimmed. keep 1 means no compression at all, also while decoding.
  const bool evict = spec_.trigger.kind == Trigger::Kind::EveryN && !spec_.press.is_full() &&
                     !spec_.request.keeps_everything();
  const int32_t budget = evict ? mean_head_len(c) : 0;
  a.decode_budget = budget;
  Timer t;
  double compress_s = 0;
  for (int step = 0; step < opt.max_new_tokens; ++step) {
    const int32_t next = sampler.sample(logits);
    if (opt.stop_at_eog && tok.is_eog(next)) break;
    a.tokens.push_back(next);
    a.text += tok.token_bytes(next);
    bool stop = false;
    for (const auto& st : opt.stop) {
      const auto p = a.text.find(st);
      if (!st.empty() && p != std::string::npos) {
        a.text.resize(p);
        stop = true;
      }
    }
    if (stop || step + 1 == opt.max_new_tokens) break;
    compress_for_cap(s, 1);
    logits = engine_.forward(c, std::span<const int32_t>(&next, 1), Logits::Last, s.stats.get());
    a.kv_bytes_peak = std::max(a.kv_bytes_peak, c.bytes_held());
    if (evict && (step + 1) % spec_.trigger.every_n == 0 && c.max_len() > budget) {
      Timer tc;
      EngineProbe probe(engine_, context_, nll_);
      evict_to_budget(engine_, s, spec_, budget, &probe);
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
