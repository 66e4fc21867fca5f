// Compactor as press parts (the method and the choices where the paper is open: compactor.h).
#include "press/methods/compactor.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "press/budget/calibrated.h"
#include "press/budget/global.h"
#include "press/math/chunk_attention.h"
#include "press/math/leverage.h"
#include "press/scorers/scorers.h"

namespace kvs {

namespace {

// Average over k neighbours (k odd), zero padding counted (torch avg_pool1d, count_include_pad).
std::vector<float> mean_pool(const std::vector<float>& x, int k) {
  if (k <= 1) return x;
  const int32_t n = static_cast<int32_t>(x.size()), r = k / 2;
  std::vector<float> y(x.size());
  for (int32_t i = 0; i < n; ++i) {
    double acc = 0;
    for (int32_t j = std::max(0, i - r); j <= std::min(n - 1, i + r); ++j) acc += x[static_cast<size_t>(j)];
    y[static_cast<size_t>(i)] = static_cast<float>(acc / k);
  }
  return y;
}

std::vector<float> head_leverage(const PressEnv& env, int layer, int kvh, const CompactorOptions& opt,
                                 const std::vector<float>& sketch) {
  const int D = env.shape.head_dim;
  const std::vector<float>& k = env.stats->pre_rope_keys(layer, kvh);
  const int64_t n = static_cast<int64_t>(k.size()) / D;
  KVS_ASSERT(n == env.cache.len(layer, kvh));
  if (opt.exact) {
    const math::ExactLeverage ex = math::exact_leverage(k, n, D, D);
    return {ex.scores.begin(), ex.scores.end()};
  }
  return math::approx_leverage(k, n, D, D, sketch, opt.sketch_dim);
}

}  // namespace

Scores CompactorScorer::score(const PressEnv& env) const {
  if (!env.stats) fail("compactor: no statistics were collected");
  const KvLayout& l = env.cache.layout();
  Scores sc = make_scores(env.cache);
  // Outlier scores of every head, heads in parallel (each leverage computation is single-threaded).
  const std::vector<float> sketch =
      o_.exact ? std::vector<float>{} : math::gaussian_sketch(env.shape.head_dim, o_.sketch_dim, o_.seed);
  std::vector<std::vector<float>> lev(static_cast<size_t>(l.n_heads_total()));
  env.pool.parallel_for(l.n_heads_total(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      lev[static_cast<size_t>(i)] = head_leverage(env, static_cast<int>(i) / l.n_head_kv, static_cast<int>(i) % l.n_head_kv, o_, sketch);
  });
  for (int layer = 0; layer < l.n_layer; ++layer) {
    std::vector<std::vector<float>> a = env.stats->chunk_attention(env.cache, layer);
    // Eq. 6 with both z-scores over the whole layer (every KV head and token jointly).
    std::vector<float> za, zo;
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      const std::vector<float> pa = mean_pool(a[static_cast<size_t>(kvh)], o_.pool);
      const std::vector<float>& o = lev[static_cast<size_t>(layer * l.n_head_kv + kvh)];
      KVS_ASSERT(pa.size() == o.size());
      za.insert(za.end(), pa.begin(), pa.end());
      zo.insert(zo.end(), o.begin(), o.end());
    }
    const std::vector<float> s = math::blend_scores(za, zo, o_.lambda);
    size_t off = 0;
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      std::vector<float>& out = sc.at(l, layer, kvh);
      std::copy_n(s.begin() + static_cast<std::ptrdiff_t>(off), out.size(), out.begin());
      off += out.size();
    }
  }
  return sc;
}

void add_compactor_presses(std::vector<PressInfo>& presses) {
  using T = ParamSpec::Type;
  presses.push_back(
      {"compactor", "Chari & Van Durme 2025, arXiv:2507.08143",
       "query-agnostic: approximate leverage scores of the pre-RoPE keys blended with non-causal chunked attention; "
       "head-adaptive top-k per layer",
       {{"chunk", T::Int, "256", "C: tokens per non-causal attention chunk", 1, 65536},
        {"lambda", T::Float, "0.3", "weight of the leverage (outlier) scores in Eq. 6", 0, 1000},
        {"sketch_dim", T::Int, "48", "k: Gaussian sketch dimension of the approximate leverage scores", 1, 4096},
        {"exact", T::Bool, "false", "exact leverage scores instead of the sketch"},
        {"pool", T::Int, "3", "mean-pooling kernel over the attention scores (odd; 1 = none)", 1, 101}},
       8, 4, {}, "global_layer", [](const Params& p) {
         CompactorOptions o;
         o.chunk = static_cast<int>(p.get_int("chunk"));
         o.lambda = p.get_float("lambda");
         o.sketch_dim = static_cast<int>(p.get_int("sketch_dim"));
         o.exact = p.get_bool("exact");
         o.pool = static_cast<int>(p.get_int("pool"));
         if (o.pool % 2 == 0) fail("compactor: pool must be odd, got {}", o.pool);
         Press press;
         press.name = "compactor";
         press.scorer = std::make_shared<CompactorScorer>(o);
         return press;
       }});
}

void add_compactor_allocators(std::vector<AllocatorInfo>& allocators) {
  allocators.push_back({"global_layer",
                        "per layer, one ranking of its KV heads' scores, no floor (Compactor's head-adaptive "
                        "selection; = adakv with alpha 0)",
                        {},
                        [](const Params&, const Scorer&) {
                          return std::make_shared<GlobalAllocator>(GlobalAllocator::Scope::Layer);
                        }});
  allocators.push_back(quality_allocator_info());
}

}  // namespace kvs
