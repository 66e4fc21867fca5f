// Synthetic caches and statistics for press tests: full control over keys, values and queries.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "kvcache/kv_cache.h"
#include "press/press.h"
#include "press/stats.h"

namespace kvs::test {

// A deterministic pseudo-random value in [-0.1, 0.1) for (layer, head, position, dim): synthetic
// keys and values. Unsigned arithmetic: wraps by definition (a signed product here overflowed,
// which UBSan flags).
inline float noise(int layer, int h, int pos, int d) {
  uint32_t x = static_cast<uint32_t>(layer) * 7919u + static_cast<uint32_t>(h) * 104729u +
               static_cast<uint32_t>(pos) * 1299709u + static_cast<uint32_t>(d) * 15485863u;
  x ^= x >> 13;
  x *= 0x5bd1e995;
  x ^= x >> 15;
  return (static_cast<float>(x % 10000) / 10000.0f - 0.5f) * 0.2f;
}

struct Synth {
  KvLayout layout;
  AttnShape shape;
  std::unique_ptr<PagePool> pool;
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<ThreadPool> threads;
  std::unique_ptr<StatsCollector> stats;
  PressState state;

  // n_layer x n_head_kv heads of n tokens with keys from `key(layer, kvh, pos, d)`.
  template <typename KeyFn>
  static Synth make(int n_layer, int n_head, int n_head_kv, int D, int n, KeyFn key, StatsRequest req = {}) {
    Synth s;
    s.layout = {n_layer, n_head_kv, D, DType::F32, 8};
    s.shape = {n_head, n_head_kv, D, 1.0f / std::sqrt(static_cast<float>(D))};
    s.pool = std::make_unique<PagePool>(s.layout.page_bytes());
    s.cache = std::make_unique<KvCache>(*s.pool, s.layout);
    s.threads = std::make_unique<ThreadPool>(2);
    s.stats = std::make_unique<StatsCollector>(s.layout, s.shape, /*n_embd=*/0, req, *s.threads);
    std::vector<float> k(static_cast<size_t>(n) * n_head_kv * D), v(k.size());
    std::vector<int32_t> pos(static_cast<size_t>(n));
    for (int layer = 0; layer < n_layer; ++layer) {
      for (int t = 0; t < n; ++t) {
        pos[t] = t;
        for (int h = 0; h < n_head_kv; ++h)
          for (int d = 0; d < D; ++d) {
            k[(static_cast<size_t>(t) * n_head_kv + h) * D + d] = key(layer, h, t, d);
            v[(static_cast<size_t>(t) * n_head_kv + h) * D + d] = 0.01f * d;
          }
      }
      s.cache->append(layer, n, k.data(), v.data(), pos.data());
    }
    return s;
  }

  // Shows the collector a batch of queries (q: [T][H][D]) at the given positions for `layer`,
  // with log-sum-exp computed from the cache.
  void observe(int layer, const std::vector<float>& q, const std::vector<int32_t>& pos) {
    const int T = static_cast<int>(pos.size());
    std::vector<float> out(q.size()), lse(static_cast<size_t>(T) * shape.n_head);
    AttnScratch scr;
    attention(*cache, layer, shape, q.data(), pos.data(), T, out.data(), lse.data(), *threads, scr);
    LayerView v;
    v.layer = layer;
    v.n_tok = T;
    v.pos = pos.data();
    v.shape = &shape;
    v.q = q.data();
    v.lse = lse.data();
    v.cache = cache.get();
    stats->on_layer(v);
  }

  CompressResult run(const Press& p, const CompressRequest& r) {
    return compress(*cache, stats.get(), p, r, shape, *threads, {nullptr, &state});
  }
  // The environment components see (for calling a component directly).
  PressEnv env(const CompressRequest& r) { return {*cache, shape, stats.get(), *threads, r, nullptr, &state}; }

  std::vector<int32_t> kept_positions(int layer, int kvh) const { return cache->head(layer, kvh).pos; }
};

// Whether a press can run on a synthetic cache: no model probe, no context NLL, no statistics
// that need the forward's pre-RoPE tensors (Synth::observe shows post-RoPE queries only).
// The others are tested on real models (tests/runtime).
inline bool runs_on_synthetic_cache(const Press& p) {
  const Needs n = p.needs();
  return !n.probe && !n.context_nll && !n.stats.pre_rope_keys && n.stats.query_gram != QueryGram::PreRope &&
         !n.stats.attn_input_moments;
}

inline bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

}  // namespace kvs::test
