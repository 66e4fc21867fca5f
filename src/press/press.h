// A press compresses a KvCache: Scorer (how much each cached token matters) + BudgetAllocator
// (how many tokens each (layer, KV head) keeps) + Selector (which ones) + optional Merger (fold
// evicted rows into kept ones) + Trigger (when). Components are immutable and shared, so a press
// is a value: composing AdaKV's allocator with any scorer never mutates the scorer.
//
// Every component sees one environment (PressEnv: the cache, the statistics, the thread pool, the
// request, the model probe and the sequence's press state) and declares what it needs (Needs:
// statistics, the model probe, the context's NLL); a press needs the union of its components'.
//
// Conventions: scores are "higher = keep"; the keep ratio is the fraction of tokens KEPT; sinks
// (the first positions) and the recent window (the last positions) are protected and always kept;
// they count toward the budget.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kvcache/attention.h"
#include "kvcache/kv_cache.h"
#include "press/model_probe.h"
#include "press/stats.h"

namespace kvs {

// Per (layer, KV head) score of every cached slot: s[layer * n_head_kv + kvh][slot].
struct Scores {
  std::vector<std::vector<float>> s;
  std::vector<float>& at(const KvLayout& l, int layer, int kvh) { return s[static_cast<size_t>(layer * l.n_head_kv + kvh)]; }
  const std::vector<float>& at(const KvLayout& l, int layer, int kvh) const {
    return s[static_cast<size_t>(layer * l.n_head_kv + kvh)];
  }
};

// What to compress to. A fixed-budget press needs `keep` or `max_tokens` (max_tokens > 0 wins);
// an adaptive press (GVote; a calibrated press given `quality`) chooses its own keep ratio and
// takes neither. keep == 1 with no max_tokens is the uncompressed reference for every press.
struct CompressRequest {
  std::optional<double> keep;      // fraction of each head's tokens kept (allocators may redistribute)
  int32_t max_tokens = 0;          // absolute tokens per head on average (decode-time budgets)
  std::optional<double> quality;   // target quality for calibrated presses (Compactor's tau)
  int sinks = 0;                   // the first `sinks` positions are always kept
  int window = 0;                  // the last `window` positions (of n_past) are always kept
  uint64_t seed = 0;               // for randomised scorers

  bool has_budget() const { return max_tokens > 0 || keep.has_value(); }
  // True when the request asks to keep everything (keep 1, no token budget).
  bool keeps_everything() const { return max_tokens <= 0 && keep && *keep >= 1.0; }
  // "0.25", "128 tokens/head", "auto", "quality 0.95".
  std::string describe() const;
};

// What a component needs besides the cache.
struct Needs {
  StatsRequest stats;         // attention statistics collected during prefill (and decoding)
  bool probe = false;         // the model probe: query projection, probe forwards, context tokens
  bool context_nll = false;   // per-token NLL of the context (the prefill then computes all logits)
  bool operator==(const Needs&) const = default;
  Needs& operator|=(const Needs& o);
};

// Per-sequence mutable state of a press (D2O's EMA similarity threshold): a plain value of named
// numeric arrays, copied with the cache on fork and saved in .kvc headers. Components are
// immutable; whatever must persist across compress() calls of one sequence lives here.
struct PressState {
  std::map<std::string, std::vector<double>> values;
  bool operator==(const PressState&) const = default;
};

// The one environment every component sees.
struct PressEnv {
  const KvCache& cache;
  const AttnShape& shape;
  const StatsCollector* stats;  // null when no component asked for statistics
  ThreadPool& pool;
  const CompressRequest& request;
  ModelProbe* probe = nullptr;  // null when no model is at hand (synthetic caches in tests)
  PressState* state = nullptr;  // the sequence's press state; null in stateless uses
  // Trailing positions that are the question of a query-aware prefill (appended after the
  // context, compressed with it): n_past - keep_last .. n_past - 1. 0 otherwise. Presses that
  // vote or rank without a window of their own keep these (GVote).
  int32_t keep_last = 0;
};
using ScoreContext = PressEnv;

class PressComponent {
 public:
  virtual ~PressComponent() = default;
  virtual std::string name() const = 0;
  virtual Needs needs() const { return {}; }
};

// What a press that prunes rows (tokens) while a context is prefilled is told about that prefill
// (Scorer::prefill_rows; UNComp's hidden-state pruning). With a row selector the forward runs the
// prefill layer-major (every n_batch chunk through layer l before layer l + 1) and shows the
// selector every row still alive before each layer (press/observer.h), so a selector that ranks
// rows by the attention of the context's LAST token sees it at every layer whatever n_batch.
struct PrefillRows {
  int64_t n_past = 0;     // tokens the cache held before this prefill (0: a fresh context)
  int64_t n_tokens = 0;   // tokens of this prefill, positions n_past .. n_past + n_tokens - 1
  int64_t keep_last = 0;  // trailing tokens that must survive (the question of a query-aware prefill)
  int n_batch = 0;        // tokens per forward chunk
  const StatsCollector* stats = nullptr;  // the prefill's statistics (what the press's needs() asked for)
  const AttnShape* shape = nullptr;
  ThreadPool* pool = nullptr;
  const CompressRequest* request = nullptr;
  ModelProbe* probe = nullptr;  // valid during the call only
};

class Scorer : public PressComponent {
 public:
  virtual Scores score(const PressEnv& env) const = 0;
  // Queries at the end of the context this scorer attends from (SnapKV's observation window),
  // which it keeps by itself; 0 if none. Allocators that reserve the window read it.
  virtual int observation_window() const { return 0; }
  // Prefill pruning: true when this scorer's press drops rows from the hidden states while a
  // fresh context is prefilled under `req` (the runtime then never derives it from a shared,
  // unpruned prefill); prefill_rows() returns the selector for one such prefill, which the
  // runtime passes to the forward (ForwardHooks::rows). Pruned tokens get no K/V in later layers.
  virtual bool prunes_prefill(const CompressRequest& req) const { (void)req; return false; }
  virtual std::unique_ptr<RowSelector> prefill_rows(const PrefillRows& p) const { (void)p; return nullptr; }
};

// Budgets: tokens kept per (layer, KV head), same indexing as Scores.
using Budgets = std::vector<int32_t>;

struct Allocation {
  Budgets budgets;
  std::optional<double> keep_chosen;  // the keep ratio an adaptive allocator chose
};

class BudgetAllocator : public PressComponent {
 public:
  // Fixed allocators: the total over all heads equals round(keep * total slots) (or max_tokens *
  // heads), up to the protected tokens, which are always kept. Adaptive ones choose the total.
  virtual Allocation allocate(const Scores& scores, const PressEnv& env) const = 0;
  // True when the allocator chooses its own keep ratio (the request then carries no budget).
  virtual bool adaptive() const { return false; }
  // True when it reads CompressRequest::quality.
  virtual bool calibrated() const { return false; }
};

class Selector : public PressComponent {
 public:
  // Keep lists for every head (exactly budget[i] slots, protected first).
  virtual CacheEdit select(const Scores& scores, const Budgets& budgets, const PressEnv& env) const = 0;
};

class Merger : public PressComponent {
 public:
  // Adds row writes to `edit` that fold the evicted rows into kept ones; may read and update
  // env.state (its per-sequence state). Writes must target kept slots.
  virtual void merge(const Scores& scores, const PressEnv& env, CacheEdit& edit) const = 0;
};

// When a press runs.
struct Trigger {
  enum class Kind { OnPrefill, EveryN, MemoryCap };
  Kind kind = Kind::OnPrefill;
  int every_n = 1;          // EveryN: compress every n decode steps (to the request's budget)
  size_t cap_bytes = 0;     // MemoryCap: compress when the pool holds more than this
  std::string describe() const;
  bool operator==(const Trigger&) const = default;
};

struct Press {
  std::string name;
  std::shared_ptr<const Scorer> scorer;          // null for `full`
  std::shared_ptr<const BudgetAllocator> allocator;
  std::shared_ptr<const Selector> selector;
  std::shared_ptr<const Merger> merger;          // optional
  Trigger trigger;
  bool is_full() const { return scorer == nullptr; }
  bool adaptive() const { return allocator && allocator->adaptive(); }
  // Prefill row pruning (Scorer::prunes_prefill / prefill_rows); false / null for `full`.
  bool prunes_prefill(const CompressRequest& req) const { return scorer && scorer->prunes_prefill(req); }
  std::unique_ptr<RowSelector> prefill_rows(const PrefillRows& p) const { return scorer ? scorer->prefill_rows(p) : nullptr; }
  // The union of the components' needs.
  Needs needs() const;
};

// Builds a press from its parts (the selector defaults to top-k).
Press compose(std::string name, std::shared_ptr<const Scorer> scorer, std::shared_ptr<const BudgetAllocator> allocator,
              Trigger trigger = {}, std::shared_ptr<const Merger> merger = nullptr,
              std::shared_ptr<const Selector> selector = nullptr);

struct CompressResult {
  size_t slots_before = 0, slots_after = 0;
  size_t bytes_before = 0, bytes_after = 0;  // pages held by the sequence
  std::optional<double> keep_chosen;         // adaptive presses: the keep ratio they chose
  double score_seconds = 0, apply_seconds = 0;
  // Fraction of the slots kept by this compression.
  double keep_measured() const { return slots_before ? static_cast<double>(slots_after) / slots_before : 1.0; }
};

// Marks protected slots (sinks and recent window) of a head: positions < sinks or
// >= n_past - window.
std::vector<bool> protected_slots(const HeadCache& h, int32_t n_past, const CompressRequest& req);
int32_t count_protected(const HeadCache& h, int32_t n_past, const CompressRequest& req);

// What compress() works on besides the cache and the statistics.
struct CompressExtras {
  ModelProbe* probe = nullptr;
  PressState* state = nullptr;
  int32_t keep_last = 0;  // PressEnv::keep_last: the question's tokens of a query-aware prefill
};

// Scores, allocates, selects, merges and applies. `stats` may be null if the press needs none;
// when given it is kept aligned with the cache. Throws kvs::Error when the request does not fit
// the press (no budget for a fixed press, a budget for an adaptive one, a probe it lacks) or when
// the pool cannot hold the edit (the cache is then unchanged).
CompressResult compress(KvCache& cache, StatsCollector* stats, const Press& press, const CompressRequest& req,
                        const AttnShape& shape, ThreadPool& pool, const CompressExtras& extras = {});

// Checks that `req` fits `press` (see compress()); throws kvs::Error naming the press.
void check_request(const Press& press, const CompressRequest& req);

}  // namespace kvs
