// Per-press behaviour on synthetic caches: budgets met exactly, sinks and recent window kept,
// and one behaviour specific to each method.
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

using test::contains;
using test::Synth;

using test::noise;

// Every registered press: budget per head exact, total exact, sinks + window survive. The
// expected budgets are written out, not computed by the allocator under test: 200 tokens at keep
// 0.25 is 50 per head; PyramidKV's default 64-token window exceeds that average, so it falls back
// to uniform; AdaKV moves budget between the two heads of a layer but keeps the layer's 100.
TEST(Press, EveryPressMeetsBudgetAndProtectsSinksAndWindow) {
  for (const auto& info : press_registry()) {
    if (info.name == "full") continue;
    SCOPED_TRACE(info.name);
    Press p = make_press(info.name);
    if (p.adaptive()) continue;  // chooses its own keep (tested on its own)
    if (!test::runs_on_synthetic_cache(p)) continue;  // needs the model: tests/runtime
    Synth s = Synth::make(3, 4, 2, 16, 200, noise, p.needs().stats);
    // Let the collector see all 200 context queries of every layer (random queries).
    for (int layer = 0; layer < 3; ++layer) {
      std::vector<float> q(200 * 4 * 16);
      for (size_t i = 0; i < q.size(); ++i) q[i] = noise(layer, 9, static_cast<int>(i), 3) * 10;
      std::vector<int32_t> pos(200);
      std::iota(pos.begin(), pos.end(), 0);
      s.observe(layer, q, pos);
    }
    CompressRequest r;
    r.keep = 0.25;
    r.sinks = 4;
    r.window = 8;
    const auto res = s.run(p, r);
    int64_t total = 0;
    for (int layer = 0; layer < 3; ++layer) {
      int64_t layer_total = 0;
      for (int h = 0; h < 2; ++h) {
        const auto kept = s.kept_positions(layer, h);
        if (info.name == "adakv")
          EXPECT_GE(kept.size(), 12u);  // at least the protected tokens
        else
          EXPECT_EQ(kept.size(), 50u);
        for (int i = 0; i < 4; ++i) EXPECT_TRUE(contains(kept, i)) << "sink " << i;
        for (int i = 192; i < 200; ++i) EXPECT_TRUE(contains(kept, i)) << "window " << i;
        EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
        layer_total += static_cast<int64_t>(kept.size());
      }
      EXPECT_EQ(layer_total, 100);
      total += layer_total;
    }
    EXPECT_EQ(res.slots_after, static_cast<size_t>(total));
    EXPECT_EQ(res.slots_before, 6u * 200);
    EXPECT_NEAR(res.keep_measured(), 0.25, 1e-12);
  }
}

TEST(Press, StreamingLlmKeepsSinksAndTheMostRecent) {
  Synth s = Synth::make(1, 2, 1, 8, 100, noise);
  CompressRequest r;
  r.keep = 0.2;
  r.sinks = 4;
  s.run(make_press("streaming_llm"), r);
  std::vector<int32_t> want{0, 1, 2, 3};
  for (int i = 84; i < 100; ++i) want.push_back(i);
  EXPECT_EQ(s.kept_positions(0, 0), want);
}

TEST(Press, KnormKeepsTheSmallestKeys) {
  // Norm grows with position except for a few tiny keys scattered in the middle.
  auto key = [](int, int, int pos, int d) { return (pos == 17 || pos == 55 || pos == 80) ? 0.001f : 1.0f + pos * 0.01f + d * 0.0f; };
  Synth s = Synth::make(1, 2, 1, 8, 100, key);
  CompressRequest r;
  r.keep = 0.05;  // 5 tokens
  s.run(make_press("knorm"), r);
  EXPECT_EQ(s.kept_positions(0, 0), (std::vector<int32_t>{0, 1, 17, 55, 80}));
}

TEST(Press, KeyDiffKeepsTheOutlierKeys) {
  // All keys point along e0 except three pointing along e1.
  auto key = [](int, int, int pos, int d) {
    const bool out = pos == 5 || pos == 50 || pos == 95;
    return (d == (out ? 1 : 0) ? 1.0f : 0.0f) + noise(0, 0, pos, d) * 0.1f;
  };
  Synth s = Synth::make(1, 2, 1, 8, 100, key);
  CompressRequest r;
  r.keep = 0.03;
  s.run(make_press("keydiff"), r);
  EXPECT_EQ(s.kept_positions(0, 0), (std::vector<int32_t>{5, 50, 95}));
}

TEST(Press, RandomIsSeededAndSpreadOut) {
  auto run = [](uint64_t seed) {
    Synth s = Synth::make(1, 2, 1, 8, 400, noise);
    CompressRequest r;
    r.keep = 0.5;
    r.seed = seed;
    s.run(make_press("random"), r);
    return s.kept_positions(0, 0);
  };
  const auto a = run(1), b = run(1), c = run(2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // Spread: both halves of the context keep tokens.
  const auto mid = std::count_if(a.begin(), a.end(), [](int32_t p) { return p < 200; });
  EXPECT_GT(mid, 60);
  EXPECT_LT(mid, 140);
}

// The window attends to three "needle" keys only: SnapKV keeps them, ignores everything the window
// never attends, and keeps the window itself.
TEST(Press, SnapKvKeepsWhatTheWindowAttendsAndIgnoresTheRest) {
  const int D = 16, n = 120, W = 8;
  auto key = [](int, int, int pos, int d) {
    const bool needle = pos == 10 || pos == 40 || pos == 70;
    return needle ? (d == 0 ? 4.0f : 0.0f) : noise(0, 0, pos, d);
  };
  Synth s = Synth::make(1, 2, 1, D, n, key, {.window = W});
  // Earlier queries attend strongly to positions 20..29 (SnapKV must not care about those).
  std::vector<float> q(static_cast<size_t>(n) * 2 * D, 0.0f);
  std::vector<int32_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < 2; ++h) q[(static_cast<size_t>(t) * 2 + h) * D + 0] = t >= n - W ? 8.0f : -8.0f;
  s.observe(0, q, pos);
  Press p = make_press("snapkv", {{"window_size", "8"}, {"kernel_size", "1"}});
  CompressRequest r;
  r.max_tokens = W + 3;
  s.run(p, r);
  std::vector<int32_t> want{10, 40, 70};
  for (int i = n - W; i < n; ++i) want.push_back(i);
  EXPECT_EQ(s.kept_positions(0, 0), want);
}

TEST(Press, TovaKeepsWhatTheLastQueryAttends) {
  const int D = 8, n = 60;
  auto key = [](int, int, int pos, int d) { return pos == 7 || pos == 33 ? (d == 1 ? 5.0f : 0.0f) : noise(1, 0, pos, d); };
  Synth s = Synth::make(1, 2, 1, D, n, key, {.window = 1});
  std::vector<float> q(2 * D, 0.0f);
  q[1] = q[D + 1] = 6.0f;
  s.observe(0, q, {n - 1});
  CompressRequest r;
  r.max_tokens = 2;
  s.run(make_press("tova"), r);
  EXPECT_EQ(s.kept_positions(0, 0), (std::vector<int32_t>{7, 33}));
}

// H2O keeps the keys with the largest accumulated attention (over all queries, not the window).
TEST(Press, H2oKeepsHeavyHittersAndRecentTokens) {
  const int D = 8, n = 80;
  auto key = [](int, int, int pos, int d) { return pos == 12 || pos == 30 ? (d == 2 ? 5.0f : 0.0f) : noise(2, 0, pos, d); };
  Synth s = Synth::make(1, 2, 1, D, n, key, {.col_sum = true});
  std::vector<float> q(static_cast<size_t>(n) * 2 * D, 0.0f);
  std::vector<int32_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  for (int t = 0; t < 60; ++t)
    for (int h = 0; h < 2; ++h) q[(static_cast<size_t>(t) * 2 + h) * D + 2] = 6.0f;  // early queries hit 12, 30
  s.observe(0, q, pos);
  CompressRequest r;
  r.max_tokens = 6;  // 3 recent + 3 heavy (recent_fraction 0.5)
  s.run(make_press("h2o"), r);
  const auto kept = s.kept_positions(0, 0);
  EXPECT_EQ(kept.size(), 6u);
  EXPECT_TRUE(contains(kept, 12));
  EXPECT_TRUE(contains(kept, 30));
  for (int i = 77; i < 80; ++i) EXPECT_TRUE(contains(kept, i));
}

// AdaKV: head 0's window attention is concentrated on 4 keys, head 1's spread evenly; the layer
// budget moves to the spread head (whose scores beat head 0's near-zero tail), while head 0 keeps
// its strong keys and at least the alpha floor.
TEST(Press, AdaKvGivesUnevenBudgetsWithAFloor) {
  const int D = 8, n = 200;
  auto key = [](int, int h, int pos, int d) {
    if (h == 0) return pos % 50 == 0 ? (d == 0 ? 6.0f : 0.0f) : 0.0f;  // head 0: 4 strong keys, rest flat
    return d == 0 ? 0.0f : noise(0, h, pos, d);                         // head 1: flat attention
  };
  Synth s = Synth::make(1, 4, 2, D, n, key, {.window = 16});
  std::vector<float> q(16 * 4 * D, 0.0f);
  for (int t = 0; t < 16; ++t)
    for (int h = 0; h < 4; ++h) q[(static_cast<size_t>(t) * 4 + h) * D + 0] = 5.0f;
  std::vector<int32_t> pos(16);
  std::iota(pos.begin(), pos.end(), n - 16);
  s.observe(0, q, pos);
  CompressRequest r;
  r.keep = 0.25;  // 50 per head, 100 for the layer
  s.run(make_press("adakv", {{"window_size", "16"}, {"kernel_size", "1"}, {"alpha", "0.2"}}), r);
  const int32_t b0 = s.cache->len(0, 0), b1 = s.cache->len(0, 1);
  EXPECT_EQ(b0 + b1, 100);
  EXPECT_GT(b1, b0 + 20);
  EXPECT_GE(b0, 16 + 4);  // window + strong keys, above the floor of 0.2 x 50
  const auto k0 = s.kept_positions(0, 0);
  for (int p : {0, 50, 100, 150}) EXPECT_TRUE(contains(k0, p));
}

TEST(Press, FullAndKeepOneChangeNothing) {
  for (const auto& info : press_registry()) {
    SCOPED_TRACE(info.name);
    Press p = make_press(info.name);
    if (p.adaptive() || !test::runs_on_synthetic_cache(p)) continue;  // see tests/runtime/pipeline_test.cpp
    Synth s = Synth::make(2, 2, 1, 8, 50, noise, p.needs().stats);
    std::vector<float> q(50 * 2 * 8, 0.1f);
    std::vector<int32_t> pos(50);
    std::iota(pos.begin(), pos.end(), 0);
    for (int layer = 0; layer < 2; ++layer) s.observe(layer, q, pos);
    const size_t pages = s.cache->pages_held();
    CompressRequest r;
    r.keep = 1.0;
    auto res = s.run(p, r);
    EXPECT_EQ(res.slots_after, 100u);
    EXPECT_EQ(s.cache->pages_held(), pages);
  }
}

TEST(Press, RegistryRejectsBadOptions) {
  EXPECT_THROW(make_press("nope"), Error);
  EXPECT_THROW(make_press("snapkv", {{"windw", "3"}}), Error);
  EXPECT_THROW(make_press("snapkv", {{"window_size", "abc"}}), Error);
  EXPECT_THROW(make_press("snapkv", {{"kernel_size", "4"}}), Error);
  EXPECT_THROW(make_press("adakv", {{"scorer", "bogus"}}), Error);
  EXPECT_THROW(parse_params({"novalue"}), Error);
  EXPECT_THROW(parse_trigger("every:0"), Error);
  EXPECT_EQ(parse_trigger("memory:64M").cap_bytes, 64u << 20);
  EXPECT_EQ(parse_trigger("every:4").every_n, 4);
}

}  // namespace
}  // namespace kvs

namespace kvs {
namespace {

// The statistics hooks later methods build on: column maxima, variance, queries, pre-RoPE keys.
TEST(Stats, CollectsRequestedStatisticsAndFollowsEdits) {
  StatsRequest req;
  req.col_sum = req.col_max = true;
  test::Synth s = test::Synth::make(1, 2, 1, 8, 30, [](int, int, int pos, int d) { return pos == 4 && d == 0 ? 3.0f : 0.0f; }, req);
  std::vector<float> q(30 * 2 * 8, 0.0f);
  for (int t = 0; t < 30; ++t) q[(t * 2 + 0) * 8] = q[(t * 2 + 1) * 8] = 2.0f;
  std::vector<int32_t> pos(30);
  std::iota(pos.begin(), pos.end(), 0);
  s.observe(0, q, pos);
  const auto& cs = s.stats->col_sum(0, 0);
  const auto& cm = s.stats->col_max(0, 0);
  ASSERT_EQ(cs.size(), 30u);
  // Every query from position 4 on puts most of its mass on key 4; query 0 attends only key 0.
  EXPECT_EQ(std::max_element(cs.begin(), cs.end()) - cs.begin(), 4);
  EXPECT_NEAR(cm[0], 1.0f, 1e-5f);
  double total = 0;
  for (float x : cs) total += x;
  EXPECT_NEAR(total, 30.0 * 2, 1e-3);  // each query's probabilities sum to 1, two heads per group
  EXPECT_GT(s.stats->attention_variance(0, 0), 0.0);
  // Edits keep the arrays aligned with the cache.
  const std::vector<float> before = cs;
  CacheEdit e(s.layout);
  e.at(s.layout, 0, 0) = {true, {0, 4, 29}, {}};
  s.cache->apply(e);
  s.stats->apply_edit(e);
  EXPECT_EQ(s.stats->col_sum(0, 0), (std::vector<float>{before[0], before[4], before[29]}));
}

TEST(Press, AdaKvFloorEqualsUniformAtAlphaOne) {
  auto key = [](int, int h, int pos, int d) { return h == 0 && pos % 50 == 0 && d == 0 ? 6.0f : 0.0f; };
  test::Synth s = test::Synth::make(1, 4, 2, 8, 200, key, {.window = 16});
  std::vector<float> q(16 * 4 * 8, 0.0f);
  for (int t = 0; t < 16; ++t)
    for (int h = 0; h < 4; ++h) q[(static_cast<size_t>(t) * 4 + h) * 8] = 5.0f;
  std::vector<int32_t> pos(16);
  std::iota(pos.begin(), pos.end(), 184);
  s.observe(0, q, pos);
  CompressRequest r;
  r.keep = 0.25;
  s.run(make_press("adakv", {{"window_size", "16"}, {"alpha", "1.0"}}), r);
  EXPECT_EQ(s.cache->len(0, 0), 50);
  EXPECT_EQ(s.cache->len(0, 1), 50);
}

}  // namespace
}  // namespace kvs

namespace kvs {
namespace {

// Regression: repeated eviction to an absolute budget with uneven heads must keep the layer at
// budget x heads (it used to shrink whenever one head was below the budget).
TEST(Press, AdaKvAbsoluteBudgetKeepsTheLayerTotal) {
  auto key = [](int, int h, int pos, int d) { return h == 0 && pos % 10 == 0 && d == 0 ? 6.0f : 0.01f * d; };
  test::Synth s = test::Synth::make(1, 4, 2, 8, 120, key, {.window = 8});
  std::vector<float> q(8 * 4 * 8, 0.0f);
  for (int t = 0; t < 8; ++t)
    for (int h = 0; h < 4; ++h) q[(static_cast<size_t>(t) * 4 + h) * 8] = 5.0f;
  std::vector<int32_t> pos(8);
  std::iota(pos.begin(), pos.end(), 112);
  s.observe(0, q, pos);
  Press p = make_press("adakv", {{"window_size", "8"}, {"kernel_size", "1"}});
  CompressRequest r;
  r.max_tokens = 40;
  for (int round = 0; round < 3; ++round) {
    s.run(p, r);
    EXPECT_EQ(s.cache->len(0, 0) + s.cache->len(0, 1), 80) << "round " << round;
  }
}

}  // namespace
}  // namespace kvs
