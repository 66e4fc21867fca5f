// Compactor as press parts (the method and the choices where the paper is open: compactor.h).
#include "press/methods/compactor.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "core/warn.h"
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

// z-scores (population std) each group of segments jointly, in place: groups[g] lists spans.
void zscore_groups(std::vector<std::vector<std::span<float>>>& groups) {
  std::vector<float> tmp;
  for (auto& g : groups) {
    tmp.clear();
    for (auto sp : g) tmp.insert(tmp.end(), sp.begin(), sp.end());
    math::zscore(tmp);
    size_t off = 0;
    for (auto sp : g) {
      std::copy_n(tmp.begin() + static_cast<std::ptrdiff_t>(off), sp.size(), sp.begin());
      off += sp.size();
    }
  }
}

}  // namespace

std::vector<float> compactor_leverage(std::span<const float> keys, int64_t n, int d, const CompactorOptions& o,
                                      std::span<const float> sketch) {
  std::vector<float> out(static_cast<size_t>(n), 0.0f);
  const int64_t step = o.lev_chunk > 0 ? o.lev_chunk : std::max<int64_t>(n, 1);
  for (int64_t c0 = 0; c0 < n; c0 += step) {
    const int64_t m = std::min(step, n - c0);
    const std::span<const float> kc = keys.subspan(static_cast<size_t>(c0) * d, static_cast<size_t>(m) * d);
    if (o.exact) {
      const math::ExactLeverage ex = math::exact_leverage(kc, m, d, d, {.center = o.center});
      std::copy(ex.scores.begin(), ex.scores.end(), out.begin() + c0);
    } else {
      const std::vector<float> l = math::approx_leverage(kc, m, d, d, sketch, o.sketch_dim, o.center, 1e-6, o.ridge);
      std::copy(l.begin(), l.end(), out.begin() + c0);
    }
  }
  return out;
}

Scores CompactorScorer::score(const PressEnv& env) const {
  if (!env.stats) fail("compactor: no statistics were collected");
  const KvLayout& l = env.cache.layout();
  const int D = env.shape.head_dim;
  if (!o_.exact && o_.sketch_dim >= D)
    warn_once("compactor.sketch_dim",
              fmt::format("compactor: sketch_dim k = {} >= head_dim {}: the sketch spans the keys' column space, so the "
                          "\"approximate\" leverage equals the exact one at a higher cost (use exact=true, or k < {})",
                          o_.sketch_dim, D, D));
  Scores sc = make_scores(env.cache);
  // Outlier scores of every head, heads in parallel (each leverage computation is single-threaded).
  const std::vector<float> sketch = o_.exact ? std::vector<float>{} : math::gaussian_sketch(D, o_.sketch_dim, o_.seed);
  std::vector<std::vector<float>> lev(static_cast<size_t>(l.n_heads_total()));
  env.pool.parallel_for(l.n_heads_total(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int layer = static_cast<int>(i) / l.n_head_kv, kvh = static_cast<int>(i) % l.n_head_kv;
      const std::vector<float>& k = env.stats->pre_rope_keys(layer, kvh);
      const int64_t n = static_cast<int64_t>(k.size()) / D;
      KVS_ASSERT(n == env.cache.len(layer, kvh));
      lev[static_cast<size_t>(i)] = compactor_leverage(k, n, D, o_, sketch);
    }
  });
  for (int layer = 0; layer < l.n_layer; ++layer) {
    std::vector<std::vector<float>> a = env.stats->chunk_attention(env.cache, layer);
    for (auto& ah : a) ah = mean_pool(ah, o_.pool);
    // Eq. 6: s = z(a) + λ z(o). z over the whole layer (every KV head and token), or per head;
    // the leverage per lev_chunk chunk (the chunk's tokens of every head, or of one head).
    std::vector<std::vector<std::span<float>>> ga, go;
    int64_t n_chunks = 1;
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      const int64_t n = static_cast<int64_t>(a[static_cast<size_t>(kvh)].size());
      KVS_ASSERT(lev[static_cast<size_t>(layer * l.n_head_kv + kvh)].size() == static_cast<size_t>(n));
      if (o_.lev_chunk > 0) n_chunks = std::max<int64_t>(n_chunks, (n + o_.lev_chunk - 1) / o_.lev_chunk);
    }
    const size_t n_ga = o_.zscore_per_head ? static_cast<size_t>(l.n_head_kv) : 1;
    ga.resize(n_ga);
    go.resize(n_ga * static_cast<size_t>(n_chunks));
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      std::vector<float>& ah = a[static_cast<size_t>(kvh)];
      std::vector<float>& oh = lev[static_cast<size_t>(layer * l.n_head_kv + kvh)];
      const size_t g = o_.zscore_per_head ? static_cast<size_t>(kvh) : 0;
      ga[g].push_back(ah);
      const int64_t n = static_cast<int64_t>(oh.size());
      const int64_t step = o_.lev_chunk > 0 ? o_.lev_chunk : std::max<int64_t>(n, 1);
      for (int64_t c = 0; c * step < n; ++c)
        go[g * static_cast<size_t>(n_chunks) + static_cast<size_t>(c)].push_back(
            std::span<float>(oh).subspan(static_cast<size_t>(c * step), static_cast<size_t>(std::min(step, n - c * step))));
    }
    zscore_groups(ga);
    zscore_groups(go);
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      const std::vector<float>& za = a[static_cast<size_t>(kvh)];
      const std::vector<float>& zo = lev[static_cast<size_t>(layer * l.n_head_kv + kvh)];
      std::vector<float>& out = sc.at(l, layer, kvh);
      for (size_t s = 0; s < out.size(); ++s) out[s] = za[s] + static_cast<float>(o_.lambda) * zo[s];
    }
  }
  return sc;
}

namespace {

std::vector<PressPreset> compactor_presets() {
  return {{"paper", "the paper's §3-4 settings (λ 0.3, k 48, C 256, mean-pooled a, whole-sequence uncentred leverage, "
                    "nothing protected)",
           {{"chunk", "256"}, {"lambda", "0.3"}, {"sketch_dim", "48"}, {"pool", "3"}, {"lev_chunk", "0"},
            {"center", "false"}, {"ridge", "0"}, {"zscore", "layer"}},
           0, 0},
          {"official", "vnchari/compactor-vllm's library defaults",
           {{"chunk", "128"}, {"lambda", "0.5"}, {"sketch_dim", "48"}, {"pool", "1"}, {"lev_chunk", "512"},
            {"center", "true"}, {"ridge", "0.005"}, {"zscore", "layer"}},
           16, 64}};
}

}  // namespace

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
        {"pool", T::Int, "3", "mean-pooling kernel over the attention scores (odd; 1 = none)", 1, 101},
        {"lev_chunk", T::Int, "0", "leverage and its z-score per chunk of this many tokens (0 = the whole sequence)", 0,
         1 << 30},
        {"center", T::Bool, "false", "subtract the (chunk's) mean key before the leverage scores"},
        {"ridge", T::Float, "0", "> 0: add this to the sketch Gram's eigenvalues (compactor-vllm's regulariser) instead "
                                 "of the relative floor", 0, 1e6},
        {"zscore", T::String, "layer", "layer: z-scores over every KV head of a layer jointly; head: each head alone"},
        preset_param(compactor_presets())},
       0, 0, {}, "global_layer",
       [](const Params& p) {
         CompactorOptions o;
         o.chunk = static_cast<int>(p.get_int("chunk"));
         o.lambda = p.get_float("lambda");
         o.sketch_dim = static_cast<int>(p.get_int("sketch_dim"));
         o.exact = p.get_bool("exact");
         o.pool = static_cast<int>(p.get_int("pool"));
         if (o.pool % 2 == 0) fail("compactor: pool must be odd, got {}", o.pool);
         o.lev_chunk = static_cast<int>(p.get_int("lev_chunk"));
         o.center = p.get_bool("center");
         o.ridge = p.get_float("ridge");
         const std::string& z = p.get_str("zscore");
         if (z != "layer" && z != "head") fail("compactor: zscore must be layer or head, got '{}'", z);
         o.zscore_per_head = z == "head";
         Press press;
         press.name = "compactor";
         press.scorer = std::make_shared<CompactorScorer>(o);
         return press;
       },
       compactor_presets()});
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
