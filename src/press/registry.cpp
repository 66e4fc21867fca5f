#include "press/registry.h"

#include <fmt/format.h>

#include "core/error.h"
#include "press/budget/allocators.h"
#include "press/methods/methods.h"
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

Trigger decode_trigger(const Params& p) {
  const int64_t n = p.get_int("decode_every");  // 0..1e6 checked by its spec
  return n > 0 ? Trigger{Trigger::Kind::EveryN, static_cast<int>(n), 0} : Trigger{};
}

const ParamSpec kDecodeEvery{"decode_every", T::Int, "1",
                             "evict back to the budget every N decode steps (0 = only after prefill)", 0,
                             kMaxTriggerEvery};

std::vector<AllocatorInfo> build_allocators() {
  std::vector<AllocatorInfo> v;
  v.push_back({"uniform", "every head keeps the same share of its tokens", {},
               [](const Params&, const Scorer&) { return std::make_shared<UniformAllocator>(); }});
  v.push_back({"pyramid", "PyramidKV: budgets decreasing linearly with depth, the observation window on top (Cai et al. 2024)",
               {{"beta", T::Float, "20", "pyramid steepness: the last layer keeps (average - window)/beta beyond the window",
                 1, 1e6}},
               [](const Params& p, const Scorer& s) {
                 const double beta = p.get_float("beta");  // [1, 1e6] checked by its spec
                 return std::make_shared<PyramidAllocator>(beta, s.observation_window());
               }});
  v.push_back({"adakv", "AdaKV: a layer's budget goes to the best scores across its heads (Feng et al. 2024)",
               {{"alpha", T::Float, "0.2", "safeguard: each head keeps at least alpha x the average head budget", 0, 1}},
               [](const Params& p, const Scorer&) {
                 const double a = p.get_float("alpha");  // [0, 1] checked by its spec
                 return std::make_shared<AdaKvAllocator>(a);
               }});
  v.push_back({"nucleus",
               "adaptive: each head keeps the fewest tokens holding `mass` of its score mass (no keep ratio to set)",
               {{"mass", T::Float, "0.9", "share of each head's (attention) score mass to keep (0, 1]", 1e-6, 1}},
               [](const Params& p, const Scorer&) {
                 const double m = p.get_float("mass");  // checked by its spec
                 return std::make_shared<NucleusAllocator>(m);
               }});
  add_method_allocators(v);
  return v;
}

// The scorer of press `name` built with those of `p`'s values that press declares (adakv's
// `scorer` option): one table of scorers, the press registry itself.
std::shared_ptr<const Scorer> scorer_of_press(const std::string& name, const Params& p, const std::string& who) {
  if (name == "full" || name == "adakv") fail("{}: '{}' is not a scorer", who, name);
  const PressInfo* info = nullptr;
  for (const auto& pi : press_registry())
    if (pi.name == name) info = &pi;
  if (!info) {
    std::string names;
    for (const auto& pi : press_registry())
      if (pi.name != "full" && pi.name != "adakv") names += (names.empty() ? "" : ", ") + pi.name;
    fail("{}: unknown scorer '{}' (any press's scorer: {})", who, name, names);
  }
  ParamMap given;
  for (const auto& spec : info->params)
    if (p.values().count(spec.name)) given[spec.name] = p.values().at(spec.name);
  return info->make(Params(name, info->params, given)).scorer;
}

std::vector<PressInfo> build() {
  std::vector<PressInfo> v;
  v.push_back({"full", "", "no compression (the reference every press is compared with)", {}, 0, 0, {}, "",
               [](const Params&) {
                 Press p;
                 p.name = "full";
                 return p;
               }});
  v.push_back({"streaming_llm", "Xiao et al. 2023, arXiv:2309.17453", "attention sinks + the most recent tokens", {}, 4,
               0, {}, "uniform", [](const Params&) {
                 Press p;
                 p.name = "streaming_llm";
                 p.scorer = std::make_shared<StreamingScorer>();
                 return p;
               }});
  v.push_back({"h2o", "Zhang et al. 2023, arXiv:2306.14048",
               "heavy hitters by accumulated attention + recent tokens; evicts during decoding too",
               {{"recent_fraction", T::Float, "0.5", "share of each head's budget kept for the most recent tokens", 0, 1},
                kDecodeEvery},
               0, 0, {Trigger::Kind::EveryN, 1, 0}, "uniform", [](const Params& p) {
                 const double rf = p.get_float("recent_fraction");  // [0, 1] checked by its spec
                 Press press;
                 press.name = "h2o";
                 press.scorer = std::make_shared<H2oScorer>();
                 press.selector = std::make_shared<TopKSelector>(rf);
                 press.trigger = decode_trigger(p);
                 return press;
               }});
  v.push_back({"snapkv", "Li et al. 2024, arXiv:2404.14469",
               "attention from an observation window at the end of the context, pooled", snapkv_params(), 0, 0, {},
               "uniform", [](const Params& p) {
                 Press press;
                 press.name = "snapkv";
                 press.scorer = snapkv_scorer(p);
                 return press;
               }});
  v.push_back({"pyramidkv", "Cai et al. 2024, arXiv:2406.02069",
               "SnapKV scores with layer budgets decreasing with depth (= snapkv with allocator=pyramid)",
               snapkv_params(), 0, 0, {}, "pyramid", [](const Params& p) {
                 Press press;
                 press.name = "pyramidkv";
                 press.scorer = snapkv_scorer(p);
                 return press;
               }});
  {
    auto ps = snapkv_params();
    ps.push_back({"scorer", T::String, "snapkv", "the press whose scores are allocated across heads"});
    v.push_back({"adakv", "Feng et al. 2024, arXiv:2407.11550",
                 "head-adaptive budgets: a layer's budget goes to the best scores across its heads (= any scorer with allocator=adakv)",
                 ps, 0, 0, {}, "adakv", [](const Params& p) {
                   Press press;
                   press.name = "adakv";
                   press.scorer = scorer_of_press(p.get_str("scorer"), p, "adakv");
                   return press;
                 }});
  }
  v.push_back({"tova", "Oren et al. 2024, arXiv:2401.06104",
               "the last query's attention averaged over the layer's heads; evicts during decoding too",
               {kDecodeEvery, {"per_head", T::Bool, "false", "average over each KV head's query group instead of the whole layer"}},
               0, 0, {Trigger::Kind::EveryN, 1, 0}, "uniform", [](const Params& p) {
                 Press press;
                 press.name = "tova";
                 press.scorer = std::make_shared<TovaScorer>(p.get_bool("per_head"));
                 press.trigger = decode_trigger(p);
                 return press;
               }});
  v.push_back({"keydiff", "Park et al. 2025, arXiv:2504.15364", "keys least similar to the mean key", {}, 0, 0, {},
               "uniform", [](const Params&) {
                 Press press;
                 press.name = "keydiff";
                 press.scorer = std::make_shared<KeyDiffScorer>();
                 return press;
               }});
  v.push_back({"knorm", "Devoto et al. 2024, arXiv:2406.11430", "keys with the smallest L2 norm", {}, 0, 0, {}, "uniform",
               [](const Params&) {
                 Press press;
                 press.name = "knorm";
                 press.scorer = std::make_shared<KnormScorer>();
                 return press;
               }});
  v.push_back({"random", "", "uniformly random eviction (seeded)", {}, 0, 0, {}, "uniform", [](const Params&) {
                 Press press;
                 press.name = "random";
                 press.scorer = std::make_shared<RandomScorer>();
                 return press;
               }});
  add_method_presses(v);
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

const std::vector<AllocatorInfo>& allocator_registry() {
  static const std::vector<AllocatorInfo> v = build_allocators();
  return v;
}

const AllocatorInfo& allocator_info(const std::string& name) {
  for (const auto& a : allocator_registry())
    if (a.name == name) return a;
  std::string names;
  for (const auto& a : allocator_registry()) names += (names.empty() ? "" : ", ") + a.name;
  fail("unknown allocator '{}' (known: {})", name, names);
}

std::vector<ParamSpec> press_param_specs(const PressInfo& info, const std::string& allocator) {
  std::vector<ParamSpec> specs = info.params;
  if (info.default_allocator.empty()) return specs;
  specs.push_back({"allocator", T::String, info.default_allocator, "how budgets are spread over layers and heads"});
  for (const auto& s : allocator_info(allocator).params) specs.push_back(s);
  return specs;
}

ParamSpec preset_param(const std::vector<PressPreset>& presets) {
  std::string names;
  for (const auto& p : presets) names += (names.empty() ? "" : " | ") + p.name;
  return {"preset", T::String, presets.empty() ? "" : presets.front().name,
          fmt::format("settings: {} (each option given explicitly overrides the preset)", names)};
}

const PressPreset* selected_preset(const PressInfo& info, const ParamMap& options) {
  if (info.presets.empty()) return nullptr;
  const auto it = options.find("preset");
  if (it == options.end()) return &info.presets.front();
  std::string names;
  for (const auto& p : info.presets) {
    if (p.name == it->second) return &p;
    names += (names.empty() ? "" : ", ") + p.name;
  }
  fail("{}: unknown preset '{}' (known: {})", info.name, it->second, names);
}

ParamMap with_preset(const PressInfo& info, const ParamMap& options) {
  const PressPreset* preset = selected_preset(info, options);
  if (!preset) return options;
  ParamMap merged = options;
  // The allocator first (a preset may choose it), then the options that allocator and the press take.
  if (!options.count("allocator") && preset->values.count("allocator")) merged["allocator"] = preset->values.at("allocator");
  const std::string alloc = info.default_allocator.empty() ? ""
                            : merged.count("allocator")    ? merged.at("allocator")
                                                           : info.default_allocator;
  const std::vector<ParamSpec> specs = press_param_specs(info, alloc);
  for (const auto& [k, v] : preset->values) {
    if (options.count(k)) continue;  // explicit wins
    for (const auto& s : specs)
      if (s.name == k) merged[k] = v;
  }
  return merged;
}

int default_sinks(const PressInfo& info, const ParamMap& options) {
  const PressPreset* p = selected_preset(info, options);
  return p && p->sinks >= 0 ? p->sinks : info.default_sinks;
}

int default_window(const PressInfo& info, const ParamMap& options) {
  const PressPreset* p = selected_preset(info, options);
  return p && p->window >= 0 ? p->window : info.default_window;
}

Press make_press(const std::string& name, const ParamMap& given) {
  const PressInfo& info = press_info(name);
  const ParamMap params = with_preset(info, given);
  const std::string alloc = !info.default_allocator.empty() && params.count("allocator") ? params.at("allocator")
                                                                                          : info.default_allocator;
  const Params p(name, press_param_specs(info, alloc), params);
  Press press = info.make(p);
  if (press.scorer) {
    press.allocator = allocator_info(alloc).make(p, *press.scorer);
    if (!press.selector) press.selector = std::make_shared<TopKSelector>();
  }
  return press;
}

}  // namespace kvs
