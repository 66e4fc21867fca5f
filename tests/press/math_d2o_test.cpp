// D2O: Eq. 5 on given variances, the official min-max normalisation against a reference, integer budgets
// with caps, nearest kept pair (Eq. 9), the EMA threshold over three decode steps (Eq. 10), merge
// weights (Eq. 12) on a hand-built case, merged K/V = the weighted average, the official variant.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "press/math/d2o_math.h"

namespace kvs::math {
namespace {

TEST(MathD2o, ColumnSumVariance) {
  const std::vector<float> c = {1, 2, 3, 4};
  EXPECT_NEAR(d2o_column_sum_variance(c), 5.0 / 3.0, 1e-12);        // unbiased, as torch.var
  EXPECT_NEAR(d2o_column_sum_variance(c, false), 1.25, 1e-12);
  EXPECT_EQ(d2o_column_sum_variance(std::vector<float>{7}), 0.0);
}

TEST(MathD2o, Eq5OnGivenVariances) {
  const std::vector<double> F = {0.1, 0.5, 1.0, 2.0};
  const double rho = 0.5;
  const auto a = d2o_alpha(F, rho);
  double z = 0;
  for (double f : F) z += std::exp(-f);
  for (size_t l = 0; l < F.size(); ++l) EXPECT_NEAR(a[l], std::exp(-F[l]) / z * 4 * rho, 1e-14);
  EXPECT_NEAR(std::accumulate(a.begin(), a.end(), 0.0), 4 * rho, 1e-12);
  // budgets: S = 1000 -> total 2000, each within one token of alpha_l * S
  const auto b = d2o_layer_budgets(F, rho, 1000);
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), int64_t{0}), 2000);
  for (size_t l = 0; l < F.size(); ++l) EXPECT_LE(std::abs(b[l] - a[l] * 1000), 1.0);
  // rho = 0.8: layer 0 would get 1.44 S > S and is capped; of the 2200 left, layer 1's share
  // (0.301 / 0.551) is 1202 > S, so it is capped too; layers 2-3 split the last 1200 by alpha
  const auto a8 = d2o_alpha(F, 0.8);
  const auto b8 = d2o_layer_budgets(F, 0.8, 1000);
  EXPECT_GT(a8[0], 1.0);
  EXPECT_EQ(b8[0], 1000);
  EXPECT_EQ(b8[1], 1000);
  EXPECT_EQ(std::accumulate(b8.begin(), b8.end(), int64_t{0}), 3200);
  const double rest = a8[2] + a8[3];
  for (int l = 2; l < 4; ++l) EXPECT_LE(std::abs(b8[l] - 1200 * a8[l] / rest), 1.0);
  // explicit caps (a layer shorter than S)
  const auto bc = d2o_layer_budgets(F, 0.5, 1000, std::vector<int64_t>{1000, 100, 1000, 1000});
  EXPECT_EQ(bc[1], 100);
  EXPECT_EQ(std::accumulate(bc.begin(), bc.end(), int64_t{0}), 2000);
  EXPECT_THROW(d2o_alpha(F, 0.0), Error);
  EXPECT_THROW(d2o_alpha(F, 1.5), Error);
}

// The official normalisation (modeling_llama3_7b_13b_d2o.py: (v - min) / (max - min + 1e-6) over
// a layer's heads, then the mean), written out here, on variances whose raw scales differ by
// 1000x between layers: the budgets follow softmax(-F) of the normalised densities (mild shares,
// every layer keeps a part), where the literal raw reading (still density Paper) gives the flat
// layer everything.
TEST(MathD2o, OfficialMinMaxNormalisationAgainstAReference) {
  const int L = 3, H = 4;
  const std::vector<double> v = {0.5, 1.0, 4.0, 2.0,         // layer 0
                                 100, 300, 200, 1000,        // layer 1
                                 0.01, 0.02, 0.015, 0.011};  // layer 2
  std::vector<double> want(L);
  for (int l = 0; l < L; ++l) {
    double lo = 1e300, hi = -1e300, s = 0;
    for (int h = 0; h < H; ++h) lo = std::min(lo, v[l * H + h]), hi = std::max(hi, v[l * H + h]);
    for (int h = 0; h < H; ++h) s += (v[l * H + h] - lo) / (hi - lo + 1e-6);
    want[l] = s / H;
  }
  const auto F = d2o_layer_density(v, L, H, D2oDensity::OfficialMinMax);
  for (int l = 0; l < L; ++l) EXPECT_NEAR(F[l], want[l], 1e-12) << l;
  EXPECT_NEAR(want[0], (0 + 0.5 / 3.5 + 1 + 1.5 / 3.5) / 4, 1e-6);
  // Eq. 5 on them: alpha_l = softmax(-F)_l L rho, budgets within one token of alpha_l S.
  const double rho = 0.25;
  const int64_t S = 1000;
  double z = 0;
  for (double f : want) z += std::exp(-f);
  const auto b = d2o_layer_budgets(F, rho, S);
  int64_t sum = 0;
  for (int l = 0; l < L; ++l) {
    const double a = std::exp(-want[l]) / z * L * rho;
    EXPECT_LE(std::abs(static_cast<double>(b[l]) - a * S), 1.0) << l;
    EXPECT_GT(b[l], 150) << l;  // every layer keeps a fair part of the uniform 250
    sum += b[l];
  }
  EXPECT_EQ(sum, 750);
  // The literal reading (raw variances, F 1.875 / 400 / 0.014) gives the sharp layer 1 nothing
  // (winner-take-all): kept as density Paper for comparison, not as the default.
  const auto raw = d2o_layer_density(v, L, H, D2oDensity::Paper);
  EXPECT_NEAR(raw[1], 400.0, 1e-9);
  const auto br = d2o_layer_budgets(raw, rho, S);
  EXPECT_EQ(br[1], 0);
  EXPECT_EQ(br[2], 649);  // 750 e^-0.014 / (e^-1.875 + e^-0.014) = 649.06
  EXPECT_EQ(br[0], 101);
  // Query-head density takes the same normalisation over the query heads it is given.
  EXPECT_EQ(d2o_layer_density(v, L, H, D2oDensity::OfficialMinMaxQueryHeads), F);
}

TEST(MathD2o, NearestByCosine) {
  // kept: x, y, (1,1); evicted: (2, 0.1) -> x; (-1, -1) -> all negative, best is x or y (tie: x);
  // (3, 3.2) -> (1,1); zero key -> similarity 0 everywhere, index 0
  const std::vector<float> kept = {1, 0, 0, 1, 1, 1};
  const std::vector<float> ev = {2, 0.1f, -1, -1, 3, 3.2f, 0, 0};
  const auto nn = d2o_nearest(kept, 3, ev, 4, 2);
  EXPECT_EQ(nn.index, (std::vector<int32_t>{0, 0, 2, 0}));
  EXPECT_NEAR(nn.sim[0], 2 / std::sqrt(4.01), 1e-6);
  EXPECT_NEAR(nn.sim[1], -1 / std::sqrt(2.0), 1e-6);
  EXPECT_NEAR(nn.sim[2], 6.2 / (std::sqrt(2.0) * std::sqrt(9 + 3.2 * 3.2)), 1e-6);
  EXPECT_EQ(nn.sim[3], 0.0f);
  // many rows through the blocked path: against a brute-force argmax
  const int d = 16;
  const int64_t nk = 700, ne = 37;
  NormalRng g(4);
  std::vector<float> k(nk * d), e(ne * d);
  for (float& x : k) x = static_cast<float>(g.next());
  for (float& x : e) x = static_cast<float>(g.next());
  const auto got = d2o_nearest(k, nk, e, ne, d);
  for (int64_t i = 0; i < ne; ++i) {
    double best = -2;
    int32_t arg = -1;
    for (int64_t j = 0; j < nk; ++j) {
      double dot = 0, na = 0, nb = 0;
      for (int c = 0; c < d; ++c) {
        dot += e[i * d + c] * k[j * d + c];
        na += e[i * d + c] * e[i * d + c];
        nb += k[j * d + c] * k[j * d + c];
      }
      const double s = dot / std::sqrt(na * nb);
      if (s > best) {
        best = s;
        arg = static_cast<int32_t>(j);
      }
    }
    EXPECT_EQ(got.index[i], arg) << i;
    EXPECT_NEAR(got.sim[i], best, 1e-5);
  }
  EXPECT_THROW(d2o_nearest({}, 0, ev, 4, 2), Error);
}

TEST(MathD2o, EmaThresholdOverThreeDecodeSteps) {
  D2oThreshold t(0.7);
  EXPECT_FALSE(t.initialised());
  EXPECT_TRUE(std::isnan(t.value()));
  EXPECT_NEAR(t.update(std::vector<float>{0.5f, 0.7f, 0.9f}), 0.7, 1e-7);  // prefill: mean of the maxima
  EXPECT_NEAR(t.update(std::vector<float>{0.9f}), 0.7 * 0.9 + 0.3 * 0.7, 1e-7);     // 0.84
  EXPECT_NEAR(t.update(std::vector<float>{0.4f}), 0.7 * 0.4 + 0.3 * 0.84, 1e-7);    // 0.532
  EXPECT_NEAR(t.update(std::vector<float>{0.6f}), 0.7 * 0.6 + 0.3 * 0.532, 1e-7);   // 0.5796
  EXPECT_NEAR(t.update({}), 0.5796, 1e-7);  // nothing evicted: unchanged
  // several evicted in one step: their mean stands for Max(U_t)
  EXPECT_NEAR(t.update(std::vector<float>{0.2f, 0.4f}), 0.7 * 0.3 + 0.3 * 0.5796, 1e-7);
  EXPECT_THROW(D2oThreshold(1.5), Error);
}

TEST(MathD2o, Eq12WeightsOnAHandBuiltCase) {
  // 2 kept, 4 evicted: nearest (0, 0, 1, 1), sims (0.9, 0.7, 0.8, 0.5), threshold 0.6 -> the last dropped
  const std::vector<int32_t> nn = {0, 0, 1, 1};
  const std::vector<float> sim = {0.9f, 0.7f, 0.8f, 0.5f};
  const auto w = d2o_merge_weights(nn, sim, 2, 0.6);
  EXPECT_EQ(w.merged, 3);
  const double e = std::exp(1.0);
  const double s0 = std::exp(0.9) + std::exp(0.7), s1 = std::exp(0.8);
  EXPECT_NEAR(w.kept[0], e / (s0 + e), 1e-7);
  EXPECT_NEAR(w.evicted[0], std::exp(0.9) / (s0 + e), 1e-7);
  EXPECT_NEAR(w.evicted[1], std::exp(0.7) / (s0 + e), 1e-7);
  EXPECT_NEAR(w.kept[1], e / (s1 + e), 1e-7);
  EXPECT_NEAR(w.evicted[2], std::exp(0.8) / (s1 + e), 1e-7);
  EXPECT_EQ(w.evicted[3], 0.0);
  // convex: each kept pair's weights sum to 1; the kept pair keeps the largest weight
  EXPECT_NEAR(w.kept[0] + w.evicted[0] + w.evicted[1], 1.0, 1e-12);
  EXPECT_NEAR(w.kept[1] + w.evicted[2], 1.0, 1e-12);
  EXPECT_GT(w.kept[0], w.evicted[0]);
  // official: k_j <- (k_j + sum u_i k_i) / (1 + c_j)
  const auto o = d2o_merge_weights(nn, sim, 2, 0.6, D2oMerge::OfficialScatterMean);
  EXPECT_NEAR(o.kept[0], 1.0 / 3.0, 1e-12);
  EXPECT_NEAR(o.evicted[0], 0.9 / 3.0, 1e-7);
  EXPECT_NEAR(o.evicted[1], 0.7 / 3.0, 1e-7);
  EXPECT_NEAR(o.kept[1], 0.5, 1e-12);
  EXPECT_NEAR(o.evicted[2], 0.8 / 2.0, 1e-7);
  EXPECT_THROW(d2o_merge_weights(std::vector<int32_t>{2}, std::vector<float>{1}, 2, 0.5), Error);
}

TEST(MathD2o, MergedPairIsTheWeightedAverage) {
  // one kept pair, one evicted with similarity u >= threshold
  std::vector<float> kk = {1, 2, 3}, kv = {10, 20};
  const std::vector<float> ek = {3, 2, 1}, evv = {0, 40};
  const float u = 0.75f;
  const double e = std::exp(1.0), eu = std::exp(static_cast<double>(u));
  const double wc = e / (eu + e), we = eu / (eu + e);
  const auto n = d2o_merge(kk, kv, 1, 3, 2, ek, evv, std::vector<int32_t>{0}, std::vector<float>{u}, 0.5);
  EXPECT_EQ(n, 1);
  const double want_k[3] = {wc * 1 + we * 3, wc * 2 + we * 2, wc * 3 + we * 1};
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(kk[c], want_k[c], 1e-5);
  EXPECT_NEAR(kv[0], wc * 10, 1e-5);
  EXPECT_NEAR(kv[1], wc * 20 + we * 40, 1e-5);
  // under the threshold: nothing changes
  std::vector<float> k2 = {1, 2, 3}, v2 = {10, 20};
  EXPECT_EQ(d2o_merge(k2, v2, 1, 3, 2, ek, evv, std::vector<int32_t>{0}, std::vector<float>{0.4f}, 0.5), 0);
  EXPECT_EQ(k2, (std::vector<float>{1, 2, 3}));
  // official variant: (k + u k_e) / 2
  std::vector<float> k3 = {1, 2, 3}, v3 = {10, 20};
  d2o_merge(k3, v3, 1, 3, 2, ek, evv, std::vector<int32_t>{0}, std::vector<float>{u}, 0.5, D2oMerge::OfficialScatterMean);
  EXPECT_NEAR(k3[0], (1 + 0.75 * 3) / 2, 1e-6);
  EXPECT_NEAR(v3[1], (20 + 0.75 * 40) / 2, 1e-6);
  // several pairs into two kept rows, against the weights
  std::vector<float> k4 = {1, 0, 0, 1}, v4 = {1, 2};
  const std::vector<float> ek4 = {2, 0, 0, 3, 1, 1}, ev4 = {5, 7, 9};
  const std::vector<int32_t> nn4 = {0, 1, 0};
  const std::vector<float> s4 = {0.9f, 0.8f, 0.7f};
  const auto w4 = d2o_merge_weights(nn4, s4, 2, 0.0);
  d2o_merge(k4, v4, 2, 2, 1, ek4, ev4, nn4, s4, 0.0);
  EXPECT_NEAR(k4[0], w4.kept[0] * 1 + w4.evicted[0] * 2 + w4.evicted[2] * 1, 1e-5);
  EXPECT_NEAR(k4[1], w4.evicted[2] * 1, 1e-5);
  EXPECT_NEAR(k4[3], w4.kept[1] * 1 + w4.evicted[1] * 3, 1e-5);
  EXPECT_NEAR(v4[0], w4.kept[0] * 1 + w4.evicted[0] * 5 + w4.evicted[2] * 9, 1e-5);
  EXPECT_NEAR(v4[1], w4.kept[1] * 2 + w4.evicted[1] * 7, 1e-5);
}

}  // namespace
}  // namespace kvs::math
