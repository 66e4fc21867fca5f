#include "eval/inspect/kept_map.h"

#include "core/error.h"
#include "kvcache/kv_cache.h"

namespace kvs::inspect {

KeptMap::KeptMap(int nl, int nh, int32_t nt) : n_layer(nl), n_head_kv(nh), n_tokens(nt) {
  if (nl < 0 || nh < 0 || nt < 0) fail("kept map: negative shape ({} layers, {} heads, {} tokens)", nl, nh, nt);
  kept.assign(static_cast<size_t>(nl) * static_cast<size_t>(nh) * static_cast<size_t>(nt), 0);
}

KeptMap KeptMap::from_cache(const KvCache& cache, int32_t n_tokens) {
  const KvLayout& l = cache.layout();
  KeptMap m(l.n_layer, l.n_head_kv, n_tokens);
  for (int layer = 0; layer < l.n_layer; ++layer)
    for (int h = 0; h < l.n_head_kv; ++h)
      for (int32_t p : cache.head(layer, h).pos)
        if (p >= 0 && p < n_tokens) m.set(layer, h, p);
  return m;
}

std::vector<double> KeptMap::token_fraction() const {
  std::vector<double> f(static_cast<size_t>(n_tokens), 0.0);
  const int pairs = n_layer * n_head_kv;
  if (pairs == 0) return f;
  for (int layer = 0; layer < n_layer; ++layer)
    for (int h = 0; h < n_head_kv; ++h)
      for (int32_t t = 0; t < n_tokens; ++t) f[static_cast<size_t>(t)] += at(layer, h, t);
  for (double& x : f) x /= pairs;
  return f;
}

std::vector<double> KeptMap::layer_token_fraction(int layer) const {
  if (layer < 0 || layer >= n_layer) fail("kept map: layer {} out of range 0..{}", layer, n_layer - 1);
  std::vector<double> f(static_cast<size_t>(n_tokens), 0.0);
  if (n_head_kv == 0) return f;
  for (int h = 0; h < n_head_kv; ++h)
    for (int32_t t = 0; t < n_tokens; ++t) f[static_cast<size_t>(t)] += at(layer, h, t);
  for (double& x : f) x /= n_head_kv;
  return f;
}

std::vector<double> KeptMap::head_keep_ratio() const {
  std::vector<double> r(static_cast<size_t>(n_layer) * n_head_kv, 0.0);
  if (n_tokens == 0) return r;
  for (int layer = 0; layer < n_layer; ++layer)
    for (int h = 0; h < n_head_kv; ++h) {
      size_t n = 0;
      for (int32_t t = 0; t < n_tokens; ++t) n += at(layer, h, t);
      r[static_cast<size_t>(layer) * n_head_kv + h] = static_cast<double>(n) / n_tokens;
    }
  return r;
}

std::vector<double> KeptMap::layer_keep_ratio() const {
  const std::vector<double> hr = head_keep_ratio();
  std::vector<double> r(static_cast<size_t>(n_layer), 0.0);
  if (n_head_kv == 0) return r;
  for (int layer = 0; layer < n_layer; ++layer) {
    for (int h = 0; h < n_head_kv; ++h) r[static_cast<size_t>(layer)] += hr[static_cast<size_t>(layer) * n_head_kv + h];
    r[static_cast<size_t>(layer)] /= n_head_kv;
  }
  return r;
}

double KeptMap::keep_ratio() const {
  if (kept.empty()) return 0.0;
  size_t n = 0;
  for (uint8_t k : kept) n += k;
  return static_cast<double>(n) / static_cast<double>(kept.size());
}

}  // namespace kvs::inspect
