// The press framework's contracts, each with a component written here that only a correct
// framework serves: an allocator that reads a statistic, a merger with state across decode steps,
// an adaptive press whose chosen keep is reported, atomic edits at the memory cap, and the
// request checks.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "press/budget/allocators.h"
#include "press/registry.h"
#include "press/scorers/scorers.h"
#include "press_test_util.h"

namespace kvs {
namespace {

using test::Synth;

float flat(int, int, int pos, int d) { return 0.05f * static_cast<float>((pos * 7 + d * 3) % 11) - 0.25f; }

// Layer budgets proportional to the variance of the attention each layer's slots received (a
// D2O-like allocator): it needs column sums and reads them through the environment.
class VarianceAllocator : public BudgetAllocator {
 public:
  std::string name() const override { return "variance_test"; }
  Needs needs() const override { return {.stats = {.col_sum = true}}; }
  Allocation allocate(const Scores&, const PressEnv& env) const override {
    const KvLayout& l = env.cache.layout();
    std::vector<double> var(static_cast<size_t>(l.n_layer));
    double sum = 0;
    for (int layer = 0; layer < l.n_layer; ++layer) {
      var[layer] = env.stats->attention_variance(layer, 0);
      sum += var[layer];
    }
    Allocation a;
    for (int layer = 0; layer < l.n_layer; ++layer)
      for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
        const double total = *env.request.keep * env.cache.len(layer, kvh) * l.n_layer;
        a.budgets.push_back(static_cast<int32_t>(std::lround(total * var[layer] / sum)));
      }
    return a;
  }
};

TEST(PressFramework, AllocatorReadsAStatistic) {
  const int D = 8, n = 100;
  Synth s = Synth::make(2, 2, 1, D, n, [](int layer, int, int pos, int d) {
    // Layer 1 has one key every query attends (high variance); layer 0 is flat.
    return layer == 1 && pos == 50 ? (d == 0 ? 8.0f : 0.0f) : flat(layer, 0, pos, d);
  });
  Press p = compose("var", std::make_shared<RandomScorer>(), std::make_shared<VarianceAllocator>());
  ASSERT_TRUE(p.needs().stats.col_sum);  // the press's needs include its allocator's
  s.stats = std::make_unique<StatsCollector>(s.layout, s.shape, 0, p.needs().stats, *s.threads);
  std::vector<float> q(static_cast<size_t>(n) * 2 * D, 0.0f);
  for (int t = 0; t < n; ++t) q[static_cast<size_t>(t) * 2 * D] = q[(static_cast<size_t>(t) * 2 + 1) * D] = 3.0f;
  std::vector<int32_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  for (int layer = 0; layer < 2; ++layer) s.observe(layer, q, pos);
  ASSERT_GT(s.stats->attention_variance(1, 0), 10 * s.stats->attention_variance(0, 0));
  CompressRequest r;
  r.keep = 0.5;
  s.run(p, r);
  EXPECT_GT(s.cache->len(1, 0), 3 * s.cache->len(0, 0));
  EXPECT_NEAR(s.cache->len(0, 0) + s.cache->len(1, 0), 100, 1);
  // Without the statistic the press is refused, not run on nothing.
  Synth bare = Synth::make(2, 2, 1, D, n, flat);
  EXPECT_THROW(bare.run(p, r), Error);
}

// A merger with per-sequence state: folds every evicted row into the newest kept row (weights
// 1/2, 1/2 on K and V) and keeps an EMA (beta 0.5) of the number of rows it merged per call.
class CountingMerger : public Merger {
 public:
  std::string name() const override { return "count_test"; }
  void merge(const Scores&, const PressEnv& env, CacheEdit& edit) const override {
    const KvLayout& l = env.cache.layout();
    double merged = 0;
    for (int i = 0; i < l.n_heads_total(); ++i) {
      HeadEdit& e = edit.heads[static_cast<size_t>(i)];
      if (!e.active || e.keep.empty()) continue;
      const int layer = i / l.n_head_kv, kvh = i % l.n_head_kv;
      const int32_t target = e.keep.back();
      RowWrite w;
      w.slot = target;
      w.k.resize(static_cast<size_t>(l.head_dim));
      w.v.resize(w.k.size());
      env.cache.read_k(layer, kvh, target, w.k.data());
      env.cache.read_v(layer, kvh, target, w.v.data());
      float mass = 1;
      std::vector<float> k(w.k.size()), v(w.k.size());
      size_t j = 0;
      for (int32_t s = 0; s < env.cache.len(layer, kvh); ++s) {
        while (j < e.keep.size() && e.keep[j] < s) ++j;
        if (j < e.keep.size() && e.keep[j] == s) continue;  // kept
        env.cache.read_k(layer, kvh, s, k.data());
        env.cache.read_v(layer, kvh, s, v.data());
        for (size_t d = 0; d < k.size(); ++d) w.k[d] = 0.5f * (w.k[d] + k[d]), w.v[d] = 0.5f * (w.v[d] + v[d]);
        mass += 1;
        merged += 1;
      }
      w.mass = mass;
      e.writes.push_back(std::move(w));
    }
    auto& ema = env.state->values["merged_ema"];
    ema.push_back(ema.empty() ? merged : 0.5 * merged + 0.5 * ema.back());
  }
};

TEST(PressFramework, MergerKeepsStateAcrossDecodeSteps) {
  const int D = 4;
  Synth s = Synth::make(1, 1, 1, D, 10, [](int, int, int pos, int d) { return static_cast<float>(pos * 10 + d); });
  Press p = compose("merge", std::make_shared<StreamingScorer>(), std::make_shared<UniformAllocator>(), {},
                    std::make_shared<CountingMerger>());
  CompressRequest r;
  r.max_tokens = 6;
  s.run(p, r);  // 10 -> 6: merges 4 rows
  // Two "decode steps": append one token, evict back to 6 (one merged row each).
  for (int step = 0; step < 2; ++step) {
    std::vector<float> k(D, 100.0f + step), v(D, -1.0f);
    const int32_t pos = 10 + step;
    ASSERT_TRUE(s.cache->append(0, 1, k.data(), v.data(), &pos));
    s.run(p, r);
  }
  const auto& ema = s.state.values.at("merged_ema");
  ASSERT_EQ(ema.size(), 3u);
  EXPECT_DOUBLE_EQ(ema[0], 4.0);
  EXPECT_DOUBLE_EQ(ema[1], 0.5 * 1 + 0.5 * 4.0);
  EXPECT_DOUBLE_EQ(ema[2], 0.5 * 1 + 0.5 * 2.5);
  // The streaming scorer keeps the newest 6; the merged row is the newest and carries the mass
  // bookkeeping (attention does not use it: merged rows are plain weighted averages, as D2O's
  // paper defines them).
  EXPECT_EQ(s.cache->head(0, 0).pos, (std::vector<int32_t>{6, 7, 8, 9, 10, 11}));
  ASSERT_EQ(s.cache->head(0, 0).mass.size(), 6u);
  EXPECT_EQ(s.cache->head(0, 0).mass.back(), 2.0f);
  // pos 9 absorbed pos 0..3 at prefill: 90 -> 45 -> 27.5 -> 23.75 -> 26.875 (mass 5); pos 11
  // absorbed pos 5 at the last step: (101 + 50) / 2.
  std::vector<float> k(D);
  s.cache->read_k(0, 0, 3, k.data());
  EXPECT_FLOAT_EQ(k[0], 26.875f);
  EXPECT_EQ(s.cache->head(0, 0).mass[3], 5.0f);
  s.cache->read_k(0, 0, 5, k.data());
  EXPECT_FLOAT_EQ(k[0], 75.5f);
}

// A cap failure leaves cache and state exactly as they were (the edit is planned first).
TEST(PressFramework, FailedApplyLeavesCacheAndStateUnchanged) {
  const int D = 4;
  Synth s = Synth::make(1, 1, 1, D, 10, [](int, int, int pos, int d) { return static_cast<float>(pos * 10 + d); });
  Press p = compose("merge", std::make_shared<StreamingScorer>(), std::make_shared<UniformAllocator>(), {},
                    std::make_shared<CountingMerger>());
  // Share every page with a fork, then cap the pool at what is in use: the merge must copy a
  // shared page and the compaction needs fresh ones.
  auto fork = s.cache->fork();
  s.pool->set_max_bytes(s.pool->bytes_in_use());
  s.state.values["merged_ema"] = {7.0};
  const auto pos_before = s.cache->head(0, 0).pos;
  const size_t in_use = s.pool->pages_in_use();
  CompressRequest r;
  r.max_tokens = 6;
  EXPECT_THROW(s.run(p, r), Error);
  EXPECT_EQ(s.cache->head(0, 0).pos, pos_before);
  EXPECT_TRUE(s.cache->head(0, 0).mass.empty());
  EXPECT_EQ(s.pool->pages_in_use(), in_use);
  EXPECT_EQ(s.state.values.at("merged_ema"), std::vector<double>{7.0});
  std::vector<float> k(D);
  for (int32_t slot = 0; slot < 10; ++slot) {
    s.cache->read_k(0, 0, slot, k.data());
    EXPECT_EQ(k[1], slot * 10 + 1.0f);
  }
}

// An adaptive press (nucleus allocator) takes no keep ratio, chooses one, and reports it.
TEST(PressFramework, AdaptivePressChoosesAndReportsItsKeep) {
  const int D = 8, n = 200;
  // KV head 0's window attends 4 keys, head 1's spreads its attention: the nucleus of head 0 is
  // small, head 1's large.
  Synth s = Synth::make(1, 2, 2, D, n, [](int, int h, int pos, int d) {
    if (h == 0) return pos % 50 == 0 ? (d == 0 ? 8.0f : 0.0f) : 0.0f;
    return 0.0f;
  }, {.window = 4});
  std::vector<float> q(4 * 2 * D, 0.0f);
  for (int t = 0; t < 4; ++t) q[static_cast<size_t>(t) * 2 * D] = q[(static_cast<size_t>(t) * 2 + 1) * D] = 3.0f;
  s.observe(0, q, {196, 197, 198, 199});
  Press p = make_press("snapkv", {{"allocator", "nucleus"}, {"mass", "0.9"}, {"window_size", "4"}, {"kernel_size", "1"}});
  ASSERT_TRUE(p.adaptive());
  CompressRequest fixed;
  fixed.keep = 0.5;
  EXPECT_THROW(s.run(p, fixed), Error);  // a keep ratio for a press that chooses its own
  CompressRequest r;                     // no keep: auto
  const auto res = s.run(p, r);
  ASSERT_TRUE(res.keep_chosen.has_value());
  EXPECT_DOUBLE_EQ(*res.keep_chosen, res.keep_measured());
  EXPECT_LT(s.cache->len(0, 0), 10);   // the 4 attended keys + the window
  EXPECT_GT(s.cache->len(0, 1), 150);  // 90% of a flat distribution
  // A fixed-budget press without a budget is refused, keep 1 is the identity for every press.
  Synth t = Synth::make(1, 2, 2, D, n, flat);
  EXPECT_THROW(t.run(make_press("knorm"), CompressRequest{}), Error);
  CompressRequest one;
  one.keep = 1.0;
  EXPECT_EQ(t.run(p, one).slots_after, 2u * n);
}

// A press that needs the model is refused without one (no silent fallback).
class ProbeScorer : public Scorer {
 public:
  std::string name() const override { return "probe_test"; }
  Needs needs() const override { return {.probe = true}; }
  Scores score(const PressEnv& env) const override { return make_scores(env.cache); }
};

TEST(PressFramework, PressNeedingTheModelIsRefusedWithoutAProbe) {
  Synth s = Synth::make(1, 2, 1, 8, 20, flat);
  Press p = compose("probe", std::make_shared<ProbeScorer>(), std::make_shared<UniformAllocator>());
  CompressRequest r;
  r.keep = 0.5;
  try {
    s.run(p, r);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs the model"), std::string::npos) << e.what();
  }
}

TEST(PressFramework, StatsRequestUnionAndCover) {
  StatsRequest a{.col_sum = true, .window = 8};
  StatsRequest b{.window = 16, .attn_input_moments = true};
  StatsRequest u = a;
  u |= b;
  EXPECT_EQ(u, (StatsRequest{.col_sum = true, .window = 16, .attn_input_moments = true}));
  EXPECT_TRUE(u.covers(a));
  EXPECT_TRUE(u.covers(b));
  EXPECT_FALSE(a.covers(b));
  EXPECT_FALSE(a.covers(StatsRequest{.query_gram = QueryGram::PreRope}));
  EXPECT_TRUE(StatsRequest{}.covers(StatsRequest{}));
  EXPECT_FALSE(StatsRequest{}.any());
  StatsRequest pre{.query_gram = QueryGram::PreRope}, post{.query_gram = QueryGram::PostRope};
  EXPECT_THROW(pre |= post, Error);
}

// Decode-like observation one query at a time: the window holds at least the last W queries (all
// of them while fewer were seen) and at most 2W (trimmed in batches), oldest first, and its tail
// is exactly the queries fed, in order.
TEST(PressFramework, WindowKeepsTheLastQueriesTrimmedInBatches) {
  const int D = 4, H = 2, n = 40, W = 5;
  Synth s = Synth::make(1, H, 1, D, n, flat, {.window = W});
  std::vector<std::vector<float>> fed;
  for (int t = 0; t < n; ++t) {
    std::vector<float> q(static_cast<size_t>(H) * D);
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(t * 100 + static_cast<int>(i));
    s.observe(0, q, {t});
    fed.push_back(q);
    const auto& w = s.stats->window(0);
    ASSERT_GE(w.size(), std::min(t + 1, W)) << t;
    ASSERT_LT(w.size(), 2 * W) << t;
    ASSERT_EQ(w.q.size(), static_cast<size_t>(w.size()) * H * D);
    for (int j = 0; j < w.size(); ++j) {
      const int tj = t - (w.size() - 1 - j);  // the query this entry must hold
      ASSERT_EQ(w.pos[static_cast<size_t>(j)], tj) << t;
      ASSERT_TRUE(std::equal(fed[static_cast<size_t>(tj)].begin(), fed[static_cast<size_t>(tj)].end(),
                             w.q.begin() + static_cast<std::ptrdiff_t>(j) * H * D))
          << t << " " << j;
    }
  }
}

// Query Gram statistics equal the sums computed directly; clone_subset keeps only what is asked.
TEST(PressFramework, QueryGramAndSubsetClone) {
  const int D = 4, H = 2, n = 13;
  Synth s = Synth::make(1, H, 1, D, n, flat, {.col_sum = true, .window = 3, .query_gram = QueryGram::PostRope});
  std::vector<float> q(static_cast<size_t>(n) * H * D);
  for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<int32_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  s.observe(0, std::vector<float>(q.begin(), q.begin() + 5 * H * D), std::vector<int32_t>(pos.begin(), pos.begin() + 5));
  s.observe(0, std::vector<float>(q.begin() + 5 * H * D, q.end()), std::vector<int32_t>(pos.begin() + 5, pos.end()));
  for (int h = 0; h < H; ++h) {
    const auto& g = s.stats->query_gram(0, h);
    EXPECT_EQ(g.count, n);
    for (int i = 0; i < D; ++i)
      for (int j = 0; j < D; ++j) {
        double want = 0;
        for (int t = 0; t < n; ++t) want += q[(static_cast<size_t>(t) * H + h) * D + i] * q[(static_cast<size_t>(t) * H + h) * D + j];
        EXPECT_NEAR(g.gram[static_cast<size_t>(i) * D + j], want, 1e-4);
      }
  }
  auto sub = s.stats->clone_subset({.window = 1});
  EXPECT_EQ(sub->request(), (StatsRequest{.window = 1}));
  EXPECT_TRUE(sub->col_sum(0, 0).empty());
  ASSERT_EQ(sub->window(0).size(), 1);
  EXPECT_EQ(sub->window(0).pos[0], n - 1);
}

}  // namespace
}  // namespace kvs
