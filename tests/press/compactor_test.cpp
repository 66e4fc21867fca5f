// Compactor's parts on synthetic caches: the chunked non-causal attention statistic equals the
// reference (press/math/chunk_attention.h) whatever the prefill's batches, follows clones and
// edits; the press's score is Eq. 6 over a layer; leverage keeps outlier keys; the calibrated
// allocator keeps r* with f(r*, c) = tau for any press.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/warn.h"
#include "fake_probe.h"
#include "press/budget/calibrated.h"
#include "press/math/calibration_curve.h"
#include "press/math/chunk_attention.h"
#include "press/math/leverage.h"
#include "press/methods/compactor.h"
#include "press/registry.h"
#include "press/scorers/scorers.h"
#include "press_test_util.h"

namespace kvs {
namespace {

using test::contains;
using test::FakeProbe;
using test::Synth;

float h01(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return static_cast<float>(x % 100000) / 100000.0f;
}

float key_fn(int layer, int h, int pos, int d) {
  return 2.0f * (h01(static_cast<uint32_t>(layer * 1000003 + h * 10007 + pos * 131 + d)) - 0.5f);
}

// Shows the collector queries q [n][H][D] of positions 0..n-1 in batches of `batch`, with the
// cache's keys as the pre-RoPE keys. (The collector takes a batch's pre-RoPE keys as the last
// slots of the cache — true in a forward, where a batch is observed right after its append — so
// tests of pre-RoPE statistics show the whole prefilled cache in one batch.)
void observe_in_batches(Synth& s, int layer, const std::vector<float>& q, int n, int batch) {
  const int H = s.shape.n_head, Hkv = s.shape.n_head_kv, D = s.shape.head_dim;
  for (int b = 0; b < n; b += batch) {
    const int T = std::min(batch, n - b);
    std::vector<float> qb(q.begin() + static_cast<size_t>(b) * H * D, q.begin() + static_cast<size_t>(b + T) * H * D);
    std::vector<int32_t> pos(static_cast<size_t>(T));
    std::iota(pos.begin(), pos.end(), b);
    std::vector<float> kpre(static_cast<size_t>(T) * Hkv * D);
    for (int t = 0; t < T; ++t)
      for (int h = 0; h < Hkv; ++h) s.cache->read_k(layer, h, b + t, kpre.data() + (static_cast<size_t>(t) * Hkv + h) * D);
    std::vector<float> out(qb.size()), lse(static_cast<size_t>(T) * H);
    AttnScratch scr;
    attention(*s.cache, layer, s.shape, qb.data(), pos.data(), T, out.data(), lse.data(), *s.threads, scr);
    LayerView v;
    v.layer = layer;
    v.n_tok = T;
    v.pos = pos.data();
    v.shape = &s.shape;
    v.q = qb.data();
    v.lse = lse.data();
    v.k_pre_rope = kpre.data();
    v.cache = s.cache.get();
    s.stats->on_layer(v);
  }
}

std::vector<float> random_queries(int n, int H, int D, uint32_t seed, float scale = 1.5f) {
  std::vector<float> q(static_cast<size_t>(n) * H * D);
  for (size_t i = 0; i < q.size(); ++i) q[i] = scale * (h01(seed * 2654435761u + static_cast<uint32_t>(i)) - 0.5f);
  return q;
}

std::vector<float> all_keys(const Synth& s, int layer, int n) {
  const int Hkv = s.shape.n_head_kv, D = s.shape.head_dim;
  std::vector<float> k(static_cast<size_t>(n) * Hkv * D);
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < Hkv; ++h) s.cache->read_k(layer, h, t, k.data() + (static_cast<size_t>(t) * Hkv + h) * D);
  return k;
}

TEST(ChunkAttentionStat, RequestUnionCoversAndConflicts) {
  StatsRequest a{.col_sum = true, .chunk_attention = 16};
  StatsRequest b{.pre_rope_keys = true};
  StatsRequest u = a;
  u |= b;
  EXPECT_EQ(u, (StatsRequest{.col_sum = true, .pre_rope_keys = true, .chunk_attention = 16}));
  EXPECT_TRUE(u.covers(a));
  EXPECT_TRUE(u.covers(b));
  EXPECT_FALSE(b.covers(a));
  EXPECT_FALSE(u.covers(StatsRequest{.chunk_attention = 32}));
  EXPECT_TRUE(StatsRequest{.chunk_attention = 8}.any());
  StatsRequest c{.chunk_attention = 32};
  EXPECT_THROW(c |= a, Error);
}

TEST(ChunkAttentionStat, EqualsTheReferenceWhateverTheBatches) {
  const int H = 4, Hkv = 2, D = 8, n = 50, C = 16;
  const auto q0 = random_queries(n, H, D, 1), q1 = random_queries(n, H, D, 2);
  for (int batch : {50, 7, 1, 16}) {
    SCOPED_TRACE(batch);
    Synth s = Synth::make(2, H, Hkv, D, n, key_fn, {.chunk_attention = C});
    observe_in_batches(s, 0, q0, n, batch);
    observe_in_batches(s, 1, q1, n, batch);
    EXPECT_EQ(s.stats->chunk_pending(0), 2);  // positions 48, 49: the last chunk, still open
    math::ChunkAttentionOptions o;
    o.chunk = C;
    o.scale = 1.0f;
    for (int layer = 0; layer < 2; ++layer) {
      const auto want = math::chunk_attention_scores(layer ? q1 : q0, all_keys(s, layer, n), n, H, Hkv, D, o);
      const auto got = s.stats->chunk_attention(*s.cache, layer);
      ASSERT_EQ(got.size(), static_cast<size_t>(Hkv));
      for (int h = 0; h < Hkv; ++h) {
        ASSERT_EQ(got[h].size(), static_cast<size_t>(n));
        for (int t = 0; t < n; ++t) EXPECT_NEAR(got[h][t], want[static_cast<size_t>(h) * n + t], 2e-5) << layer << " " << h << " " << t;
      }
    }
  }
}

TEST(ChunkAttentionStat, FollowsClonesAndEdits) {
  const int H = 2, Hkv = 1, D = 8, n = 48, C = 16;
  Synth s = Synth::make(1, H, Hkv, D, n, key_fn, {.col_sum = true, .chunk_attention = C});
  observe_in_batches(s, 0, random_queries(n, H, D, 3), n, 5);
  EXPECT_EQ(s.stats->chunk_pending(0), 0);  // 48 = 3 whole chunks
  const auto before = s.stats->chunk_attention(*s.cache, 0)[0];
  const auto same = s.stats->clone_subset({.chunk_attention = C});
  EXPECT_EQ(same->chunk_attention(*s.cache, 0)[0], before);
  const auto none = s.stats->clone_subset({.col_sum = true});
  EXPECT_TRUE(none->chunk_attention(*s.cache, 0)[0].empty());
  CacheEdit e(s.layout);
  e.at(s.layout, 0, 0) = {true, {0, 5, 17, 40}, {}};
  ASSERT_TRUE(s.cache->apply(e));
  s.stats->apply_edit(e);
  EXPECT_EQ(s.stats->chunk_attention(*s.cache, 0)[0], (std::vector<float>{before[0], before[5], before[17], before[40]}));
}

// Eq. 6 over a layer: z-scores of the pooled chunk attention and of the approximate leverage scores
// of the pre-RoPE keys, both over every head and token of the layer jointly.
TEST(Compactor, ScoreIsTheLayerwiseBlendOfPooledAttentionAndLeverage) {
  const int H = 4, Hkv = 2, D = 8, n = 40, C = 16;
  Synth s = Synth::make(2, H, Hkv, D, n, key_fn, {.pre_rope_keys = true, .chunk_attention = C});
  for (int layer = 0; layer < 2; ++layer) observe_in_batches(s, layer, random_queries(n, H, D, 10 + layer), n, n);
  CompressRequest r;
  r.keep = 0.5;
  const PressEnv env = s.env(r);
  const Scores sc = CompactorScorer(CompactorOptions{.chunk = C}).score(env);  // preset=paper's: pool 3, uncentred
  const std::vector<float> phi = math::gaussian_sketch(D, 48, CompactorOptions{}.seed);
  for (int layer = 0; layer < 2; ++layer) {
    std::vector<float> a, o;
    const auto ca = s.stats->chunk_attention(*s.cache, layer);
    for (int h = 0; h < Hkv; ++h) {
      for (int t = 0; t < n; ++t) {  // mean over 3 neighbours, zero padding
        double m = 0;
        for (int j = t - 1; j <= t + 1; ++j) m += j >= 0 && j < n ? ca[h][j] : 0.0;
        a.push_back(static_cast<float>(m / 3));
      }
      const auto& kp = s.stats->pre_rope_keys(layer, h);
      const auto lev = math::approx_leverage(kp, n, D, D, phi, 48, /*center=*/false);
      o.insert(o.end(), lev.begin(), lev.end());
    }
    const auto want = math::blend_scores(a, o, 0.3);
    for (int h = 0; h < Hkv; ++h)
      for (int t = 0; t < n; ++t) EXPECT_NEAR(sc.at(s.layout, layer, h)[t], want[static_cast<size_t>(h) * n + t], 1e-4);
  }
}

// Keys along e0 except three outliers along e1, e2, e3: with the leverage scores dominating
// (lambda large), a budget of 3 keeps exactly the outliers.
TEST(Compactor, LeverageKeepsTheOutlierKeys) {
  const int H = 2, Hkv = 1, D = 8, n = 64;
  auto key = [](int, int, int pos, int d) {
    const int axis = pos == 9 ? 1 : pos == 30 ? 2 : pos == 51 ? 3 : 0;
    return (d == axis ? 1.0f : 0.0f) + 0.02f * (h01(static_cast<uint32_t>(pos * 17 + d)) - 0.5f);
  };
  Synth s = Synth::make(1, H, Hkv, D, n, key, {.pre_rope_keys = true, .chunk_attention = 16});
  observe_in_batches(s, 0, random_queries(n, H, D, 5), n, n);
  CompressRequest r;
  r.max_tokens = 3;
  s.run(make_press("compactor", {{"chunk", "16"}, {"lambda", "1000"}, {"exact", "true"}}), r);
  EXPECT_EQ(s.kept_positions(0, 0), (std::vector<int32_t>{9, 30, 51}));
}

// z-scores written here (population std), for the references below.
std::vector<double> zs(const std::vector<double>& x) {
  double m = 0, v = 0;
  for (double a : x) m += a / x.size();
  for (double a : x) v += (a - m) * (a - m) / x.size();
  std::vector<double> out;
  for (double a : x) out.push_back(v > 0 ? (a - m) / std::sqrt(v) : 0.0);
  return out;
}

// preset=official: no pooling, λ 0.5, leverage per 512-token chunk of centred keys, each chunk's
// leverage z-scored over that chunk's tokens of every KV head of the layer (compactor-vllm), the
// attention z-scored over the whole layer. Reference: exact leverage of each chunk (the exact
// scores are the oracle of the sketch, tests/press/math_leverage_test.cpp), z-scores written
// above. 1,100 tokens: chunks of 512, 512 and 76.
TEST(Compactor, OfficialPresetScoresLeveragePerChunk) {
  const int H = 4, Hkv = 2, D = 8, n = 1100, C = 128;
  Synth s = Synth::make(1, H, Hkv, D, n, key_fn, {.pre_rope_keys = true, .chunk_attention = C});
  observe_in_batches(s, 0, random_queries(n, H, D, 3), n, n);
  CompressRequest r;
  r.keep = 0.5;
  const Press p = make_press("compactor", {{"preset", "official"}, {"exact", "true"}});
  const Scores sc = p.scorer->score(s.env(r));
  const auto ca = s.stats->chunk_attention(*s.cache, 0);
  std::vector<double> a;
  for (int h = 0; h < Hkv; ++h) a.insert(a.end(), ca[h].begin(), ca[h].end());  // no pooling
  const std::vector<double> za = zs(a);
  std::vector<double> zo(static_cast<size_t>(Hkv) * n);
  for (int c0 = 0; c0 < n; c0 += 512) {
    const int m = std::min(512, n - c0);
    std::vector<double> o;
    for (int h = 0; h < Hkv; ++h) {
      const auto& kp = s.stats->pre_rope_keys(0, h);
      const auto ex = math::exact_leverage(std::span<const float>(kp).subspan(static_cast<size_t>(c0) * D), m, D, D,
                                           {.center = true});
      o.insert(o.end(), ex.scores.begin(), ex.scores.end());
    }
    const auto z = zs(o);
    for (int h = 0; h < Hkv; ++h)
      for (int t = 0; t < m; ++t) zo[static_cast<size_t>(h) * n + c0 + t] = z[static_cast<size_t>(h) * m + t];
  }
  double worst = 0, vs_whole = 0;
  const Scores whole = make_press("compactor", {{"preset", "official"}, {"exact", "true"}, {"lev_chunk", "0"}}).scorer->score(s.env(r));
  for (int h = 0; h < Hkv; ++h)
    for (int t = 0; t < n; ++t) {
      const size_t i = static_cast<size_t>(h) * n + t;
      worst = std::max(worst, std::abs(sc.at(s.layout, 0, h)[t] - (za[i] + 0.5 * zo[i])));
      vs_whole = std::max(vs_whole, static_cast<double>(std::abs(sc.at(s.layout, 0, h)[t] - whole.at(s.layout, 0, h)[t])));
    }
  EXPECT_LT(worst, 2e-4);
  EXPECT_GT(vs_whole, 0.05);  // per-chunk leverage is not the whole sequence's
  // The official preset protects the first 16 and last 64 tokens; the paper's protects none.
  const PressInfo& info = press_info("compactor");
  EXPECT_EQ(default_sinks(info, {{"preset", "official"}}), 16);
  EXPECT_EQ(default_window(info, {{"preset", "official"}}), 64);
  EXPECT_EQ(default_sinks(info, {}), 0);
  EXPECT_EQ(default_window(info, {}), 0);
}

// k >= head_dim: the sketch spans the keys' column space, the "approximation" is exact: a warning.
TEST(Compactor, WarnsWhenTheSketchIsNoApproximation) {
  const int H = 2, Hkv = 1, D = 8, n = 32;
  Synth s = Synth::make(1, H, Hkv, D, n, key_fn, {.pre_rope_keys = true, .chunk_attention = 16});
  observe_in_batches(s, 0, random_queries(n, H, D, 4), n, n);
  CompressRequest r;
  r.keep = 0.5;
  std::vector<std::string> got;
  reset_warnings();
  const WarnSink old = set_warn_sink([&](const std::string& m) { got.push_back(m); });
  make_press("compactor", {{"chunk", "16"}, {"sketch_dim", "4"}}).scorer->score(s.env(r));  // k < d: silent
  EXPECT_TRUE(got.empty());
  make_press("compactor", {{"chunk", "16"}}).scorer->score(s.env(r));  // k 48 >= d 8
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].find("sketch_dim k = 48 >= head_dim 8"), std::string::npos) << got[0];
  make_press("compactor", {{"chunk", "16"}, {"exact", "true"}}).scorer->score(s.env(r));  // exact: nothing to say
  EXPECT_EQ(got.size(), 1u);
  set_warn_sink(old);
  reset_warnings();
}

TEST(Compactor, RegisteredWithItsOptions) {
  const PressInfo& info = press_info("compactor");
  EXPECT_EQ(info.default_allocator, "global_layer");
  EXPECT_EQ(info.default_sinks, 0);  // the paper protects nothing
  EXPECT_EQ(info.default_window, 0);
  EXPECT_EQ(make_press("compactor").needs().stats, (StatsRequest{.pre_rope_keys = true, .chunk_attention = 256}));
  EXPECT_EQ(make_press("compactor", {{"preset", "official"}}).needs().stats,
            (StatsRequest{.pre_rope_keys = true, .chunk_attention = 128}));
  EXPECT_EQ(make_press("compactor", {{"preset", "official"}, {"chunk", "64"}}).needs().stats,
            (StatsRequest{.pre_rope_keys = true, .chunk_attention = 64}));  // explicit wins
  EXPECT_THROW(make_press("compactor", {{"preset", "vllm"}}), Error);
  EXPECT_THROW(make_press("compactor", {{"zscore", "token"}}), Error);
  EXPECT_THROW(make_press("compactor", {{"pool", "4"}}), Error);
  EXPECT_THROW(make_press("compactor", {{"sketch_dim", "0"}}), Error);
  EXPECT_NO_THROW(make_press("compactor", {{"allocator", "uniform"}}));
  EXPECT_NO_THROW(allocator_info("global_layer"));
  EXPECT_NO_THROW(allocator_info("quality"));
}

// ---- context-calibrated compression (any press) ------------------------------------------------

TEST(Quality, KeyIsThePressLabelWithoutDefaultsOrTheQualityAllocator) {
  EXPECT_EQ(quality_key("compactor", {}), "compactor");
  EXPECT_EQ(quality_key("compactor", {{"lambda", "0.30"}, {"allocator", "global_layer"}}), "compactor");
  EXPECT_EQ(quality_key("compactor", {{"allocator", "quality"}, {"tau", "0.9"}}), "compactor");
  EXPECT_EQ(quality_key("snapkv", {{"allocator", "quality"}, {"base", "adakv"}, {"window_size", "32"}}),
            "snapkv:allocator=adakv:window_size=32");
  EXPECT_EQ(quality_key("kvzip", {{"level", "head"}}), "kvzip:level=head");
}

struct QualityCase {
  Synth s = Synth::make(2, 4, 2, 8, 120, key_fn, {.window = 4});
  FakeProbe probe{2, s.shape, *s.threads};
  QualityCase() {
    observe_in_batches(s, 0, random_queries(120, 4, 8, 7), 120, 120);
    observe_in_batches(s, 1, random_queries(120, 4, 8, 8), 120, 120);
    probe.nll.assign(119, 2.0f);
    probe.nll[0] = 3.19f;  // mean NLL 2.01
    probe.calib["quality"] = {{"fits", {{"snapkv:window_size=4", {{"alpha", 0.5}, {"beta", 1.0}}}}}};
  }
};

TEST(Quality, KeepsRStarWithFOfRStarEqualToTau) {
  const double b = 0.5 * 2.01 + 1.0;
  const double r_star = std::log1p(0.9 * std::expm1(b)) / b;  // closed form of f(r, b) = 0.9
  ASSERT_NEAR(math::calib_f(r_star, b), 0.9, 1e-12);
  for (bool as_option : {false, true}) {
    SCOPED_TRACE(as_option);
    QualityCase c;
    const Press p = as_option ? make_calibrated_press("snapkv", {{"window_size", "4"}, {"allocator", "quality"}, {"tau", "0.9"}}, std::nullopt)
                              : make_calibrated_press("snapkv", {{"window_size", "4"}}, 0.9);
    EXPECT_TRUE(p.adaptive());
    EXPECT_TRUE(p.allocator->calibrated());
    EXPECT_TRUE(p.needs().context_nll);
    CompressRequest r;
    if (!as_option) r.quality = 0.9;
    const CompressResult res = compress(*c.s.cache, c.s.stats.get(), p, r, c.s.shape, *c.s.threads, {&c.probe, &c.s.state});
    ASSERT_TRUE(res.keep_chosen.has_value());
    EXPECT_NEAR(*res.keep_chosen, r_star, 1e-9);
    for (int layer = 0; layer < 2; ++layer)
      for (int h = 0; h < 2; ++h) EXPECT_EQ(c.s.cache->len(layer, h), std::lround(r_star * 120));
  }
}

TEST(Quality, RefusedWithoutAFitOrWithTwoTargets) {
  QualityCase c;
  CompressRequest r;
  r.quality = 0.9;
  const Press other = make_calibrated_press("snapkv", {{"window_size", "2"}}, 0.9);
  try {
    compress(*c.s.cache, c.s.stats.get(), other, r, c.s.shape, *c.s.threads, {&c.probe, &c.s.state});
    FAIL() << "a missing fit was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("snapkv:window_size=2"), std::string::npos) << m;
    EXPECT_NE(m.find("snapkv:window_size=4"), std::string::npos) << m;  // what the file holds
  }
  c.probe.calib.clear();
  EXPECT_THROW(compress(*c.s.cache, c.s.stats.get(), make_calibrated_press("snapkv", {{"window_size", "4"}}, 0.9), r,
                        c.s.shape, *c.s.threads, {&c.probe, &c.s.state}),
               Error);
  EXPECT_EQ(c.s.cache->total_slots(), 4u * 120);
  EXPECT_THROW(make_calibrated_press("snapkv", {{"allocator", "quality"}}, 0.9), Error);
  // An adaptive press has nothing to calibrate.
  EXPECT_THROW(make_calibrated_press("snapkv", {{"allocator", "nucleus"}}, 0.9), Error);
}

}  // namespace
}  // namespace kvs
