// D2O's press parts on synthetic caches, with answers computed by hand (or by brute force written
// out here, independent of press/math): the allocator equals Eq. 5 on given variances and Eq. 4 on
// collected statistics, min-max density differs from the paper's, the selector keeps sinks + M
// recent + N heavy hitters, a merge follows Eq. 12 (and the official scatter-mean) row by row,
// and the EMA threshold follows Eq. 10 over a prefill and three decode steps. At head_dim 64 with 3
// KV heads, against references written here from the paper and the official code: the official
// density over query heads, the whole press's kept slots, the official one-per-layer threshold.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "press/budget/allocators.h"
#include "press/methods/d2o.h"
#include "press/registry.h"
#include "press/scorers/scorers.h"
#include "press_test_util.h"

namespace kvs {
namespace {

using test::contains;
using test::Synth;

using test::noise;

// Random queries for every layer (scale differs per layer and head so attention densities differ).
void observe_all(Synth& s, int n_layer, int n_head, int D, int n, float scale_per_layer) {
  for (int layer = 0; layer < n_layer; ++layer) {
    std::vector<float> q(static_cast<size_t>(n) * n_head * D);
    for (int t = 0; t < n; ++t)
      for (int h = 0; h < n_head; ++h)
        for (int d = 0; d < D; ++d)
          q[(static_cast<size_t>(t) * n_head + h) * D + d] =
              noise(layer, 9 + h, t, d) * 10.0f * (1.0f + scale_per_layer * layer) * (1.0f + 0.7f * h);
    std::vector<int32_t> pos(static_cast<size_t>(n));
    std::iota(pos.begin(), pos.end(), 0);
    s.observe(layer, q, pos);
  }
}

// Eq. 5 on given F: alpha_l = exp(-F_l) / sum exp(-F) * L * rho, S_l = alpha_l * S per head.
TEST(D2o, AllocatorEqualsEq5OnGivenVariances) {
  Synth s = Synth::make(3, 4, 2, 8, 100, noise, {.col_sum = true});
  s.state.values[kD2oLayerF] = {0.0, 0.5, 2.0};
  CompressRequest r;
  r.keep = 0.4;
  const Allocation a = D2oAllocator().allocate({}, s.env(r));
  const double e0 = 1.0, e1 = std::exp(-0.5), e2 = std::exp(-2.0), z = e0 + e1 + e2;
  const double S_l[3] = {e0 / z * 3 * 0.4 * 100, e1 / z * 3 * 0.4 * 100, e2 / z * 3 * 0.4 * 100};  // 68.9, 41.8, 9.3
  int64_t total = 0;
  for (int layer = 0; layer < 3; ++layer)
    for (int h = 0; h < 2; ++h) {
      const int32_t b = a.budgets[static_cast<size_t>(layer * 2 + h)];
      EXPECT_NEAR(b, S_l[layer], 1.0) << "layer " << layer;
      total += b;
    }
  EXPECT_EQ(total, 240);  // L * rho * S * heads = 3 * 0.4 * 100 * 2
  EXPECT_EQ(a.budgets, (Budgets{69, 69, 42, 42, 9, 9}));
  // With a token budget (decode time) the same shares of max_tokens x heads.
  CompressRequest rt;
  rt.max_tokens = 40;
  const Allocation at = D2oAllocator().allocate({}, s.env(rt));
  EXPECT_EQ(at.budgets, (Budgets{69, 69, 42, 42, 9, 9}));
}

// Eq. 4 on collected statistics: the unbiased variance of each KV head's column sums divided by
// the group size, averaged over the layer's KV heads; the allocator computes it at the first
// compression and keeps it in the sequence's state.
TEST(D2o, LayerDensityIsTheVarianceOfTheColumnSums) {
  const int L = 2, H = 4, Hkv = 2, D = 8, n = 64;
  Synth s = Synth::make(L, H, Hkv, D, n, noise, {.col_sum = true});
  observe_all(s, L, H, D, n, 2.0f);
  std::vector<double> want(L, 0.0);
  for (int layer = 0; layer < L; ++layer) {
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      const auto& cs = s.stats->col_sum(layer, kvh);
      ASSERT_EQ(cs.size(), static_cast<size_t>(n));
      double m = 0;
      for (float x : cs) m += x / 2.0;
      m /= n;
      double v = 0;
      for (float x : cs) v += (x / 2.0 - m) * (x / 2.0 - m);
      want[layer] += v / (n - 1) / Hkv;
    }
  }
  const auto F = d2o_layer_F(*s.stats, math::D2oDensity::Paper);
  ASSERT_EQ(F.size(), 2u);
  for (int layer = 0; layer < L; ++layer) EXPECT_NEAR(F[layer], want[layer], 1e-6 * want[layer]);
  CompressRequest r;
  r.keep = 0.5;
  ASSERT_TRUE(s.state.values.empty());
  D2oAllocator(math::D2oDensity::Paper).allocate({}, s.env(r));
  ASSERT_EQ(s.state.values.count(kD2oLayerF), 1u);
  EXPECT_EQ(s.state.values.at(kD2oLayerF), F);
  // Eq. 5's targets per layer (tokens per KV head), summing to the request: 0.5 x 4 x 64 = 128.
  const auto& tgt = s.state.values.at(kD2oLayerTarget);
  ASSERT_EQ(tgt.size(), 2u);
  EXPECT_NEAR((tgt[0] + tgt[1]) * Hkv, 128.0, 1e-9);
}

// Streaming (per-token eviction from the first token past the budget, as streamed perplexity
// does): every layer starts at the budget b, then the sizes move to Eq. 5's S_l = softmax(-F)_l
// L b per head — the flat layer grows past b, the sharp ones shrink — and stay there; the total
// never exceeds L H b. Expected sizes: largest-remainder rounding of 120 exp(-F_l) / (2 Σ exp(-F))
// over the 6 heads, computed here.
TEST(D2o, StreamedLayerSizesFollowEq5) {
  const int L = 3, H = 2, Hkv = 2, D = 4, b = 20;
  Synth s = Synth::make(L, H, Hkv, D, b + 1, noise, {.col_sum = true});
  s.state.values[kD2oLayerF] = {0.0, 0.5, 2.0};
  Press p = compose("d2o_stream", std::make_shared<StreamingScorer>(), std::make_shared<D2oAllocator>());
  CompressRequest r;
  r.max_tokens = b;
  // Expected: ideal shares, floors, then the leftover to the largest remainders (ties: lower index).
  const double z = 1.0 + std::exp(-0.5) + std::exp(-2.0);
  std::vector<double> ideal;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < Hkv; ++h) ideal.push_back(L * Hkv * b * std::exp(-s.state.values[kD2oLayerF][l]) / (Hkv * z));
  std::vector<int> want(ideal.size());
  int left = L * Hkv * b;
  for (size_t i = 0; i < ideal.size(); ++i) left -= (want[i] = static_cast<int>(std::floor(ideal[i])));
  std::vector<size_t> order(ideal.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t c) { return ideal[a] - std::floor(ideal[a]) > ideal[c] - std::floor(ideal[c]); });
  for (int i = 0; i < left; ++i) ++want[order[static_cast<size_t>(i)]];
  EXPECT_EQ(want, (std::vector<int>{34, 34, 21, 21, 5, 5}));
  int32_t pos = b + 1;
  for (int step = 0; step < 200; ++step) {
    s.run(p, r);
    int64_t total = 0;
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < Hkv; ++h) total += s.cache->len(l, h);
    ASSERT_LE(total, L * Hkv * b) << "step " << step;
    if (step == 0) { EXPECT_EQ(s.cache->len(0, 0), b + 1); }  // the flat layer keeps its new token
    // One new token in every layer and head (and its query, so the statistics follow the cache).
    for (int l = 0; l < L; ++l) {
      std::vector<float> k(static_cast<size_t>(Hkv) * D), v(k.size(), 0.0f), q(static_cast<size_t>(H) * D);
      for (int h = 0; h < Hkv; ++h)
        for (int d = 0; d < D; ++d) k[static_cast<size_t>(h) * D + d] = noise(l, h, pos, d);
      for (float& x : q) x = 0.1f;
      ASSERT_TRUE(s.cache->append(l, 1, k.data(), v.data(), &pos));
      s.observe(l, q, {pos});
    }
    ++pos;
  }
  s.run(p, r);
  std::vector<int> got;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < Hkv; ++h) got.push_back(s.cache->len(l, h));
  EXPECT_EQ(got, want);
  const auto& tgt = s.state.values.at(kD2oLayerTarget);
  EXPECT_EQ(tgt, (std::vector<double>{34, 21, 5}));
}

// layers=official (preset=official): sizes fixed at the first compression from the clamped
// ratios, int(S0 r / 2) x 2 tokens; layers 0, 1 and L-1 are never compressed.
TEST(D2o, OfficialLayersAreFixedClampedAndSkipTheEnds) {
  const int L = 5, Hkv = 1, D = 4, n = 100;
  Synth s = Synth::make(L, 1, Hkv, D, n, noise, {.col_sum = true});
  s.state.values[kD2oLayerF] = {0.0, 0.0, 0.0, 3.0, 0.0};  // layer 3 is sharp
  CompressRequest r;
  r.keep = 0.2;
  const Allocation a = D2oAllocator(math::D2oDensity::OfficialMinMax, D2oLayers::Official).allocate({}, s.env(r));
  // softmax(-F) L ρ: 4 layers of weight 1, one of e^-3; z = 4.0498; ratio = 5 x 0.2 / z = 0.2469
  // for the flat layers, 0.0123 for layer 3.
  const double z = 4.0 + std::exp(-3.0);
  const int flat = 2 * static_cast<int>(n * (1.0 / z) / 2.0), sharp = 2 * static_cast<int>(n * (std::exp(-3.0) / z) / 2.0);
  EXPECT_EQ(flat, 24);
  EXPECT_EQ(sharp, 0);  // the official code would hold nothing there; we keep one token
  EXPECT_EQ(a.budgets, (Budgets{n, n, flat, 1, n}));
  EXPECT_EQ(s.state.values.at(kD2oLayerFixed), (std::vector<double>{-1, -1, 24, 1, -1}));
  // Later compressions keep those sizes whatever the request.
  CompressRequest r2;
  r2.max_tokens = 50;
  EXPECT_EQ(D2oAllocator(math::D2oDensity::OfficialMinMax, D2oLayers::Official).allocate({}, s.env(r2)).budgets,
            (Budgets{n, n, 24, 1, n}));
  // The preset selects every official setting; explicit options still win.
  const Press off = make_press("d2o", {{"preset", "official"}});
  const auto* alloc = dynamic_cast<const D2oAllocator*>(off.allocator.get());
  ASSERT_TRUE(alloc);
  EXPECT_EQ(alloc->layers(), D2oLayers::Official);
  EXPECT_EQ(alloc->density(), math::D2oDensity::OfficialMinMaxQueryHeads);  // over query heads, as the official code
  EXPECT_EQ(off.merger->name(), "d2o_merge_official");
  EXPECT_TRUE(dynamic_cast<const D2oMerger*>(off.merger.get())->per_layer());  // one threshold per layer
  EXPECT_EQ(dynamic_cast<const D2oAllocator*>(make_press("d2o", {{"preset", "official"}, {"density", "paper"}}).allocator.get())
                ->density(),
            math::D2oDensity::Paper);
  EXPECT_THROW(make_press("d2o", {{"preset", "other"}}), Error);
}

// A row that already stands for m tokens weighs m in Eq. 12: merging a and b into c at once equals
// merging a into c, then b into the result (u = 1: the weights are then e-proportional), and a
// kept row of mass 3 gets w_c = 3e / (3e + e^u).
TEST(D2o, MergeWeighsRowsByTheTokensTheyStandFor) {
  const double E = std::exp(1.0), eu = std::exp(static_cast<double>(0.8f));
  const std::vector<int32_t> near = {0};
  const std::vector<float> u = {0.8f};
  const auto w = math::d2o_merge_weights(near, u, 1, 0.5, math::D2oMerge::PaperEq12, std::vector<float>{3.0f},
                                         std::vector<float>{1.0f});
  EXPECT_NEAR(w.kept[0], 3 * E / (3 * E + eu), 1e-12);
  EXPECT_NEAR(w.evicted[0], eu / (3 * E + eu), 1e-12);
  // An evicted row of mass 2 counts twice.
  const auto w2 = math::d2o_merge_weights(near, u, 1, 0.5, math::D2oMerge::PaperEq12, std::vector<float>{1.0f},
                                          std::vector<float>{2.0f});
  EXPECT_NEAR(w2.evicted[0], 2 * eu / (E + 2 * eu), 1e-12);
  // Sequential = at once when u = 1 (identical keys): c, then a, then b.
  std::vector<float> kc = {1, 0}, vc = {1, 2};
  const std::vector<float> ka = {1, 0}, va = {5, 6}, kb = {1, 0}, vb = {9, -3};
  std::vector<float> k_once = kc, v_once = vc;
  const std::vector<float> ek = {1, 0, 1, 0}, ev = {5, 6, 9, -3};
  math::d2o_merge(k_once, v_once, 1, 2, 2, ek, ev, std::vector<int32_t>{0, 0}, std::vector<float>{1, 1}, 0.5,
                  math::D2oMerge::PaperEq12, std::vector<float>{1.0f}, std::vector<float>{1.0f, 1.0f});
  std::vector<float> k_seq = kc, v_seq = vc;
  math::d2o_merge(k_seq, v_seq, 1, 2, 2, ka, va, near, std::vector<float>{1}, 0.5, math::D2oMerge::PaperEq12,
                  std::vector<float>{1.0f}, std::vector<float>{1.0f});
  math::d2o_merge(k_seq, v_seq, 1, 2, 2, kb, vb, near, std::vector<float>{1}, 0.5, math::D2oMerge::PaperEq12,
                  std::vector<float>{2.0f}, std::vector<float>{1.0f});
  for (int d = 0; d < 2; ++d) {
    EXPECT_NEAR(v_once[d], (vc[d] + va[d] + vb[d]) / 3.0, 1e-5);
    EXPECT_NEAR(v_seq[d], v_once[d], 1e-5);
  }
  // Without the masses (literal Eq. 12) the second merge halves what the row stood for.
  std::vector<float> k_lit = kc, v_lit = vc;
  math::d2o_merge(k_lit, v_lit, 1, 2, 2, ka, va, near, std::vector<float>{1}, 0.5);
  math::d2o_merge(k_lit, v_lit, 1, 2, 2, kb, vb, near, std::vector<float>{1}, 0.5);
  EXPECT_NEAR(v_lit[0], ((vc[0] + va[0]) / 2 + vb[0]) / 2, 1e-5);
  EXPECT_GT(std::abs(v_lit[0] - v_once[0]), 0.5);
  // Masses weigh Eq. 12 only.
  EXPECT_THROW(math::d2o_merge_weights(near, u, 1, 0.5, math::D2oMerge::OfficialScatterMean, std::vector<float>{2.0f}),
               Error);
}

// The official code min-max normalises the head variances within each layer before averaging:
// with two KV heads per layer every layer's F is then ~0.5 and the budgets are uniform, while the
// paper's raw variances give the flatter layer more.
TEST(D2o, MinMaxDensityDiffersFromThePapers) {
  const int L = 2, H = 4, Hkv = 2, D = 8, n = 80;
  // Slot 0's key points along e0; layer 1's queries point there too (a sink: one heavy column,
  // a large variance), layer 0's are small and nearly flat. Each KV head's queries have their
  // own scale, so the heads of a layer differ.
  auto key = [](int layer, int h, int pos, int d) { return pos == 0 && d == 0 ? 3.0f : noise(layer, h, pos, d); };
  auto observe = [&](Synth& s) {
    for (int layer = 0; layer < L; ++layer) {
      std::vector<float> q(static_cast<size_t>(n) * H * D);
      for (int t = 0; t < n; ++t)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d) {
            const float scale = 1.0f + (h / 2);
            q[(static_cast<size_t>(t) * H + h) * D + d] =
                layer == 0 ? noise(0, h, t, d) * 5.0f * scale : (d == 0 ? 2.0f * scale : 0.0f);
          }
      std::vector<int32_t> pos(static_cast<size_t>(n));
      std::iota(pos.begin(), pos.end(), 0);
      s.observe(layer, q, pos);
    }
  };
  Synth s = Synth::make(L, H, Hkv, D, n, key, {.col_sum = true});
  observe(s);
  const auto Fp = d2o_layer_F(*s.stats, math::D2oDensity::Paper);
  const auto Fm = d2o_layer_F(*s.stats, math::D2oDensity::OfficialMinMax);
  ASSERT_LT(Fp[0], Fp[1]);  // layer 1's sink: more variance
  EXPECT_NEAR(Fm[0], 0.5, 1e-3);
  EXPECT_NEAR(Fm[1], 0.5, 1e-3);
  CompressRequest r;
  r.keep = 0.5;
  Synth s2 = Synth::make(L, H, Hkv, D, n, key, {.col_sum = true});
  observe(s2);
  const Allocation paper = D2oAllocator(math::D2oDensity::Paper).allocate({}, s.env(r));
  const Allocation minmax = D2oAllocator(math::D2oDensity::OfficialMinMax).allocate({}, s2.env(r));
  EXPECT_EQ(minmax.budgets, (Budgets{40, 40, 40, 40}));
  EXPECT_GT(paper.budgets[0], paper.budgets[2]);
  EXPECT_EQ(paper.budgets[0] + paper.budgets[1] + paper.budgets[2] + paper.budgets[3], 160);
  // The registry builds both (`--opt allocator=d2o --opt density=minmax`).
  EXPECT_NO_THROW(make_press("snapkv", {{"allocator", "d2o"}, {"density", "minmax"}}));
  EXPECT_THROW(make_press("snapkv", {{"allocator", "d2o"}, {"density", "other"}}), Error);
}

// T sinks + M recent + N heavy hitters, N:M = 3:1 of what the sinks leave.
TEST(D2o, SelectorKeepsSinksRecentAndHeavyHitters) {
  const int D = 8, n = 100;
  Synth s = Synth::make(1, 1, 1, D, n, noise);
  Scores sc = make_scores(*s.cache);
  for (int i = 0; i < n; ++i) sc.s[0][static_cast<size_t>(i)] = static_cast<float>((i * 37) % 101);  // distinct
  CompressRequest r;
  r.max_tokens = 20;
  r.sinks = 4;
  const CacheEdit e = D2oSelector(0.25).select(sc, {20}, s.env(r));
  const auto& keep = e.heads[0].keep;
  ASSERT_EQ(keep.size(), 20u);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(contains(keep, i));    // T = 4
  for (int i = 96; i < 100; ++i) EXPECT_TRUE(contains(keep, i)); // M = 0.25 x 16 = 4
  // N = 12 best of the rest
  std::vector<int32_t> rest;
  for (int i = 4; i < 96; ++i) rest.push_back(i);
  std::sort(rest.begin(), rest.end(), [&](int a, int b) { return sc.s[0][a] > sc.s[0][b]; });
  for (int k = 0; k < 12; ++k) EXPECT_TRUE(contains(keep, rest[k])) << rest[k];
}

// A hand-built head: 2-D keys, kept slots 0 = e0 and 1 = e1; evicted 2, 3 lie near e0, 4 near e1,
// 5 is nearly orthogonal to both (dropped under the threshold).
struct MergeCase {
  KvLayout layout{1, 1, 2, DType::F32, 8};
  AttnShape shape{1, 1, 2, 1.0f / std::sqrt(2.0f)};
  PagePool pool{layout.page_bytes()};
  KvCache cache{pool, layout};
  ThreadPool threads{1};
  PressState state;
  std::vector<std::array<float, 2>> k, v;
  MergeCase() {
    k = {{1, 0}, {0, 1}, {std::cos(0.1f), std::sin(0.1f)}, {std::cos(0.3f), std::sin(0.3f)},
         {std::cos(1.2f), std::sin(1.2f)}, {-1.0f, 0.05f}};
    for (int i = 0; i < 6; ++i) v.push_back({static_cast<float>(i + 1), -10.0f * (i + 1)});
    for (int i = 0; i < 6; ++i) {
      const int32_t pos = i;
      cache.append(0, 1, k[i].data(), v[i].data(), &pos);
    }
  }
  CacheEdit edit() const {
    CacheEdit e(layout);
    e.heads[0].active = true;
    e.heads[0].keep = {0, 1};
    return e;
  }
};

double cosine(const std::array<float, 2>& a, const std::array<float, 2>& b) {
  return (a[0] * b[0] + a[1] * b[1]) / std::hypot(a[0], a[1]) / std::hypot(b[0], b[1]);
}

TEST(D2o, MergeFollowsEq12AndTheWeightedAverage) {
  MergeCase m;
  CacheEdit e = m.edit();
  CompressRequest r;
  r.max_tokens = 2;
  PressEnv env{m.cache, m.shape, nullptr, m.threads, r, nullptr, &m.state};
  D2oMerger(0.7, math::D2oMerge::PaperEq12).merge({}, env, e);
  // Eq. 9: nearest kept pair and its cosine; Eq. 10 at t = 0: tau = mean of the four maxima.
  const double u2 = cosine(m.k[2], m.k[0]), u3 = cosine(m.k[3], m.k[0]), u4 = cosine(m.k[4], m.k[1]);
  const double u5 = std::max(cosine(m.k[5], m.k[0]), cosine(m.k[5], m.k[1]));
  const double tau = (u2 + u3 + u4 + u5) / 4;
  ASSERT_LT(u5, tau);
  ASSERT_GT(u4, tau);
  EXPECT_NEAR(m.state.values.at(kD2oTau)[0], tau, 1e-6);
  EXPECT_EQ(m.state.values.at(kD2oTauSet)[0], 1.0);
  // Eq. 12: w_c = e / (sum exp(u) + e), w_e = exp(u) / (sum exp(u) + e).
  const double E = std::exp(1.0);
  const double z0 = std::exp(u2) + std::exp(u3) + E, z1 = std::exp(u4) + E;
  ASSERT_EQ(e.heads[0].writes.size(), 2u);
  for (const RowWrite& w : e.heads[0].writes) {
    std::array<double, 2> wk{}, wv{};
    float mass = 0;
    for (int d = 0; d < 2; ++d) {
      if (w.slot == 0) {
        wk[d] = (E * m.k[0][d] + std::exp(u2) * m.k[2][d] + std::exp(u3) * m.k[3][d]) / z0;
        wv[d] = (E * m.v[0][d] + std::exp(u2) * m.v[2][d] + std::exp(u3) * m.v[3][d]) / z0;
        mass = 3;
      } else {
        ASSERT_EQ(w.slot, 1);
        wk[d] = (E * m.k[1][d] + std::exp(u4) * m.k[4][d]) / z1;
        wv[d] = (E * m.v[1][d] + std::exp(u4) * m.v[4][d]) / z1;
        mass = 2;
      }
      EXPECT_NEAR(w.k[d], wk[d], 1e-5) << "slot " << w.slot;
      EXPECT_NEAR(w.v[d], wv[d], 1e-4) << "slot " << w.slot;
    }
    EXPECT_EQ(w.mass, mass);
  }
  // Applied, the kept rows hold the weighted averages.
  ASSERT_TRUE(m.cache.apply(e));
  std::vector<float> row(2);
  m.cache.read_v(0, 0, 1, row.data());
  EXPECT_NEAR(row[0], (E * 2 + std::exp(u4) * 5) / z1, 1e-5);
  EXPECT_EQ(m.cache.head(0, 0).pos, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(m.cache.head(0, 0).mass, (std::vector<float>{3, 2}));
}

// The official code's variant: k_c <- (k_c + sum u k_e) / (1 + c), the same threshold and nearest.
TEST(D2o, OfficialScatterMeanDiffersFromEq12AsDefined) {
  MergeCase m;
  CacheEdit e = m.edit();
  CompressRequest r;
  r.max_tokens = 2;
  PressEnv env{m.cache, m.shape, nullptr, m.threads, r, nullptr, &m.state};
  D2oMerger(0.7, math::D2oMerge::OfficialScatterMean).merge({}, env, e);
  const double u2 = cosine(m.k[2], m.k[0]), u3 = cosine(m.k[3], m.k[0]), u4 = cosine(m.k[4], m.k[1]);
  MergeCase m2;
  CacheEdit e2 = m2.edit();
  PressEnv env2{m2.cache, m2.shape, nullptr, m2.threads, r, nullptr, &m2.state};
  D2oMerger(0.7, math::D2oMerge::PaperEq12).merge({}, env2, e2);
  ASSERT_EQ(e.heads[0].writes.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const RowWrite& w = e.heads[0].writes[i];
    double diff = 0;
    for (int d = 0; d < 2; ++d) {
      const double want = w.slot == 0 ? (m.v[0][d] + u2 * m.v[2][d] + u3 * m.v[3][d]) / 3.0
                                      : (m.v[1][d] + u4 * m.v[4][d]) / 2.0;
      EXPECT_NEAR(w.v[d], want, 1e-4) << "slot " << w.slot;
      diff += std::abs(w.v[d] - e2.heads[0].writes[i].v[d]);
    }
    EXPECT_GT(diff, 0.1) << "slot " << w.slot;  // tells the two apart
  }
}

// Eq. 10 over a prefill compression and three decode steps: tau_0 = mean of the maxima, then
// tau_t = beta max_t + (1 - beta) tau_{t-1}, one evicted pair per step (its max similarity
// computed here by brute force on the keys before the step).
TEST(D2o, ThresholdFollowsEq10OverThreeDecodeSteps) {
  const int D = 4;
  Synth s = Synth::make(1, 1, 1, D, 12, noise);
  const double beta = 0.7;
  // Oldest-first eviction (StreamingLLM's scores) so the evicted pair of each step is known.
  Press p = compose("d2o_test", std::make_shared<StreamingScorer>(), std::make_shared<UniformAllocator>(), {},
                    std::make_shared<D2oMerger>(beta));
  auto keys = [&]() {
    std::vector<std::vector<float>> k(static_cast<size_t>(s.cache->len(0, 0)), std::vector<float>(D));
    for (size_t i = 0; i < k.size(); ++i) s.cache->read_k(0, 0, static_cast<int32_t>(i), k[i].data());
    return k;
  };
  auto cos = [&](const std::vector<float>& a, const std::vector<float>& b) {
    double ab = 0, aa = 0, bb = 0;
    for (int d = 0; d < D; ++d) ab += a[d] * b[d], aa += a[d] * a[d], bb += b[d] * b[d];
    return ab / std::sqrt(aa * bb);
  };
  // max over kept rows of the cosine with each evicted row, given kept/evicted slot sets.
  auto max_sims = [&](const std::vector<std::vector<float>>& k, const std::vector<int>& kept, const std::vector<int>& ev) {
    std::vector<double> m;
    for (int i : ev) {
      double best = -2;
      for (int j : kept) best = std::max(best, cos(k[i], k[j]));
      m.push_back(best);
    }
    return m;
  };
  CompressRequest r;
  r.max_tokens = 8;
  auto k0 = keys();
  s.run(p, r);  // 12 -> 8: evicts slots 0..3 (oldest)
  const auto m0 = max_sims(k0, {4, 5, 6, 7, 8, 9, 10, 11}, {0, 1, 2, 3});
  double tau = (m0[0] + m0[1] + m0[2] + m0[3]) / 4;
  EXPECT_NEAR(s.state.values.at(kD2oTau)[0], tau, 1e-6);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> k(D), v(D, 0.5f);
    for (int d = 0; d < D; ++d) k[d] = noise(3, step, 50 + step, d);
    const int32_t pos = 12 + step;
    ASSERT_TRUE(s.cache->append(0, 1, k.data(), v.data(), &pos));
    const auto kb = keys();  // 9 slots; the oldest (slot 0) goes
    s.run(p, r);
    const auto m = max_sims(kb, {1, 2, 3, 4, 5, 6, 7, 8}, {0});
    tau = beta * m[0] + (1 - beta) * tau;
    EXPECT_NEAR(s.state.values.at(kD2oTau)[0], tau, 1e-6) << "step " << step;
    EXPECT_EQ(s.cache->len(0, 0), 8);
  }
}

// The decode-time path (kept keys read in place) finds the same nearest pairs as the math
// building block on copies, for F32 and F16 caches (F16: against the rounded keys).
TEST(D2o, NearestInCacheEqualsTheBuildingBlock) {
  for (DType dt : {DType::F32, DType::F16}) {
    KvLayout layout{1, 1, 16, dt, 8};
    PagePool pool(layout.page_bytes());
    KvCache cache(pool, layout);
    const int n = 70;
    for (int t = 0; t < n; ++t) {
      std::vector<float> k(16), v(16, 0.0f);
      for (int d = 0; d < 16; ++d) k[d] = noise(0, 1, t, d) * (t == 33 ? 0.0f : 1.0f);  // slot 33: a zero key
      const int32_t pos = t;
      cache.append(0, 1, k.data(), v.data(), &pos);
    }
    std::vector<int32_t> kept;
    for (int t = 0; t < n; ++t)
      if (t % 7 != 3) kept.push_back(t);
    for (int n_ev : {1, 3, 10}) {
      std::vector<float> ev(static_cast<size_t>(n_ev) * 16), kept_k(kept.size() * 16);
      for (int i = 0; i < n_ev; ++i) cache.read_k(0, 0, 3 + 7 * i, ev.data() + i * 16);
      for (size_t j = 0; j < kept.size(); ++j) cache.read_k(0, 0, kept[j], kept_k.data() + j * 16);
      const auto a = d2o_nearest_in_cache(cache, 0, 0, kept, ev, n_ev);
      const auto b = math::d2o_nearest(kept_k, static_cast<int64_t>(kept.size()), ev, n_ev, 16);
      for (int i = 0; i < n_ev; ++i) {
        EXPECT_NEAR(a.sim[i], b.sim[i], 1e-5f);
        EXPECT_EQ(a.index[i], b.index[i]) << "evicted " << i;
      }
    }
  }
}

// The d2o press end to end on a synthetic cache: decode-time trigger, sinks, the d2o allocator,
// merging on by default and off with merge=false.
// ---- references written here from the paper / the official code, at head_dim 64, 3 KV heads ----

// Keys of the reference cases: noise scaled to about unit entries.
float ref_key(int layer, int h, int pos, int d) { return noise(layer, h, pos, d) * 10.0f; }

// Queries [n][H][D] of a layer: per-layer and per-head scales, so densities differ.
std::vector<float> ref_queries(int layer, int H, int D, int n) {
  std::vector<float> q(static_cast<size_t>(n) * H * D);
  for (int t = 0; t < n; ++t)
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < D; ++d)
        q[(static_cast<size_t>(t) * H + h) * D + d] =
            noise(layer + 40, h, t, d) * 10.0f * (0.5f + 0.8f * layer) * (1.0f + 0.4f * h);
  return q;
}

// Causal softmax attention of every query (position t sees keys 0..t, logits q.k / sqrt(D)),
// summed over the queries: cs[qh][j], in double.
std::vector<std::vector<double>> ref_column_sums(int layer, const std::vector<float>& q, int H, int Hkv, int D, int n) {
  std::vector<std::vector<double>> cs(static_cast<size_t>(H), std::vector<double>(static_cast<size_t>(n), 0.0));
  const int G = H / Hkv;
  for (int qh = 0; qh < H; ++qh)
    for (int t = 0; t < n; ++t) {
      std::vector<double> z(static_cast<size_t>(t + 1));
      double mx = -1e300;
      for (int j = 0; j <= t; ++j) {
        double dot = 0;
        for (int d = 0; d < D; ++d) dot += static_cast<double>(q[(static_cast<size_t>(t) * H + qh) * D + d]) * ref_key(layer, qh / G, j, d);
        z[j] = dot / std::sqrt(static_cast<double>(D));
        mx = std::max(mx, z[j]);
      }
      double sum = 0;
      for (double& x : z) sum += (x = std::exp(x - mx));
      for (int j = 0; j <= t; ++j) cs[qh][j] += z[j] / sum;
    }
  return cs;
}

double ref_var(const std::vector<double>& x) {  // unbiased, as torch.var
  double m = 0, v = 0;
  for (double a : x) m += a;
  m /= static_cast<double>(x.size());
  for (double a : x) v += (a - m) * (a - m);
  return v / static_cast<double>(x.size() - 1);
}

double ref_minmax_mean(const std::vector<double>& v) {  // (v - min) / (max - min + 1e-6), mean
  const double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
  double s = 0;
  for (double a : v) s += (a - lo) / (hi - lo + 1e-6);
  return s / static_cast<double>(v.size());
}

// The official density (modeling_llama3_7b_13b_d2o.py: attn_sum = attn.sum(-2); attn_sum.var(-1)
// per query head; min-max over the layer's query heads; mean) against the collected statistics,
// and our default over KV heads (the group-mean column sums) beside it.
TEST(D2o, OfficialDensityOverQueryHeadsAgainstAReference) {
  const int L = 3, H = 6, Hkv = 3, D = 64, n = 80, G = H / Hkv;
  Synth s = Synth::make(L, H, Hkv, D, n, ref_key, D2oAllocator(math::D2oDensity::OfficialMinMaxQueryHeads).needs().stats);
  ASSERT_TRUE(s.stats->request().col_sum_query_heads);
  std::vector<double> want_q(L), want_kv(L);
  for (int layer = 0; layer < L; ++layer) {
    const std::vector<float> q = ref_queries(layer, H, D, n);
    std::vector<int32_t> pos(static_cast<size_t>(n));
    std::iota(pos.begin(), pos.end(), 0);
    s.observe(layer, q, pos);
    const auto cs = ref_column_sums(layer, q, H, Hkv, D, n);
    std::vector<double> vq, vkv;
    for (int qh = 0; qh < H; ++qh) vq.push_back(ref_var(cs[qh]));
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      std::vector<double> mean(static_cast<size_t>(n), 0.0);
      for (int g = 0; g < G; ++g)
        for (int j = 0; j < n; ++j) mean[j] += cs[kvh * G + g][j] / G;
      vkv.push_back(ref_var(mean));
      // The per-query-head sums add up to the KV head's.
      const auto& qs = s.stats->col_sum_query_heads(layer, kvh);
      ASSERT_EQ(qs.size(), static_cast<size_t>(n) * G);
      for (int j = 0; j < n; j += 7)
        EXPECT_NEAR(qs[static_cast<size_t>(j) * G] + qs[static_cast<size_t>(j) * G + 1], s.stats->col_sum(layer, kvh)[j], 1e-4);
    }
    want_q[layer] = ref_minmax_mean(vq);
    want_kv[layer] = ref_minmax_mean(vkv);
  }
  const auto Fq = d2o_layer_F(*s.stats, math::D2oDensity::OfficialMinMaxQueryHeads);
  const auto Fkv = d2o_layer_F(*s.stats, math::D2oDensity::OfficialMinMax);
  for (int layer = 0; layer < L; ++layer) {
    EXPECT_NEAR(Fq[layer], want_q[layer], 1e-4) << layer;
    EXPECT_NEAR(Fkv[layer], want_kv[layer], 1e-4) << layer;
  }
  // The two normalisations tell the layers apart differently (not a relabelling of each other).
  EXPECT_GT(std::abs(Fq[0] - Fkv[0]) + std::abs(Fq[1] - Fkv[1]) + std::abs(Fq[2] - Fkv[2]), 0.05);
  // Without the per-query-head statistics the official density is refused, naming what is missing.
  Synth t = Synth::make(1, 2, 1, 8, 10, noise, {.col_sum = true});
  EXPECT_THROW(d2o_layer_F(*t.stats, math::D2oDensity::OfficialMinMaxQueryHeads), Error);
}

// The whole press (default options) on 4 layers x 3 KV heads (6 query heads) at head_dim 64,
// against D2O written out here: Eq. 4 on the causal attention's column sums (min-max normalised
// per layer, the default), Eq. 5 shares of round(keep x held) by largest remainder over the heads
// (ties: lower index), then per head the 4 sinks, the M = round(0.25 (b - 4)) newest and the best
// accumulated attention (summed over the group, Eq. 6) for the rest (Eqs. 7-8).
TEST(D2o, WholeMethodKeepsTheReferenceSlots) {
  const int L = 4, H = 6, Hkv = 3, D = 64, n = 96, G = H / Hkv;
  const Press p = make_press("d2o");
  Synth s = Synth::make(L, H, Hkv, D, n, ref_key, p.needs().stats);
  std::vector<std::vector<std::vector<double>>> score(L);  // [layer][kvh][slot]
  std::vector<double> F(L);
  for (int layer = 0; layer < L; ++layer) {
    const std::vector<float> q = ref_queries(layer, H, D, n);
    std::vector<int32_t> pos(static_cast<size_t>(n));
    std::iota(pos.begin(), pos.end(), 0);
    s.observe(layer, q, pos);
    const auto cs = ref_column_sums(layer, q, H, Hkv, D, n);
    std::vector<double> v;
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      std::vector<double> sum(static_cast<size_t>(n), 0.0), mean(static_cast<size_t>(n), 0.0);
      for (int g = 0; g < G; ++g)
        for (int j = 0; j < n; ++j) sum[j] += cs[kvh * G + g][j];
      for (int j = 0; j < n; ++j) mean[j] = sum[j] / G;
      v.push_back(ref_var(mean));
      score[layer].push_back(sum);
    }
    F[layer] = ref_minmax_mean(v);
  }
  // Eq. 5 per head: weight softmax(-F)_l, total 0.25 x 12 x 96 = 288.
  const int total = 288;
  double z = 0;
  for (double f : F) z += std::exp(-f);
  std::vector<double> ideal;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < Hkv; ++h) ideal.push_back(total * std::exp(-F[l]) / z / Hkv);
  std::vector<int> budget(ideal.size());
  int left = total;
  for (size_t i = 0; i < ideal.size(); ++i) left -= (budget[i] = static_cast<int>(std::floor(ideal[i])));
  std::vector<size_t> order(ideal.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t c) { return ideal[a] - std::floor(ideal[a]) > ideal[c] - std::floor(ideal[c]); });
  for (int i = 0; i < left; ++i) ++budget[order[static_cast<size_t>(i)]];
  CompressRequest r;
  r.keep = 0.25;
  r.sinks = 4;
  s.run(p, r);
  int64_t kept_total = 0, differ = 0;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < Hkv; ++h) {
      const int b = budget[static_cast<size_t>(l * Hkv + h)];
      const int M = static_cast<int>(std::lround(0.25 * (b - 4)));
      std::vector<int32_t> want;
      for (int j = 0; j < 4; ++j) want.push_back(j);
      for (int j = n - M; j < n; ++j) want.push_back(j);
      std::vector<int32_t> rest;
      for (int j = 4; j < n - M; ++j) rest.push_back(j);
      const auto& sc = score[l][h];
      std::stable_sort(rest.begin(), rest.end(), [&](int32_t a, int32_t c) { return sc[a] > sc[c]; });
      want.insert(want.end(), rest.begin(), rest.begin() + (b - 4 - M));
      std::sort(want.begin(), want.end());
      const auto got = s.kept_positions(l, h);
      EXPECT_EQ(got, want) << "layer " << l << " head " << h;
      kept_total += static_cast<int64_t>(got.size());
      differ += budget[static_cast<size_t>(l * Hkv + h)] != budget[0];
    }
  EXPECT_EQ(kept_total, total);
  EXPECT_GT(differ, 0);  // the layers' budgets do differ (Eq. 5 at work)
}

// threshold=layer (preset=official): one τ per layer, τ_0 = the mean over the layer's heads and
// evicted pairs of their max similarity (D2O_LayerKVCache: max_values.mean()); the k-th evicted
// pair of every head is merged iff the mean over the heads of their k-th maxima reaches τ
// (max_values.mean(1) >= threshold). Brute-force cosines here; heads evict different slots.
TEST(D2o, LayerThresholdFollowsTheOfficialCode) {
  const int D = 64, n = 12, Hkv = 3;
  Synth s = Synth::make(1, Hkv, Hkv, D, n, ref_key);
  CacheEdit e(s.cache->layout());
  const std::vector<std::vector<int32_t>> kept = {{4, 5, 6, 7, 8, 9, 10, 11}, {1, 3, 5, 7, 9, 10, 11, 0}, {0, 2, 3, 6, 8, 9, 10, 11}};
  for (int h = 0; h < Hkv; ++h) {
    e.heads[h].active = true;
    e.heads[h].keep = kept[h];
    std::sort(e.heads[h].keep.begin(), e.heads[h].keep.end());
  }
  auto key = [&](int h, int j) {
    std::vector<double> k(D);
    for (int d = 0; d < D; ++d) k[d] = ref_key(0, h, j, d);
    return k;
  };
  auto cos = [&](const std::vector<double>& a, const std::vector<double>& b) {
    double ab = 0, aa = 0, bb = 0;
    for (int d = 0; d < D; ++d) ab += a[d] * b[d], aa += a[d] * a[d], bb += b[d] * b[d];
    return ab / std::sqrt(aa * bb);
  };
  std::vector<std::vector<double>> mx(Hkv);     // [head][k-th evicted]
  std::vector<std::vector<int32_t>> arg(Hkv);   // nearest kept slot
  double all = 0;
  int cnt = 0;
  for (int h = 0; h < Hkv; ++h) {
    const auto& keep = e.heads[h].keep;
    for (int j = 0; j < n; ++j) {
      if (std::find(keep.begin(), keep.end(), j) != keep.end()) continue;
      double best = -2;
      int32_t at = -1;
      for (int32_t c : keep)
        if (const double u = cos(key(h, j), key(h, c)); u > best) best = u, at = c;
      mx[h].push_back(best);
      arg[h].push_back(at);
      all += best, ++cnt;
    }
  }
  const double tau = all / cnt;
  std::vector<bool> col(4);
  for (int k = 0; k < 4; ++k) col[k] = (mx[0][k] + mx[1][k] + mx[2][k]) / 3 >= tau;
  ASSERT_NE(std::count(col.begin(), col.end(), true), 0);
  ASSERT_NE(std::count(col.begin(), col.end(), true), 4);  // some columns merged, some dropped
  CompressRequest r;
  r.max_tokens = 8;
  D2oMerger(0.5, math::D2oMerge::OfficialScatterMean, false, /*per_layer=*/true).merge({}, s.env(r), e);
  ASSERT_EQ(s.state.values.at(kD2oLayerTau).size(), 1u);
  EXPECT_NEAR(s.state.values.at(kD2oLayerTau)[0], tau, 1e-5);
  EXPECT_EQ(s.state.values.count(kD2oTau), 0u);
  for (int h = 0; h < Hkv; ++h) {
    std::map<int32_t, float> want_mass;  // kept slot -> 1 + pairs merged into it
    for (int k = 0; k < 4; ++k)
      if (col[k]) want_mass[arg[h][k]] = (want_mass.count(arg[h][k]) ? want_mass[arg[h][k]] : 1.0f) + 1.0f;
    std::map<int32_t, float> got;
    for (const RowWrite& w : e.heads[h].writes) got[w.slot] = w.mass;
    EXPECT_EQ(got, want_mass) << "head " << h;
  }
}

TEST(D2o, PressIsRegisteredWithItsDefaults) {
  const PressInfo& info = press_info("d2o");
  EXPECT_EQ(info.default_sinks, 4);
  EXPECT_EQ(info.default_allocator, "d2o");
  EXPECT_EQ(info.default_trigger.kind, Trigger::Kind::EveryN);
  Press p = make_press("d2o");
  ASSERT_TRUE(p.merger);
  EXPECT_EQ(p.allocator->name(), "d2o");
  EXPECT_FALSE(make_press("d2o", {{"merge", "false"}}).merger);
  EXPECT_EQ(make_press("d2o", {{"merge_weights", "official"}}).merger->name(), "d2o_merge_official");
  EXPECT_THROW(make_press("d2o", {{"merge_weights", "mean"}}), Error);
  EXPECT_THROW(make_press("d2o", {{"ema_beta", "1.5"}}), Error);
  // Any scorer takes the d2o allocator.
  EXPECT_EQ(make_press("h2o", {{"allocator", "d2o"}}).allocator->name(), "d2o");

  Synth s = Synth::make(2, 4, 2, 8, 120, noise, p.needs().stats);
  observe_all(s, 2, 4, 8, 120, 1.0f);
  CompressRequest r;
  r.keep = 0.25;
  r.sinks = 4;
  const auto res = s.run(p, r);
  EXPECT_EQ(res.slots_after, 120u);  // 0.25 x 480
  for (int layer = 0; layer < 2; ++layer)
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 4; ++i) EXPECT_TRUE(contains(s.kept_positions(layer, h), i));
  // Merging happened somewhere (rows carrying more than one token).
  bool merged = false;
  for (int layer = 0; layer < 2; ++layer)
    for (int h = 0; h < 2; ++h)
      for (float m : s.cache->head(layer, h).mass) merged |= m > 1.0f;
  EXPECT_TRUE(merged);
}

}  // namespace
}  // namespace kvs
