// for_each_prob_tile against a scalar oracle: every (query, key) probability of every head, on a
// cache whose heads hold different token sets, with causal masking by position.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>

#include "kvcache/attention.h"
#include "kvcache/attention_probs.h"

namespace kvs {
namespace {

TEST(AttentionProbs, TilesEqualTheScalarOracle) {
  const int H = 4, Hkv = 2, D = 8, n_ctx = 150, T = 37;
  KvLayout l{1, Hkv, D, DType::F32, 8};
  PagePool pool(l.page_bytes());
  KvCache cache(pool, l);
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> k(static_cast<size_t>(n_ctx) * Hkv * D), v(k.size());
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  std::vector<int32_t> pos(n_ctx);
  for (int i = 0; i < n_ctx; ++i) pos[i] = i;
  ASSERT_TRUE(cache.append(0, n_ctx, k.data(), v.data(), pos.data()));
  CacheEdit e(l);  // head 1 keeps every third token
  for (int i = 0; i < n_ctx; i += 3) e.at(l, 0, 1).keep.push_back(i);
  e.at(l, 0, 1).active = true;
  ASSERT_TRUE(cache.apply(e));
  // T queries at positions inside the context (causal masking matters) and after it.
  std::vector<float> q(static_cast<size_t>(T) * H * D);
  for (auto& x : q) x = nd(rng);
  std::vector<int32_t> qpos(T);
  for (int t = 0; t < T; ++t) qpos[t] = 100 + 2 * t;
  const AttnShape s{H, Hkv, D, 1.0f / std::sqrt(static_cast<float>(D))};
  // Oracle: p[t][qh][slot] in double.
  std::map<std::tuple<int, int, int>, double> want;
  std::vector<float> kr(D);
  for (int t = 0; t < T; ++t)
    for (int qh = 0; qh < H; ++qh) {
      const int kvh = qh / (H / Hkv);
      const HeadCache& hc = cache.head(0, kvh);
      std::vector<double> logit;
      double mx = -1e300;
      for (int32_t j = 0; j < hc.len(); ++j) {
        cache.read_k(0, kvh, j, kr.data());
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += static_cast<double>(q[(static_cast<size_t>(t) * H + qh) * D + d]) * kr[d];
        logit.push_back(hc.pos[j] <= qpos[t] ? dot * s.scale : -INFINITY);
        mx = std::max(mx, logit.back());
      }
      double z = 0;
      for (double x : logit) z += std::exp(x - mx);
      for (int32_t j = 0; j < hc.len(); ++j) want[{t, qh, j}] = std::exp(logit[j] - mx) / z;
    }
  ThreadPool threads(2);
  for (const int t_begin : {0, 11}) {
    std::map<std::tuple<int, int, int>, double> got;
    std::mutex mu;
    for_each_prob_tile(cache, 0, s, q.data(), qpos.data(), nullptr, T, t_begin, threads, [&](const ProbTile& tile) {
      std::lock_guard<std::mutex> lock(mu);
      for (int i = 0; i < tile.nt; ++i)
        for (int32_t j = 0; j < tile.nk; ++j) {
          const auto key = std::make_tuple(tile.t0 + i, tile.qh, tile.k0 + j);
          EXPECT_EQ(got.count(key), 0u) << "probability delivered twice";
          got[key] = tile.p[static_cast<size_t>(i) * tile.ld + j];
        }
    });
    size_t n_want = 0;
    for (const auto& [key, p] : want) {
      if (std::get<0>(key) < t_begin) continue;
      ++n_want;
      ASSERT_TRUE(got.count(key)) << "missing t=" << std::get<0>(key) << " qh=" << std::get<1>(key);
      EXPECT_NEAR(got[key], p, 2e-6) << "t=" << std::get<0>(key) << " qh=" << std::get<1>(key) << " slot=" << std::get<2>(key);
    }
    EXPECT_EQ(got.size(), n_want);
  }
}

}  // namespace
}  // namespace kvs
