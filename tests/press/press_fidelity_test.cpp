// The baselines against their published form: PyramidKV's budgets as the official code
// allocates them (window on top of a linearly decreasing budget, total preserved), TOVA's
// layer-wise averaging.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "press/registry.h"
#include "press_test_util.h"

namespace kvs {
namespace {

using test::contains;
using test::Synth;

float small_noise(int layer, int h, int pos, int d) {
  uint32_t x = static_cast<uint32_t>(layer) * 2654435761u ^ static_cast<uint32_t>(h) * 40503u ^
               static_cast<uint32_t>(pos) * 2246822519u ^ static_cast<uint32_t>(d) * 3266489917u;
  x ^= x >> 15;
  x *= 0x2c1b3c6du;
  x ^= x >> 12;
  return (static_cast<float>(x % 10000) / 10000.0f - 0.5f) * 0.2f;
}

// Shows every layer `w` window queries at the end of the context.
void observe_window(Synth& s, int n_layer, int n_head, int D, int n, int w) {
  std::vector<int32_t> pos(static_cast<size_t>(w));
  std::iota(pos.begin(), pos.end(), n - w);
  for (int layer = 0; layer < n_layer; ++layer) {
    std::vector<float> q(static_cast<size_t>(w) * n_head * D);
    for (size_t i = 0; i < q.size(); ++i) q[i] = small_noise(layer, 7, static_cast<int>(i), 1) * 10;
    s.observe(layer, q, pos);
  }
}

// 6 layers, 300 tokens, window 16, keep 0.3: A = 90 tokens per head, B = A - W = 74 beyond the
// window, min = B / 20 = 3.7, max = 2B - min = 144.3 (below 300 - 16, no cap). Layer budgets
// W + max - l (max - min) / 5 = 160.3, 132.18, 104.06, 75.94, 47.82, 19.7; cumulative sums
// 160.3, 292.48, 396.54, 472.48, 520.3, 540 round to 160, 292, 397, 472, 520, 540.
TEST(PyramidKv, BudgetsAreTheOfficialPyramidWithTheWindowOnTop) {
  Synth s = Synth::make(6, 4, 2, 8, 300, small_noise, {.window = 16});
  observe_window(s, 6, 4, 8, 300, 16);
  CompressRequest r;
  r.keep = 0.3;
  s.run(make_press("pyramidkv", {{"window_size", "16"}}), r);
  const std::vector<int32_t> want{160, 132, 105, 75, 48, 20};
  for (int layer = 0; layer < 6; ++layer) {
    EXPECT_EQ(s.cache->len(layer, 0), want[static_cast<size_t>(layer)]) << "layer " << layer;
    EXPECT_EQ(s.cache->len(layer, 1), want[static_cast<size_t>(layer)]) << "layer " << layer;
    // The observation window survives in every layer, the deepest included.
    const auto kept = s.kept_positions(layer, 0);
    for (int p = 284; p < 300; ++p) EXPECT_TRUE(contains(kept, p)) << "layer " << layer << " pos " << p;
  }
}

// keep 0.9 of 300 with window 16: B = 254, max = 2B - B/20 = 495.3 exceeds the 284 tokens beyond
// the window: the first layer is capped at 284 + 16 = 300 and the last raised to 2B - 284 + 16 = 240.
TEST(PyramidKv, TopLayerCappedAndBottomRaisedToKeepTheTotal) {
  Synth s = Synth::make(6, 4, 2, 8, 300, small_noise, {.window = 16});
  observe_window(s, 6, 4, 8, 300, 16);
  CompressRequest r;
  r.keep = 0.9;
  s.run(make_press("pyramidkv", {{"window_size", "16"}}), r);
  EXPECT_EQ(s.cache->len(0, 0), 300);
  EXPECT_EQ(s.cache->len(5, 0), 240);
  int64_t total = 0;
  for (int layer = 0; layer < 6; ++layer) total += s.cache->len(layer, 0);
  EXPECT_EQ(total, 1620);  // 6 x 270
}

// Average budget below the window (keep 0.1 of 300 = 30 < 64): no room for a pyramid, uniform.
TEST(PyramidKv, FallsBackToUniformWhenTheAverageIsUnderTheWindow) {
  Synth s = Synth::make(4, 4, 2, 8, 300, small_noise, {.window = 64});
  observe_window(s, 4, 4, 8, 300, 64);
  CompressRequest r;
  r.keep = 0.1;
  s.run(make_press("pyramidkv"), r);
  for (int layer = 0; layer < 4; ++layer) EXPECT_EQ(s.cache->len(layer, 0), 30);
}

// The measured keep equals the requested keep (to the token per head column, so within page
// granularity) from 0.1 to 0.9, on the SmolLM2-135M (30 layers, 3 KV heads, head dim 64) and
// stories260K (5 layers, 4 KV heads, head dim 8) shapes, with the default 64-token window.
TEST(PyramidKv, MeasuredKeepEqualsRequestedOnRealShapes) {
  struct Shape {
    const char* name;
    int n_layer, n_head, n_head_kv, D, n;
  };
  for (const Shape& sh : {Shape{"smollm2-135m", 30, 9, 3, 64, 1000}, Shape{"stories260k", 5, 8, 4, 8, 700}}) {
    for (int k10 = 1; k10 <= 9; ++k10) {
      SCOPED_TRACE(std::string(sh.name) + " keep 0." + std::to_string(k10));
      Synth s = Synth::make(sh.n_layer, sh.n_head, sh.n_head_kv, sh.D, sh.n, small_noise, {.window = 64});
      observe_window(s, sh.n_layer, sh.n_head, sh.D, sh.n, 64);
      CompressRequest r;
      r.keep = k10 / 10.0;
      const auto res = s.run(make_press("pyramidkv"), r);
      const double want = *r.keep * sh.n * sh.n_layer;  // per KV-head column
      for (int kvh = 0; kvh < sh.n_head_kv; ++kvh) {
        int64_t col = 0;
        for (int layer = 0; layer < sh.n_layer; ++layer) {
          col += s.cache->len(layer, kvh);
          if (layer > 0) { EXPECT_LE(s.cache->len(layer, kvh), s.cache->len(layer - 1, kvh)); }
          EXPECT_GE(s.cache->len(layer, kvh), 64);  // the window, in the deepest layer too
        }
        EXPECT_EQ(col, std::llround(want));
      }
      EXPECT_NEAR(res.keep_measured(), *r.keep, 0.5 / (sh.n * sh.n_layer));
      // Bytes: within one page per head of the requested share of the full cache.
      const double full_pages = std::ceil(sh.n / 8.0) * sh.n_layer * sh.n_head_kv;
      EXPECT_LE(s.cache->pages_held(), *r.keep * full_pages + sh.n_layer * sh.n_head_kv);
    }
  }
}

// Layer-wise TOVA: KV head 0's queries attend positions 7 (0.71) and 20 (0.29), KV head 1's 33
// (0.74) and 40 (0.26). Averaged over the layer's heads, 7 and 33 lead, so with 2 tokens each
// BOTH heads keep {7, 33}; per head, each keeps its own pair.
TEST(Tova, LayerWiseAveragingEvictsTheSameTokensInEveryHead) {
  const int D = 8, n = 60;
  auto key = [](int, int, int pos, int d) {
    const int hot = pos == 7 ? 0 : pos == 20 ? 1 : pos == 33 ? 2 : pos == 40 ? 3 : -1;
    return hot >= 0 ? (d == hot ? 5.0f : 0.0f) : small_noise(0, 0, pos, d) * 0.1f;
  };
  auto run = [&](bool per_head) {
    Synth s = Synth::make(1, 4, 2, D, n, key, {.window = 1});
    std::vector<float> q(4 * D, 0.0f);
    for (int h = 0; h < 2; ++h) q[h * D + 0] = 6.0f, q[h * D + 1] = 5.5f;  // group of KV head 0
    for (int h = 2; h < 4; ++h) q[h * D + 2] = 6.0f, q[h * D + 3] = 5.4f;  // group of KV head 1
    s.observe(0, q, {n - 1});
    CompressRequest r;
    r.max_tokens = 2;
    s.run(make_press("tova", {{"per_head", per_head ? "true" : "false"}}), r);
    return std::make_pair(s.kept_positions(0, 0), s.kept_positions(0, 1));
  };
  const auto [lw0, lw1] = run(false);
  EXPECT_EQ(lw0, (std::vector<int32_t>{7, 33}));
  EXPECT_EQ(lw1, (std::vector<int32_t>{7, 33}));
  const auto [ph0, ph1] = run(true);
  EXPECT_EQ(ph0, (std::vector<int32_t>{7, 20}));
  EXPECT_EQ(ph1, (std::vector<int32_t>{33, 40}));
}

// H2O's recent share lives in the selector: with any allocator the newest share of each head's
// budget survives, whatever the scores.
TEST(H2o, RecentShareFollowsEachHeadsBudget) {
  const int D = 8, n = 100;
  Synth s = Synth::make(2, 2, 2, D, n, small_noise, {.col_sum = true});
  std::vector<float> q(static_cast<size_t>(n) * 2 * D);
  for (size_t i = 0; i < q.size(); ++i) q[i] = small_noise(3, 1, static_cast<int>(i), 2);
  std::vector<int32_t> pos(n);
  std::iota(pos.begin(), pos.end(), 0);
  for (int layer = 0; layer < 2; ++layer) s.observe(layer, q, pos);
  CompressRequest r;
  r.keep = 0.2;  // 20 per head: the newest 10 + 10 heavy hitters
  s.run(make_press("h2o", {{"recent_fraction", "0.5"}}), r);
  for (int layer = 0; layer < 2; ++layer)
    for (int h = 0; h < 2; ++h) {
      const auto kept = s.kept_positions(layer, h);
      ASSERT_EQ(kept.size(), 20u);
      for (int p = 90; p < 100; ++p) EXPECT_TRUE(contains(kept, p));
    }
}

}  // namespace
}  // namespace kvs
