// KVzip's pair scores recomputed by brute force, in double, for the press tests (kvzip_test,
// kvzip_fold_test). `Case` provides D, H, Hkv, n, a prefilled cache `c.s.cache` and the fake probe
// `c.probe` (fake_probe.h).
#pragma once
#include <algorithm>
#include <cmath>
#include <vector>

#include "fake_probe.h"
#include "press/methods/kvzip.h"

namespace kvs::test {

// Scores recomputed by hand: for every chunk, every query of its repeat input, the softmax over
// sinks + the chunk's slots + the repeat input's keys up to the query (scale 1/sqrt(D)), max over
// queries and the query heads of the group.
template <class Case>
std::vector<std::vector<double>> kvzip_brute_force(Case& c, int layer, int chunk, int sinks) {
  const int D = Case::D, H = Case::H, Hkv = Case::Hkv, n = Case::n, G = H / Hkv;
  std::vector<std::vector<double>> best(Hkv, std::vector<double>(n, 0.0));
  KvzipOptions o;
  o.chunk = chunk;
  for (int p0 = sinks; p0 < n; p0 += chunk) {
    const int p1 = std::min(n, p0 + chunk);
    const auto ids = kvzip_repeat_input(c.probe, c.probe.ctx, p0, p1, p0 == sinks, o);
    const int T = static_cast<int>(ids.size());
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      // keys: cache rows < sinks and in [p0, p1), then the repeat input's
      std::vector<std::vector<float>> keys;
      std::vector<int> slot;  // cache position of the key, or -1 for a repeat key
      for (int s = 0; s < n; ++s)
        if (s < sinks || (s >= p0 && s < p1)) {
          std::vector<float> k(D);
          c.s.cache->read_k(layer, kvh, s, k.data());
          keys.push_back(k);
          slot.push_back(s);
        }
      const size_t n_cache_keys = keys.size();
      for (int t = 0; t < T; ++t) {
        std::vector<float> k(static_cast<size_t>(Hkv) * D);
        c.probe.key_of(layer, ids[t], k.data());
        keys.emplace_back(k.begin() + kvh * D, k.begin() + (kvh + 1) * D);
        slot.push_back(-1);
      }
      for (int g = 0; g < G; ++g)
        for (int t = 0; t < T; ++t) {
          std::vector<float> q(static_cast<size_t>(H) * D);
          c.probe.query_of(layer, ids[t], q.data());
          const float* qh = q.data() + (kvh * G + g) * D;
          const size_t visible = n_cache_keys + static_cast<size_t>(t) + 1;
          std::vector<double> logit(visible);
          double mx = -1e300, z = 0;
          for (size_t j = 0; j < visible; ++j) {
            double dot = 0;
            for (int d = 0; d < D; ++d) dot += static_cast<double>(qh[d]) * keys[j][d];
            logit[j] = dot / std::sqrt(static_cast<double>(D));
            mx = std::max(mx, logit[j]);
          }
          for (double x : logit) z += std::exp(x - mx);
          for (size_t j = 0; j < n_cache_keys; ++j)
            if (slot[j] >= p0) best[kvh][slot[j]] = std::max(best[kvh][slot[j]], std::exp(logit[j] - mx) / z);
        }
    }
  }
  return best;
}

}  // namespace kvs::test
