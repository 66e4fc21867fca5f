#include "press/registry.h"

#include <fmt/format.h>

#include "core/error.h"
#include "press/budget/allocators.h"
#include "press/scorers/scorers.h"
#include "press/select/topk.h"

namespace kvs {

namespace {

using T = ParamSpec::Type;

std::shared_ptr<const Scorer> snapkv_scorer(const Params& p) {
  const int64_t w = p.get_int("window_size"), k = p.get_int("kernel_size");
  if (k % 2 == 0) fail("snapkv: kernel_size must be odd, got {}", k);  // 1..101 checked by its spec
  const std::string& pool = p.get_str("pooling");
  if (pool != "avg" && pool != "max") fail("snapkv: pooling must be avg or max, got '{}'", pool);
  return std::make_shared<SnapKvScorer>(static_cast<int>(w), static_cast<int>(k), pool == "max");
}

std::vector<ParamSpec> snapkv_params() {
  return {{"window_size", T::Int, "64", "observation window: the last queries of the context whose attention scores keys", 1, 4096},
          {"kernel_size", T::Int, "5", "1-D pooling kernel over the scores (odd)", 1, 101},
          {"pooling", T::String, "avg", "pooling: avg or max"}};
}

Press compose(const std::string& name, std::shared_ptr<const Scorer> s, std::shared_ptr<const BudgetAllocator> a,
              Trigger trig = {}) {
  Press p;
  p.name = name;
  p.scorer = std::move(s);
  p.allocator = std::move(a);
  p.selector = std::make_shared<TopKSelector>();
  p.trigger = trig;
  return p;
}

// Scorer by name for presses that take any scorer (adakv).
std::shared_ptr<const Scorer> scorer_by_name(const std::string& n, const Params& p) {
  if (n == "snapkv") return snapkv_scorer(p);
  if (n == "tova") return std::make_shared<TovaScorer>();
  if (n == "keydiff") return std::make_shared<KeyDiffScorer>();
  if (n == "knorm") return std::make_shared<KnormScorer>();
  if (n == "random") return std::make_shared<RandomScorer>();
  if (n == "streaming_llm") return std::make_shared<StreamingScorer>();
  if (n == "h2o") return std::make_shared<H2oScorer>(0.0);
  fail("adakv: unknown scorer '{}' (snapkv, tova, keydiff, knorm, random, streaming_llm, h2o)", n);
}

std::vector<PressInfo> build() {
  std::vector<PressInfo> v;
  v.push_back({"full", "", "no compression (the reference every press is compared with)", {}, 0, 0, {},
               [](const Params&) {
                 Press p;
                 p.name = "full";
                 return p;
               }});
  v.push_back({"streaming_llm", "Xiao et al. 2023, arXiv:2309.17453",
               "attention sinks + the most recent tokens", {}, 4, 0, {},
               [](const Params&) {
                 return compose("streaming_llm", std::make_shared<StreamingScorer>(), std::make_shared<UniformAllocator>());
               }});
  v.push_back({"h2o", "Zhang et al. 2023, arXiv:2306.14048",
               "heavy hitters by accumulated attention + recent tokens; evicts during decoding too",
               {{"recent_fraction", T::Float, "0.5", "share of each head's budget kept for the most recent tokens", 0, 1},
                {"decode_every", T::Int, "1", "evict back to the budget every N decode steps (0 = only after prefill)", 0,
                 kMaxTriggerEvery}},
               0, 0, {Trigger::Kind::EveryN, 1, 0},
               [](const Params& p) {
                 const double rf = p.get_float("recent_fraction");  // ranges checked by the specs
                 const int64_t n = p.get_int("decode_every");
                 Trigger t = n > 0 ? Trigger{Trigger::Kind::EveryN, static_cast<int>(n), 0} : Trigger{};
                 return compose("h2o", std::make_shared<H2oScorer>(rf), std::make_shared<UniformAllocator>(), t);
               }});
  v.push_back({"snapkv", "Li et al. 2024, arXiv:2404.14469",
               "attention from an observation window at the end of the context, pooled", snapkv_params(), 0, 0, {},
               [](const Params& p) { return compose("snapkv", snapkv_scorer(p), std::make_shared<UniformAllocator>()); }});
  {
    auto ps = snapkv_params();
    ps.push_back({"beta", T::Float, "20", "pyramid steepness: the last layer keeps average/beta", 1, 1e6});
    v.push_back({"pyramidkv", "Cai et al. 2024, arXiv:2406.02069",
                 "SnapKV scores with layer budgets decreasing linearly with depth", ps, 0, 0, {},
                 [](const Params& p) {
                   const double beta = p.get_float("beta");  // >= 1 checked by its spec
                   return compose("pyramidkv", snapkv_scorer(p), std::make_shared<PyramidAllocator>(beta));
                 }});
  }
  {
    auto ps = snapkv_params();
    ps.push_back({"scorer", T::String, "snapkv", "scorer whose scores are allocated across heads"});
    ps.push_back({"alpha", T::Float, "0.2", "safeguard: each head keeps at least alpha x the average head budget", 0, 1});
    v.push_back({"adakv", "Feng et al. 2024, arXiv:2407.11550",
                 "head-adaptive budgets: a layer's budget goes to the best scores across its heads", ps, 0, 0, {},
                 [](const Params& p) {
                   const double a = p.get_float("alpha");  // [0, 1] checked by its spec
                   return compose("adakv", scorer_by_name(p.get_str("scorer"), p), std::make_shared<AdaKvAllocator>(a));
                 }});
  }
  v.push_back({"tova", "Oren et al. 2024, arXiv:2401.06104", "the last query's attention; evicts during decoding too",
               {{"decode_every", T::Int, "1", "evict back to the budget every N decode steps (0 = only after prefill)", 0,
                 kMaxTriggerEvery}},
               0, 0, {Trigger::Kind::EveryN, 1, 0},
               [](const Params& p) {
                 const int64_t n = p.get_int("decode_every");  // 0..1e6 checked by its spec
                 Trigger t = n > 0 ? Trigger{Trigger::Kind::EveryN, static_cast<int>(n), 0} : Trigger{};
                 return compose("tova", std::make_shared<TovaScorer>(), std::make_shared<UniformAllocator>(), t);
               }});
  v.push_back({"keydiff", "Park et al. 2025, arXiv:2504.15364", "keys least similar to the mean key", {}, 0, 0, {},
               [](const Params&) {
                 return compose("keydiff", std::make_shared<KeyDiffScorer>(), std::make_shared<UniformAllocator>());
               }});
  v.push_back({"knorm", "Devoto et al. 2024, arXiv:2406.11430", "keys with the smallest L2 norm", {}, 0, 0, {},
               [](const Params&) {
                 return compose("knorm", std::make_shared<KnormScorer>(), std::make_shared<UniformAllocator>());
               }});
  v.push_back({"random", "", "uniformly random eviction (seeded)", {}, 0, 0, {},
               [](const Params&) {
                 return compose("random", std::make_shared<RandomScorer>(), std::make_shared<UniformAllocator>());
               }});
  return v;
}

}  // namespace

const std::vector<PressInfo>& press_registry() {
  static const std::vector<PressInfo> v = build();
  return v;
}

const PressInfo& press_info(const std::string& name) {
  for (const auto& p : press_registry())
    if (p.name == name) return p;
  std::string names;
  for (const auto& p : press_registry()) names += (names.empty() ? "" : ", ") + p.name;
  fail("unknown press '{}' (known: {})", name, names);
}

Press make_press(const std::string& name, const ParamMap& params) {
  const PressInfo& info = press_info(name);
  Press p = info.make(Params(name, info.params, params));
  return p;
}

}  // namespace kvs
