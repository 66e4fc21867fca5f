#include "runtime/context_builder.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "runtime/engine_probe.h"

namespace kvs {

namespace {

// Press::prunes_prefill where this build has it (a press that drops rows while prefilling needs
// the forward's row-selection hook, which forward_batch does not take).
template <typename P>
bool press_prunes_prefill(const P& press, const CompressRequest& req) {
  if constexpr (requires { press.prunes_prefill(req); })
    return press.prunes_prefill(req);
  else
    return false;
}

}  // namespace

double BuiltContext::keep_measured() const {
  return full_slots ? static_cast<double>(kept_slots) / full_slots : 1.0;
}

size_t full_context_bytes(const KvLayout& l, int64_t n) {
  const size_t pages = static_cast<size_t>((n + l.page_tokens - 1) / l.page_tokens);
  return pages * static_cast<size_t>(l.n_heads_total()) * l.page_bytes();
}

bool ContextBuilder::needs_whole_prefill(const CompressionSpec& spec) {
  return spec.trigger.kind == Trigger::Kind::MemoryCap || spec.press.needs().context_nll ||
         press_prunes_prefill(spec.press, spec.request);
}

ContextBuilder::ContextBuilder(Engine& engine, CompressionSpec spec, std::vector<int32_t> tokens) : engine_(engine) {
  if (tokens.empty()) fail("empty context");
  out_.spec = std::move(spec);
  out_.tokens = std::move(tokens);
  out_.n_tokens = static_cast<int32_t>(out_.tokens.size());
  check_protection_fits(out_.spec, out_.n_tokens);
  whole_ = needs_whole_prefill(out_.spec);
  if (!whole_) {
    out_.seq.cache = engine_.new_cache();
    out_.seq.stats = engine_.new_stats(out_.spec.press.needs().stats);
  }
}

void ContextBuilder::run_alone() {
  // The press needs what only CompressedContext's own prefill gives (every logit, the row hook,
  // compression during prefill): run it whole, then keep its sequence (a fork shares the pages).
  CompressedContext ctx(engine_, out_.spec);
  Timer t;
  ctx.prefill(out_.tokens);
  out_.seq.cache = ctx.cache().fork();
  out_.seq.stats = ctx.stats() ? ctx.stats()->clone() : nullptr;
  out_.seq.state = ctx.press_state();
  out_.nll = ctx.context_nll();
  out_.full_bytes = ctx.full_bytes();
  out_.full_slots = ctx.full_slots();
  out_.result = ctx.result();
  out_.kept_slots = out_.seq.cache->total_slots();
  out_.prefill_seconds = ctx.prefill_seconds();
  out_.compress_seconds = t.seconds() - ctx.prefill_seconds();
  fed_ = static_cast<int64_t>(out_.tokens.size());
  done_ = true;
}

Engine::BatchItem ContextBuilder::next_item(int max_rows) {
  KVS_ASSERT(!whole_ && !done_ && max_rows > 0);
  pending_ = std::min<int64_t>(max_rows, prefill_left());
  Engine::BatchItem it;
  it.cache = out_.seq.cache.get();
  it.tokens = std::span<const int32_t>(out_.tokens).subspan(static_cast<size_t>(fed_), static_cast<size_t>(pending_));
  it.observer = out_.seq.stats.get();
  it.want_logits = false;
  return it;
}

void ContextBuilder::after_step(std::span<const float> logits) {
  (void)logits;
  fed_ += pending_;
  pending_ = 0;
  if (fed_ == static_cast<int64_t>(out_.tokens.size())) finish();
}

void ContextBuilder::finish() {
  // As CompressedContext::prefill + finish_prefill: the uncompressed size in whole pages, then
  // one compression with the model probe over the context's tokens.
  const KvLayout& l = out_.seq.cache->layout();
  out_.full_slots = out_.tokens.size() * static_cast<size_t>(l.n_heads_total());
  out_.full_bytes = full_context_bytes(l, static_cast<int64_t>(out_.tokens.size()));
  Timer t;
  EngineProbe probe(engine_, out_.tokens, out_.nll);
  out_.result = compress(*out_.seq.cache, out_.seq.stats.get(), out_.spec.press, out_.spec.request,
                         engine_.attn_shape(), engine_.pool(), {&probe, &out_.seq.state});
  out_.compress_seconds = t.seconds();
  out_.kept_slots = out_.seq.cache->total_slots();
  done_ = true;
}

BuiltContext ContextBuilder::take() {
  KVS_ASSERT(done_);
  return std::move(out_);
}

}  // namespace kvs
