#include "press/press.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"
#include "core/memory_cap.h"
#include "core/timer.h"
#include "press/select/topk.h"

namespace kvs {

std::string CompressRequest::describe() const {
  if (max_tokens > 0) return fmt::format("{} tokens/head", max_tokens);
  if (keep) return fmt::format("{}", *keep);
  if (quality) return fmt::format("quality {}", *quality);
  return "auto";
}

Needs& Needs::operator|=(const Needs& o) {
  stats |= o.stats;
  probe |= o.probe;
  context_nll |= o.context_nll;
  return *this;
}

Needs Press::needs() const {
  Needs n;
  if (scorer) n |= scorer->needs();
  if (allocator) n |= allocator->needs();
  if (selector) n |= selector->needs();
  if (merger) n |= merger->needs();
  return n;
}

Press compose(std::string name, std::shared_ptr<const Scorer> scorer, std::shared_ptr<const BudgetAllocator> allocator,
              Trigger trigger, std::shared_ptr<const Merger> merger, std::shared_ptr<const Selector> selector) {
  KVS_ASSERT(scorer && allocator);
  Press p;
  p.name = std::move(name);
  p.scorer = std::move(scorer);
  p.allocator = std::move(allocator);
  p.selector = selector ? std::move(selector) : std::make_shared<TopKSelector>();
  p.merger = std::move(merger);
  p.trigger = trigger;
  return p;
}

std::string Trigger::describe() const {
  switch (kind) {
    case Kind::OnPrefill: return "once after prefill";
    case Kind::EveryN: return fmt::format("every {} decode steps", every_n);
    case Kind::MemoryCap: return fmt::format("when the KV pool exceeds {} bytes", cap_bytes);
  }
  return "?";
}

std::vector<bool> protected_slots(const HeadCache& h, int32_t n_past, const CompressRequest& req) {
  std::vector<bool> p(static_cast<size_t>(h.len()), false);
  for (int32_t i = 0; i < h.len(); ++i) {
    const int32_t pos = h.pos[static_cast<size_t>(i)];
    p[static_cast<size_t>(i)] = pos < req.sinks || pos >= n_past - req.window;
  }
  return p;
}

int32_t count_protected(const HeadCache& h, int32_t n_past, const CompressRequest& req) {
  int32_t n = 0;
  for (int32_t pos : h.pos) n += pos < req.sinks || pos >= n_past - req.window;
  return n;
}

void check_request(const Press& press, const CompressRequest& req) {
  if (req.keep && !(*req.keep > 0.0 && *req.keep <= 1.0)) fail("keep ratio must be in (0, 1], got {}", *req.keep);
  if (req.max_tokens < 0) fail("token budget must be >= 0, got {}", req.max_tokens);
  if (req.quality && !(*req.quality > 0.0 && *req.quality <= 1.0))
    fail("quality target must be in (0, 1], got {}", *req.quality);
  if (req.sinks < 0 || req.window < 0) fail("sinks and window must be >= 0 (got {} and {})", req.sinks, req.window);
  if (press.is_full() || req.keeps_everything()) return;
  if (req.quality && !press.allocator->calibrated())
    fail("press '{}' has no calibration: give --keep or --budget instead of a quality target", press.name);
  if (press.adaptive()) {
    if (req.has_budget())
      fail("press '{}' chooses its own keep ratio: give no keep ratio or budget (or keep 1 for no compression)",
           press.name);
  } else if (!req.has_budget()) {
    fail("press '{}' needs a keep ratio or a token budget (only adaptive presses choose their own)", press.name);
  }
}

CompressResult compress(KvCache& cache, StatsCollector* stats, const Press& press, const CompressRequest& req,
                        const AttnShape& shape, ThreadPool& pool, const CompressExtras& extras) {
  check_request(press, req);
  CompressResult r;
  r.slots_before = cache.total_slots();
  r.bytes_before = cache.bytes_held();
  if (press.is_full() || req.keeps_everything()) {
    r.slots_after = r.slots_before;
    r.bytes_after = r.bytes_before;
    return r;
  }
  const Needs need = press.needs();
  if (need.stats.any() && (!stats || !stats->request().covers(need.stats)))
    fail("press '{}' needs attention statistics that were not collected", press.name);
  if ((need.probe || need.context_nll) && !extras.probe)
    fail("press '{}' needs the model (a probe forward or the context), which is not available here", press.name);
  Timer t;
  PressEnv env{cache, shape, stats, pool, req, extras.probe, extras.state, extras.keep_last};
  if (stats) stats->sync(cache);  // per-slot statistics of sliding-window layers follow the slots dropped
  Scores scores = press.scorer->score(env);
  const KvLayout& l = cache.layout();
  KVS_ASSERT(static_cast<int>(scores.s.size()) == l.n_heads_total());
  // Sliding-window layers beside global ones (Gemma 2's even layers) hold only their window, dropped
  // as decoding advances: a press chooses among the global layers' tokens (AttnShape::press_skips;
  // Phi-3's layers, all local, are compressed like any other). The local heads are moved
  // out of the cache while the allocator, selector and merger run — they see empty heads (budget
  // 0, nothing to select, nothing in a layer's or the model's total) — and put back after, untouched.
  struct LocalHeads {
    KvCache& c;
    std::vector<std::pair<int, HeadCache>> held;  // (head index, head)
    void restore() {
      for (auto& [i, h] : held) c.put_head(i / c.layout().n_head_kv, i % c.layout().n_head_kv, std::move(h));
      held.clear();
    }
    ~LocalHeads() { restore(); }  // also when a step below throws
  } local{cache, {}};
  for (int layer = 0; layer < l.n_layer; ++layer) {
    if (!shape.press_skips(layer)) continue;
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      const int i = layer * l.n_head_kv + kvh;
      local.held.emplace_back(i, cache.take_head(layer, kvh));
      scores.s[static_cast<size_t>(i)].clear();
    }
  }
  for (int i = 0; i < l.n_heads_total(); ++i)
    KVS_ASSERT(static_cast<int32_t>(scores.s[static_cast<size_t>(i)].size()) == cache.len(i / l.n_head_kv, i % l.n_head_kv));
  Allocation alloc = press.allocator->allocate(scores, env);
  KVS_ASSERT(static_cast<int>(alloc.budgets.size()) == l.n_heads_total());
  CacheEdit edit = press.selector->select(scores, alloc.budgets, env);
  // The merger may update the sequence's state; work on a copy so that a failed apply leaves
  // the state as it was, like the cache.
  PressState state_after = extras.state ? *extras.state : PressState{};
  if (press.merger) {
    PressEnv menv = env;
    menv.state = extras.state ? &state_after : nullptr;
    press.merger->merge(scores, menv, edit);
  }
  r.score_seconds = t.seconds();
  Timer ta;
  if (!cache.apply(edit))
    fail_memory_cap("KV cache memory cap reached: compressing with '{}' needs {} more pages; the cache is unchanged", press.name,
         cache.pages_needed_for_edit(edit));
  if (extras.state) *extras.state = std::move(state_after);
  if (stats) stats->apply_edit(edit);
  local.restore();
  r.apply_seconds = ta.seconds();
  r.slots_after = cache.total_slots();
  r.bytes_after = cache.bytes_held();
  r.keep_chosen = alloc.keep_chosen;
  return r;
}

}  // namespace kvs
