// UNComp's press parts on synthetic caches, with answers built by hand: the calibration data
// (per-sample groups, majority vote, layer groups, the two halves' agreement) from given eranks,
// the calibration parser's refusals, the collector's Gram covariance against a direct one and the
// eranks from it, stage row counts (Eq. 10), stepped head budgets (Eq. 11) scaled to a request
// and summing to it exactly, the decode-time shift that keeps each head's size, and the press
// through compress() with a calibration given by a fake probe. Against references written here
// from the paper / official code: Eq. 8 on the eranks (and the committed calibrations), the
// official stage schedule, ladder order and max-7 scores of the last 8 queries, the window kept
// at low keep, and the whole press's kept slots at head_dim 64 with 3 KV heads.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <numeric>
#include <random>

#include "core/error.h"
#include "fake_probe.h"
#include "press/math/matrix_entropy.h"
#include "press/math/sym_eigen.h"
#include "press/methods/uncomp.h"
#include "press/registry.h"
#include "press_test_util.h"

namespace kvs {
namespace {

using test::Synth;
using test::noise;

template <typename Fn>
void expect_error(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no error (expected one mentioning '" << needle << "')";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// H_k[s][l][qh] = log erank for L = 2 layers, H = 4 query heads, Hkv = 2 (query heads 2k, 2k+1 ->
// KV head k). Layer 0: KV head 0 high (eranks 10, 12), KV head 1 low (4, 6), reversed in the
// samples listed; layer 1: KV head 1 high always (eranks 3 and 1 per query head: sum 8).
std::vector<double> make_erank(int n_samples, const std::vector<int>& reversed) {
  std::vector<double> e;
  for (int s = 0; s < n_samples; ++s) {
    const bool rev = std::find(reversed.begin(), reversed.end(), s) != reversed.end();
    const std::vector<double> l0 = rev ? std::vector<double>{4, 6, 10, 12} : std::vector<double>{10, 12, 4, 6};
    const std::vector<double> l1{1, 1, 3, 3};
    for (double x : l0) e.push_back(std::log(x));
    for (double x : l1) e.push_back(std::log(x));
  }
  return e;
}

TEST(Uncomp, CalibrationDataVotesGroupsAndLayerGroups) {
  UncompCalibrateOptions o;
  EXPECT_EQ(o.layer_value, UncompLayerValue::Erank);  // the default (Eq. 8: LayerGroupsFollowEq8OnTheEranks)
  o.layer_value = UncompLayerValue::Entropy;          // the entropy-sum reading, kept as an option
  o.groups = 2;
  o.eps = 1.0;
  const int D = 8;  // ln D = 2.0794: the layer values' unit
  // 6 samples, sample 5 reversed in layer 0: the vote follows the majority; both halves agree.
  const nlohmann::json j = uncomp_calibration_data(make_erank(6, {5}), 6, 2, 4, 2, D, o);
  EXPECT_EQ(j["kv_head_groups"], nlohmann::json({{0, 1}, {1, 0}}));
  // Reported eranks: sum over query heads, mean over samples: layer 0 = 32, layer 1 = 8.
  EXPECT_NEAR(j["layer_erank"][0].get<double>(), 32.0, 1e-5);
  EXPECT_NEAR(j["layer_erank"][1].get<double>(), 8.0, 1e-5);
  // Layer values in entropy units: Σ_h H_k / ln D = ln(10·12·4·6) / ln 8 = 3.8308 and
  // ln(1·1·3·3) / ln 8 = 1.0566; the drop 2.77 > eps 1 starts a second group (Eq. 8).
  EXPECT_NEAR(j["layer_values"][0].get<double>(), std::log(2880.0) / std::log(8.0), 1e-5);
  EXPECT_NEAR(j["layer_values"][1].get<double>(), std::log(9.0) / std::log(8.0), 1e-5);
  EXPECT_EQ(j["layer_groups"], nlohmann::json({0, 1}));
  EXPECT_EQ(j["k"], 2);  // auto: D / 4
  EXPECT_EQ(j["layer_value"], "entropy");
  // Drop 2.77 < eps 3: one group; official-erank values Σ_h exp(H / ln D) = Σ_h erank^(1/ln 8).
  o.eps = 3.0;
  EXPECT_EQ(uncomp_calibration_data(make_erank(6, {5}), 6, 2, 4, 2, D, o)["layer_groups"], nlohmann::json({0, 0}));
  o.layer_value = UncompLayerValue::OfficialErank;
  o.eps = 1.0;
  const nlohmann::json jo = uncomp_calibration_data(make_erank(2, {}), 2, 2, 4, 2, D, o);
  const double p = 1.0 / std::log(8.0);
  EXPECT_NEAR(jo["layer_values"][0].get<double>(), std::pow(10, p) + std::pow(12, p) + std::pow(4, p) + std::pow(6, p), 1e-5);
  EXPECT_NEAR(jo["layer_values"][1].get<double>(), 2 + 2 * std::pow(3, p), 1e-5);
  EXPECT_EQ(jo["layer_groups"], nlohmann::json({0, 1}));  // 7.52 - 5.39 = 2.13 > 1
  o.layer_value = UncompLayerValue::Entropy;
  o.eps = 1.0;
  // KV-head eranks: the mean of the group's query heads, then over samples: (5 x 11 + 5) / 6.
  EXPECT_NEAR(j["kv_head_erank"][0][0].get<double>(), 60.0 / 6, 1e-6);
  EXPECT_NEAR(j["head_erank"][1][2].get<double>(), 3.0, 1e-12);
  EXPECT_EQ(j["groups"], 2);
  EXPECT_EQ(j["samples"], 6);
  EXPECT_EQ(j["stability"]["halves"], nlohmann::json({3, 3}));
  EXPECT_DOUBLE_EQ(j["stability"]["agreement"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["stability"]["chance_agreement"].get<double>(), 0.5);  // (1/2)^2 + (1/2)^2

  // 5 samples, halves [0, 2) and [2, 5): layer 0 reversed in samples 2, 3, 4 -> the second half
  // (and the whole, 3 of 5) vote reversed, the first half normal: layer 0's two heads disagree,
  // layer 1's agree.
  const nlohmann::json k = uncomp_calibration_data(make_erank(5, {2, 3, 4}), 5, 2, 4, 2, D, o);
  EXPECT_EQ(k["kv_head_groups"], nlohmann::json({{1, 0}, {1, 0}}));
  EXPECT_EQ(k["stability"]["kv_head_groups_first_half"], nlohmann::json({{0, 1}, {1, 0}}));
  EXPECT_EQ(k["stability"]["kv_head_groups_second_half"], nlohmann::json({{1, 0}, {1, 0}}));
  EXPECT_DOUBLE_EQ(k["stability"]["agreement"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(k["stability"]["agreement_within_one_group"].get<double>(), 1.0);
  // Small drops (below eps) keep one layer group.
  o.eps = 100;
  EXPECT_EQ(uncomp_calibration_data(make_erank(2, {}), 2, 2, 4, 2, D, o)["layer_groups"], nlohmann::json({0, 0}));
  expect_error([&] { uncomp_calibration_data(std::vector<double>(3), 1, 2, 4, 2, D, o); }, "entropies");
}

TEST(Uncomp, CalibrationParserRefusesWhatItCannotUse) {
  expect_error([] { uncomp_calibration(nullptr, 2, 2); }, "kvshrink calibrate --press uncomp");
  const nlohmann::json ok = {{"groups", 2}, {"kv_head_groups", {{0, 1}, {1, 0}}}, {"layer_groups", {0, 1}}};
  const UncompCalibration c = uncomp_calibration(&ok, 2, 2);
  EXPECT_EQ(c.groups, 2);
  EXPECT_EQ(c.kv_head_groups[1], (std::vector<int>{1, 0}));
  EXPECT_EQ(c.layer_groups, (std::vector<int>{0, 1}));
  expect_error([&] { uncomp_calibration(&ok, 3, 2); }, "'kv_head_groups' must hold 3 layers");
  expect_error([&] { uncomp_calibration(&ok, 2, 4); }, "must hold 4 KV heads");
  nlohmann::json bad = ok;
  bad["kv_head_groups"][0][1] = 2;
  expect_error([&] { uncomp_calibration(&bad, 2, 2); }, "'kv_head_groups'[0][1] must be an integer in 0..1");
  bad = ok;
  bad["layer_groups"] = {1, 1};
  expect_error([&] { uncomp_calibration(&bad, 2, 2); }, "must start at 0");
  bad = ok;
  bad.erase("groups");
  expect_error([&] { uncomp_calibration(&bad, 2, 2); }, "field 'groups' is missing");
}

// H_k written here from the paper / official formula, independently of press/math: Eq. 1
// covariance (two-pass, double), divided by its trace, eigenvalues by the Jacobi oracle,
// -Σ_{i<k} λ_i ln λ_i.
double reference_entropy(const std::vector<float>& q, int n, int stride, int off, int D, int k) {
  std::vector<double> mu(D, 0.0), c(static_cast<size_t>(D) * D, 0.0);
  for (int t = 0; t < n; ++t)
    for (int d = 0; d < D; ++d) mu[d] += q[static_cast<size_t>(t) * stride + off + d] / n;
  for (int t = 0; t < n; ++t)
    for (int a = 0; a < D; ++a)
      for (int b = 0; b < D; ++b)
        c[static_cast<size_t>(a) * D + b] += (q[static_cast<size_t>(t) * stride + off + a] - mu[a]) *
                                             (q[static_cast<size_t>(t) * stride + off + b] - mu[b]) / (n - 1);
  double tr = 0;
  for (int a = 0; a < D; ++a) tr += c[static_cast<size_t>(a) * D + a];
  for (double& x : c) x /= tr;
  const math::SymEigen e = math::sym_eigen_jacobi(c, D);
  double h = 0;
  for (int i = 0; i < k; ++i)
    if (e.values[i] > 1e-12) h -= e.values[i] * std::log(e.values[i]);
  return h;
}

// The collector's Gram statistics give the covariance of Eq. 1, and the per-head truncated
// entropies from them (k = 2 < D = 8: truncation exercised) equal the reference above.
TEST(Uncomp, CollectorGramCovarianceAndSampleEntropy) {
  constexpr int L = 2, H = 4, Hkv = 2, D = 8, N = 24;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Synth s = Synth::make(L, H, Hkv, D, N, [&](int, int, int, int) { return nd(rng); }, {.query_gram = QueryGram::PostRope});
  std::vector<std::vector<float>> qs(L);
  for (int l = 0; l < L; ++l) {
    // Two batches, as two prefill chunks; head 3 of layer 1 is rank one (erank 1).
    for (int b = 0; b < 2; ++b) {
      std::vector<float> q(static_cast<size_t>(N / 2) * H * D);
      std::vector<int32_t> pos(N / 2);
      for (int t = 0; t < N / 2; ++t) {
        pos[t] = b * N / 2 + t;
        const float a = nd(rng);
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d)
            q[(static_cast<size_t>(t) * H + h) * D + d] = l == 1 && h == 3 ? a * (d + 1) : nd(rng) * (1.0f + d * (h + 1) * 0.3f);
      }
      s.observe(l, q, pos);
      qs[l].insert(qs[l].end(), q.begin(), q.end());
    }
  }
  const int k = uncomp_resolve_k(0, D);
  ASSERT_EQ(k, 2);
  const std::vector<double> e = uncomp_sample_entropy(*s.stats, L, k, math::EntropyNorm::Trace);
  ASSERT_EQ(e.size(), static_cast<size_t>(L * H));
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      math::GramAccumulator acc(D);
      acc.add(std::span<const float>(qs[l]).subspan(static_cast<size_t>(h) * D), N, H * D);
      const std::vector<double> direct = acc.covariance();
      const std::vector<double> streamed = s.stats->query_gram(l, h).covariance();
      for (int i = 0; i < D * D; ++i) EXPECT_NEAR(streamed[i] * N / (N - 1), direct[i], 1e-4 * (1 + std::fabs(direct[i])));
      const double want = reference_entropy(qs[l], N, H * D, h * D, D, k);
      EXPECT_NEAR(e[static_cast<size_t>(l) * H + h], want, 1e-4) << "layer " << l << " head " << h;
      // The top-k renormalisation is another number (the trace form's top-2 mass is below 1).
      if (!(l == 1 && h == 3)) {
        EXPECT_GT(std::abs(math::truncated_entropy_of(direct, D, k, math::EntropyNorm::TopK).h - want), 1e-3);
      }
    }
  EXPECT_NEAR(e[static_cast<size_t>(1) * H + 3], 0.0, 1e-3);  // rank one: one eigenvalue 1, H = 0
  EXPECT_GT(e[0], 0.5);
}

TEST(Uncomp, StageRowsStepDownByLayerGroup) {
  // Eq. 10: C = 3 groups over 1000 tokens, last group 375 (0.375), integer step (1000 - 375) / 2.
  EXPECT_EQ(uncomp_stage_rows({0, 0, 1, 1, 2}, 1000, 0.375, 10), (std::vector<int64_t>{1000, 1000, 688, 688, 376}));
  EXPECT_EQ(uncomp_stage_rows({0, 0, 0}, 1000, 0.375, 10), (std::vector<int64_t>{1000, 1000, 1000}));
  // An absolute floor (the official code's 1,536 rows) instead of the fraction.
  EXPECT_EQ(uncomp_stage_rows({0, 1, 2, 3, 4}, 8192, 0.375, 10, 1536), (std::vector<int64_t>{8192, 6528, 4864, 3200, 1536}));
  EXPECT_EQ(uncomp_stage_rows({0, 1}, 1000, 0.375, 10, 1536), (std::vector<int64_t>{1000, 1000}));  // shorter: no pruning
  // The protected rows bound the last group from below.
  EXPECT_EQ(uncomp_stage_rows({0, 1}, 100, 0.05, 40), (std::vector<int64_t>{100, 40}));
  expect_error([] { uncomp_stage_rows({0, 1}, 100, 0.0, 1); }, "stage_min");
}

UncompCalibration four_groups() {
  UncompCalibration c;
  c.groups = 4;
  c.kv_head_groups = {{0, 1, 2, 3}, {3, 2, 1, 0}};
  c.layer_groups = {0, 0};
  return c;
}

Synth four_heads(int n) {
  return Synth::make(2, 4, 4, 8, n, [](int l, int h, int p, int d) { return 0.01f * ((l + h + p * d) % 7); });
}

TEST(Uncomp, SteppedBudgetsScaledToTheRequestSumExactly) {
  Synth s = four_heads(100);
  CompressRequest r;
  r.keep = 0.5;
  // Weights 640, 566, 492, 418 (Eq. 11); 400 of 800 slots: 400 w / 4232 = 60.49, 53.50, 46.50,
  // 39.51 per layer -> floors 60, 53, 46, 39 and the 4 leftover units to the largest remainders.
  const std::vector<int32_t> b = uncomp_head_budgets(*s.cache, r, four_groups(), 640, 74, false);
  EXPECT_EQ(b, (std::vector<int32_t>{60, 53, 47, 40, 40, 47, 53, 60}));
  // The same from a token budget of 50 per head.
  CompressRequest t;
  t.max_tokens = 50;
  EXPECT_EQ(uncomp_head_budgets(*s.cache, t, four_groups(), 640, 74, false), b);
  // Protected tokens come first in every head: 10 sinks + 10 window, the remaining 240 stepped.
  r.sinks = 10;
  r.window = 10;
  const std::vector<int32_t> p = uncomp_head_budgets(*s.cache, r, four_groups(), 640, 74, false);
  EXPECT_EQ(std::accumulate(p.begin(), p.end(), 0), 400);
  for (int32_t x : p) EXPECT_GE(x, 20);
  EXPECT_GT(p[0], p[1]);
  EXPECT_GT(p[2], p[3]);
  // dn = 0: uniform.
  r.sinks = r.window = 0;
  EXPECT_EQ(uncomp_head_budgets(*s.cache, r, four_groups(), 640, 0, false), std::vector<int32_t>(8, 50));
}

TEST(Uncomp, DecodeEvictionKeepsEachHeadsSize) {
  Synth s = four_heads(100);
  CompressRequest r;
  r.keep = 0.5;
  const std::vector<int32_t> b = uncomp_head_budgets(*s.cache, r, four_groups(), 640, 74, false);
  // Compress to those budgets (keep the first b slots), then append 3 tokens to every head (a
  // question and a generated token).
  CacheEdit edit(s.layout);
  for (int i = 0; i < 8; ++i) {
    edit.heads[static_cast<size_t>(i)].active = true;
    edit.heads[static_cast<size_t>(i)].keep.resize(static_cast<size_t>(b[i]));
    std::iota(edit.heads[static_cast<size_t>(i)].keep.begin(), edit.heads[static_cast<size_t>(i)].keep.end(), 0);
  }
  ASSERT_TRUE(s.cache->apply(edit));
  std::vector<float> k(3 * 4 * 8, 0.1f), v(k.size(), 0.0f);
  std::vector<int32_t> pos{100, 101, 102};
  for (int l = 0; l < 2; ++l) ASSERT_TRUE(s.cache->append(l, 3, k.data(), v.data(), pos.data()));
  // The runtime's decode budget is the mean length once the question was in (here 51); every
  // head drops the same 2 tokens and keeps b + 1.
  CompressRequest d;
  d.max_tokens = 51;
  const std::vector<int32_t> e = uncomp_head_budgets(*s.cache, d, four_groups(), 640, 74, false);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(e[i], b[i] + 1) << "head " << i;
}

TEST(Uncomp, GroupStageBudgetsAreCappedByPrunedHeads) {
  // Layer 0 holds 100 tokens, layer 1 only 30 (pruned in prefill). keep 0.5 of the context
  // (100 x 8 heads) = 400 slots: layer 1's heads keep what they hold at most, the rest goes to
  // layer 0, still stepped by group.
  Synth s = Synth::make(2, 4, 4, 8, 100, [](int, int, int, int) { return 0.0f; });
  CacheEdit edit(s.layout);
  for (int h = 0; h < 4; ++h) {
    HeadEdit& he = edit.heads[static_cast<size_t>(4 + h)];
    he.active = true;
    for (int32_t p = 70; p < 100; ++p) he.keep.push_back(p);
  }
  ASSERT_TRUE(s.cache->apply(edit));
  CompressRequest r;
  r.keep = 0.5;
  const std::vector<int32_t> b = uncomp_head_budgets(*s.cache, r, four_groups(), 640, 74, true);
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), 0), 400);
  for (int h = 0; h < 4; ++h) EXPECT_LE(b[static_cast<size_t>(4 + h)], 30);
  EXPECT_GE(b[0], b[1]);
  EXPECT_GE(b[1], b[2]);
  EXPECT_GE(b[2], b[3]);
  // Without base_longest the base is what the heads hold (520): 260 slots.
  const std::vector<int32_t> g = uncomp_head_budgets(*s.cache, r, four_groups(), 640, 74, false);
  EXPECT_EQ(std::accumulate(g.begin(), g.end(), 0), 260);
}

TEST(Uncomp, RegistryVariantsAndOptions) {
  const Press g = make_press("uncomp");
  EXPECT_EQ(g.needs().stats.window, 8);
  EXPECT_TRUE(g.needs().probe);
  EXPECT_EQ(g.trigger.kind, Trigger::Kind::EveryN);
  EXPECT_EQ(make_press("uncomp", {{"decode_every", "0"}}).trigger.kind, Trigger::Kind::OnPrefill);
  EXPECT_EQ(g.allocator->name(), "uncomp");
  CompressRequest half;
  half.keep = 0.5;
  CompressRequest all;
  all.keep = 1.0;
  EXPECT_FALSE(g.prunes_prefill(half));
  const Press st = make_press("uncomp", {{"variant", "group-stage"}});
  EXPECT_TRUE(st.prunes_prefill(half));
  EXPECT_FALSE(st.prunes_prefill(all));  // keep 1 is the uncompressed reference
  EXPECT_FALSE(make_press("snapkv").prunes_prefill(half));
  expect_error([] { make_press("uncomp", {{"variant", "stage"}}); }, "variant must be group or group-stage");
  expect_error([] { make_press("uncomp", {{"stage_queries", "9"}}); }, "stage_queries must be in 1..window");
  // An explicit layer partition for group-stage.
  EXPECT_EQ(uncomp_parse_layer_groups("0,0,1,2"), (std::vector<int>{0, 0, 1, 2}));
  EXPECT_EQ(uncomp_parse_layer_groups("0/1/1"), (std::vector<int>{0, 1, 1}));
  EXPECT_TRUE(uncomp_parse_layer_groups("calibrated").empty());
  for (const char* bad : {"1,1", "0,2", "0,,1", "0,1,0", ""})
    expect_error([&] { uncomp_parse_layer_groups(bad); }, "layer_groups must be");
  // The allocator works with another scorer.
  EXPECT_EQ(make_press("snapkv", {{"allocator", "uncomp"}, {"dn", "10"}}).allocator->name(), "uncomp");
}

TEST(Uncomp, CompressesToTheStepsWithTheCalibration) {
  Synth s = Synth::make(2, 8, 4, 8, 64, [](int l, int h, int p, int d) { return 0.05f * ((l * 3 + h + p * (d + 1)) % 11); },
                        {.window = 8});
  for (int l = 0; l < 2; ++l) {
    std::vector<float> q(static_cast<size_t>(8) * 8 * 8);
    for (size_t i = 0; i < q.size(); ++i) q[i] = 0.1f * static_cast<float>(i % 5);
    std::vector<int32_t> pos(8);
    std::iota(pos.begin(), pos.end(), 56);
    s.observe(l, q, pos);
  }
  const Press p = make_press("uncomp");
  CompressRequest r;
  r.keep = 0.25;
  r.sinks = 2;
  // No calibration: refused, saying how to make one.
  expect_error([&] { s.run(p, r); }, "needs the model");
  test::FakeProbe probe(2, s.shape, *s.threads);
  expect_error([&] { compress(*s.cache, s.stats.get(), p, r, s.shape, *s.threads, {&probe, &s.state}); },
               "kvshrink calibrate --press uncomp");
  probe.calib["uncomp"] = {{"groups", 8}, {"kv_head_groups", {{0, 1, 2, 3}, {3, 2, 1, 0}}}, {"layer_groups", {0, 0}}};
  const CompressResult res = compress(*s.cache, s.stats.get(), p, r, s.shape, *s.threads, {&probe, &s.state});
  EXPECT_EQ(res.slots_after, static_cast<size_t>(std::lround(0.25 * 8 * 64)));
  // Group 0 keeps the most; sinks and the l = 8 window survive in every head.
  EXPECT_GT(s.cache->len(0, 0), s.cache->len(0, 3));
  EXPECT_GT(s.cache->len(1, 3), s.cache->len(1, 0));
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 4; ++h) {
      const auto& pos = s.cache->head(l, h).pos;
      for (int32_t want : {0, 1, 56, 60, 63}) EXPECT_TRUE(test::contains(pos, want)) << l << " " << h << " " << want;
    }
}

// Eq. 8 as printed: Δc_i = erank_k(layer i) - erank_k(layer i + 1), a new layer group after every
// drop above ε (0.3, A.3). The layer values are Σ over the layer's query heads of erank_k (the
// default layer_value=erank); on the eranks of the committed v7s1 and v8s1 calibrations (their
// layer_erank) that gives [0,1,1,2] and five groups, where the entropy sums gave one group.
TEST(Uncomp, LayerGroupsFollowEq8OnTheEranks) {
  auto ref_groups = [](const std::vector<double>& e, double eps) {
    std::vector<int> g{0};
    for (size_t i = 1; i < e.size(); ++i) g.push_back(g.back() + (e[i - 1] - e[i] > eps ? 1 : 0));
    return g;
  };
  const std::vector<double> v7s1 = {43.004574, 40.911339, 43.182658, 40.771268};
  const std::vector<double> v8s1 = {52.595511, 52.998273, 49.435126, 47.35209, 50.614455, 48.953341, 49.72899, 45.563673};
  UncompCalibrateOptions o;  // defaults: erank, eps 0.3
  o.groups = 1;
  for (const auto& er : {v7s1, v8s1}) {
    const int L = static_cast<int>(er.size());
    std::vector<double> h;  // one sample, 2 query heads per layer sharing the erank (H_k = log(erank / 2))
    for (double x : er) h.push_back(std::log(x / 2)), h.push_back(std::log(x / 2));
    const nlohmann::json j = uncomp_calibration_data(h, 1, L, 2, 1, 64, o);
    EXPECT_EQ(j["layer_value"], "erank");
    for (int l = 0; l < L; ++l) EXPECT_NEAR(j["layer_values"][l].get<double>(), er[l], 1e-5);
    EXPECT_EQ(j["layer_groups"].get<std::vector<int>>(), ref_groups(er, 0.3));
  }
  EXPECT_EQ(ref_groups(v7s1, 0.3), (std::vector<int>{0, 1, 1, 2}));
  EXPECT_EQ(ref_groups(v8s1, 0.3).back(), 4);  // five groups
  // The committed calibrations of the testbed models hold the groups Eq. 8 gives on their eranks.
  for (const char* f : {"v7s1/model-f16.gguf.kvshrink-calib/uncomp.json", "v7s1_2048/model-f16.gguf.kvshrink-calib/uncomp.json",
                        "v8s1/kvshrink-calib/uncomp.json", "v8s2/kvshrink-calib/uncomp.json"}) {
    const std::string path = std::string(KVS_SOURCE_DIR) + "/testbed/models/" + f;
    std::ifstream in(path);
    ASSERT_TRUE(in) << path;
    const nlohmann::json d = nlohmann::json::parse(in)["data"];
    EXPECT_EQ(d["layer_value"], "erank") << f;
    EXPECT_EQ(d["layer_groups"].get<std::vector<int>>(),
              ref_groups(d["layer_erank"].get<std::vector<double>>(), d["eps"].get<double>()))
        << f;
    if (std::string(f).find("2048") == std::string::npos)  // v7s1_2048's eranks rise with depth: one group
      EXPECT_GT(d["layer_groups"].back().get<int>(), 0) << f;  // group-stage prunes
  }
}

// The official schedule (llama_model.py, Llama-2's 32 layers: stage_label [0,0, 1 x 13, 2 x 11,
// 3 x 5, 4], keep = 1536 + ((max_token - 1536) // 4) (4 - stage), max_token 4096, capped at the
// prompt) at the paper's Table 4 length, 3,712 tokens: 80.6% of the layer-rows; stepping from the
// prompt's length instead (stage_max_tokens 0) keeps 75.3%.
TEST(Uncomp, OfficialStageRowsForTheContextLength) {
  std::vector<int> lab = {0, 0};
  for (int i = 0; i < 13; ++i) lab.push_back(1);
  for (int i = 0; i < 11; ++i) lab.push_back(2);
  for (int i = 0; i < 5; ++i) lab.push_back(3);
  lab.push_back(4);
  const int64_t n = 3712;
  std::vector<int64_t> want;
  for (int g : lab) want.push_back(std::min<int64_t>(n, 1536 + ((4096 - 1536) / 4) * (4 - g)));
  const auto rows = uncomp_stage_rows(lab, n, 0.375, 9, 1536, 4096);
  EXPECT_EQ(rows, want);
  const double share = std::accumulate(rows.begin(), rows.end(), 0.0) / (32.0 * n);
  EXPECT_NEAR(share, 0.806, 5e-4);
  const auto from_n = uncomp_stage_rows(lab, n, 0.375, 9, 1536);
  EXPECT_NEAR(std::accumulate(from_n.begin(), from_n.end(), 0.0) / (32.0 * n), 0.753, 5e-4);
  // preset=official starts the steps from the model's context (-1).
  const Press off = make_press("uncomp", {{"preset", "official"}, {"variant", "group-stage"}});
  EXPECT_EQ(dynamic_cast<const UncompScorer*>(off.scorer.get())->options().stage_max_tokens, -1);
  expect_error([] { uncomp_stage_rows({0, 1}, 100, 0.5, 1, 0, -2); }, "stage_from");
}

// The official code's sizes (uncomp_utils.py, group8: [20, 128, 256, 384, 384, 512, 640, 748] by
// label, label 0 = the lowest entropy) in our order (group 0 = the largest erank first): with 8 KV
// heads, one per group, and the ladder's total requested, each head gets its size exactly.
TEST(Uncomp, OfficialLadderOrder) {
  const std::vector<double> official_by_label = {20, 128, 256, 384, 384, 512, 640, 748};
  const std::vector<double> ladder = uncomp_official_ladder(8);
  for (int g = 0; g < 8; ++g) EXPECT_EQ(ladder[g], official_by_label[7 - g]) << g;
  Synth s = Synth::make(1, 8, 8, 8, 1000, noise);
  UncompCalibration c;
  c.groups = 8;
  c.kv_head_groups = {{3, 0, 7, 1, 6, 2, 5, 4}};
  c.layer_groups = {0};
  CompressRequest r;
  r.keep = 3072.0 / 8000.0;
  const auto b = uncomp_head_budgets(*s.cache, r, c, ladder, false);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(b[h], ladder[c.kv_head_groups[0][h]]) << h;
  expect_error([] { uncomp_official_ladder(4); }, "8 group sizes");
}

// preset=official's scores against the official update_kv written out here: the last 8 queries'
// causal softmax attention summed per key over the queries and the group's query heads (divided
// by their number, which changes no ranking), over the keys before the window only, then
// max_pool1d(kernel 7, padding 3, stride 1); the window's keys kept (+inf). Head dim 64, 3 KV
// heads of 2 query heads.
TEST(Uncomp, OfficialScoresMaxPoolTheLastEightQueriesAttention) {
  const int H = 6, Hkv = 3, D = 64, n = 60, W = 8, G = 2;
  auto key = [](int l, int h, int p, int d) { return noise(l, h, p, d) * 10.0f; };
  Synth s = Synth::make(1, H, Hkv, D, n, key, {.window = W});
  std::vector<float> q(static_cast<size_t>(W) * H * D);
  for (int t = 0; t < W; ++t)
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < D; ++d) q[(static_cast<size_t>(t) * H + h) * D + d] = noise(7, h, t, d) * 40.0f;
  std::vector<int32_t> pos(W);
  std::iota(pos.begin(), pos.end(), n - W);
  s.observe(0, q, pos);
  const Press p = make_press("uncomp", {{"preset", "official"}});
  const UncompOptions& o = dynamic_cast<const UncompScorer*>(p.scorer.get())->options();
  EXPECT_EQ(o.window, 8);
  EXPECT_EQ(o.kernel, 7);
  EXPECT_TRUE(o.max_pool);
  EXPECT_EQ(o.stage_queries, 8);
  CompressRequest r;
  r.keep = 0.5;
  const Scores sc = p.scorer->score(s.env(r));
  for (int kvh = 0; kvh < Hkv; ++kvh) {
    std::vector<double> a(static_cast<size_t>(n - W), 0.0);
    for (int t = 0; t < W; ++t)
      for (int g = 0; g < G; ++g) {
        const int qh = kvh * G + g, qp = n - W + t;
        std::vector<double> z(static_cast<size_t>(qp + 1));
        double mx = -1e300, sum = 0;
        for (int j = 0; j <= qp; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += static_cast<double>(q[(static_cast<size_t>(t) * H + qh) * D + d]) * key(0, kvh, j, d);
          mx = std::max(mx, z[j] = dot / 8.0);
        }
        for (double& x : z) sum += (x = std::exp(x - mx));
        for (int j = 0; j < n - W; ++j) a[j] += z[j] / sum / (W * G);
      }
    for (int j = 0; j < n; ++j) {
      const float got = sc.s[static_cast<size_t>(kvh)][static_cast<size_t>(j)];
      if (j >= n - W) {
        EXPECT_TRUE(std::isinf(got)) << j;
        continue;
      }
      double m = 0;
      for (int i = std::max(0, j - 3); i <= std::min(n - W - 1, j + 3); ++i) m = std::max(m, a[i]);
      EXPECT_NEAR(got, m, 1e-5 + 1e-4 * m) << "kv head " << kvh << " slot " << j;
    }
  }
}

// The l window tokens survive in every head whatever the keep ratio (the official code appends
// its window to every head's selection), here at keep 0.05 with the smallest groups getting
// fewer than 8 slots from the ladder alone.
TEST(Uncomp, WindowIsKeptAtLowKeep) {
  Synth s = Synth::make(2, 8, 4, 8, 200, [](int l, int h, int p, int d) { return 0.05f * ((l * 3 + h + p * (d + 1)) % 11); },
                        {.window = 8});
  for (int l = 0; l < 2; ++l) {
    std::vector<float> q(static_cast<size_t>(8) * 8 * 8);
    for (size_t i = 0; i < q.size(); ++i) q[i] = 0.1f * static_cast<float>(i % 5);
    std::vector<int32_t> pos(8);
    std::iota(pos.begin(), pos.end(), 192);
    s.observe(l, q, pos);
  }
  const Press p = make_press("uncomp");
  CompressRequest r;
  r.keep = 0.06;  // 96 of 1,600 slots: the ladder alone would give the last groups < 8
  test::FakeProbe probe(2, s.shape, *s.threads);
  probe.calib["uncomp"] = {{"groups", 8}, {"kv_head_groups", {{0, 2, 5, 7}, {7, 5, 2, 0}}}, {"layer_groups", {0, 0}}};
  compress(*s.cache, s.stats.get(), p, r, s.shape, *s.threads, {&probe, &s.state});
  for (int l = 0; l < 2; ++l)
    for (int h = 0; h < 4; ++h) {
      const auto& kept = s.cache->head(l, h).pos;
      for (int32_t want = 192; want < 200; ++want) EXPECT_TRUE(test::contains(kept, want)) << l << " " << h << " " << want;
    }
  EXPECT_GT(s.cache->len(0, 0), s.cache->len(0, 3));  // still stepped by group
}

// The whole press (variant=group, preset=paper) at head_dim 64 on 2 layers x 3 KV heads (6 query
// heads), against UNComp written out here: scores = the last l = 8 queries' causal attention
// averaged over the queries and the group's query heads, avg-pooled (width 5, zero padding
// counted) over the keys before the window; budgets = the 8 window slots of every head + the rest
// of round(keep x held) split by Eq. 11's N_g = 640 - 74 g (largest remainder, ties: lower
// index); each head keeps its window and its best-scoring other slots.
TEST(Uncomp, WholeMethodKeepsTheReferenceSlots) {
  const int L = 2, H = 6, Hkv = 3, D = 64, n = 120, W = 8, G = 2;
  auto key = [](int l, int h, int p, int d) { return noise(l, h, p, d) * 10.0f; };
  Synth s = Synth::make(L, H, Hkv, D, n, key, {.window = W});
  std::vector<std::vector<float>> qs(L);
  for (int l = 0; l < L; ++l) {
    qs[l].resize(static_cast<size_t>(W) * H * D);
    for (int t = 0; t < W; ++t)
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) qs[l][(static_cast<size_t>(t) * H + h) * D + d] = noise(l + 20, h, t, d) * 30.0f;
    std::vector<int32_t> pos(W);
    std::iota(pos.begin(), pos.end(), n - W);
    s.observe(l, qs[l], pos);
  }
  const std::vector<std::vector<int>> groups = {{0, 3, 7}, {7, 0, 3}};
  test::FakeProbe probe(L, s.shape, *s.threads);
  probe.calib["uncomp"] = {{"groups", 8}, {"kv_head_groups", groups}, {"layer_groups", {0, 0}}};
  // Budgets.
  const int total = static_cast<int>(std::lround(0.3 * L * Hkv * n));
  std::vector<double> ideal;
  double wsum = 0;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < Hkv; ++h) wsum += 640 - 74 * groups[l][h];
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < Hkv; ++h) ideal.push_back((total - W * L * Hkv) * (640.0 - 74 * groups[l][h]) / wsum);
  std::vector<int> budget(ideal.size());
  int left = total - W * L * Hkv;
  for (size_t i = 0; i < ideal.size(); ++i) left -= (budget[i] = static_cast<int>(std::floor(ideal[i])));
  std::vector<size_t> order(ideal.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t c) { return ideal[a] - std::floor(ideal[a]) > ideal[c] - std::floor(ideal[c]); });
  for (int i = 0; i < left; ++i) ++budget[order[static_cast<size_t>(i)]];
  CompressRequest r;
  r.keep = 0.3;
  const Press p = make_press("uncomp");
  const CompressResult res = compress(*s.cache, s.stats.get(), p, r, s.shape, *s.threads, {&probe, &s.state});
  EXPECT_EQ(res.slots_after, static_cast<size_t>(total));
  for (int l = 0; l < L; ++l)
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      const int P = n - W;
      std::vector<double> a(static_cast<size_t>(P), 0.0);
      for (int t = 0; t < W; ++t)
        for (int g = 0; g < G; ++g) {
          const int qh = kvh * G + g, qp = P + t;
          std::vector<double> z(static_cast<size_t>(qp + 1));
          double mx = -1e300, sum = 0;
          for (int j = 0; j <= qp; ++j) {
            double dot = 0;
            for (int d = 0; d < D; ++d) dot += static_cast<double>(qs[l][(static_cast<size_t>(t) * H + qh) * D + d]) * key(l, kvh, j, d);
            mx = std::max(mx, z[j] = dot / 8.0);
          }
          for (double& x : z) sum += (x = std::exp(x - mx));
          for (int j = 0; j < P; ++j) a[j] += z[j] / sum / (W * G);
        }
      std::vector<double> pooled(static_cast<size_t>(P), 0.0);
      for (int j = 0; j < P; ++j) {
        for (int i = j - 2; i <= j + 2; ++i) pooled[j] += i >= 0 && i < P ? a[i] : 0.0;
        pooled[j] /= 5;
      }
      std::vector<int32_t> rest(static_cast<size_t>(P));
      std::iota(rest.begin(), rest.end(), 0);
      std::stable_sort(rest.begin(), rest.end(), [&](int32_t x, int32_t y) { return pooled[x] > pooled[y]; });
      const int b = budget[static_cast<size_t>(l * Hkv + kvh)];
      std::vector<int32_t> want(rest.begin(), rest.begin() + b);
      for (int j = P; j < n; ++j) want.push_back(j);
      std::sort(want.begin(), want.end());
      EXPECT_EQ(s.cache->head(l, kvh).pos, want) << "layer " << l << " kv head " << kvh;
    }
}

}  // namespace
}  // namespace kvs
