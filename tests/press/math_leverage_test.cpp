// Leverage scores (Compactor Eq. 1-2, Algorithm 1): hand-computed cases, scores sum to the rank,
// the approximation ranks like the exact scores (Spearman >= 0.9 at k = 48), reproducibility,
// strided (multi-head) layouts, degenerate keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "press/math/leverage.h"
#include "press/math/sym_eigen.h"

namespace kvs::math {
namespace {

// Spearman rank correlation (average ranks on ties).
template <typename A, typename B>
double spearman(const std::vector<A>& a, const std::vector<B>& b) {
  auto ranks = [](auto const& v) {
    const size_t n = v.size();
    std::vector<size_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](size_t x, size_t y) { return v[x] < v[y]; });
    std::vector<double> r(n);
    for (size_t i = 0; i < n;) {
      size_t j = i;
      while (j + 1 < n && v[idx[j + 1]] == v[idx[i]]) ++j;
      for (size_t t = i; t <= j; ++t) r[idx[t]] = 0.5 * static_cast<double>(i + j);
      i = j + 1;
    }
    return r;
  };
  const auto ra = ranks(a), rb = ranks(b);
  const double n = static_cast<double>(ra.size());
  const double ma = std::accumulate(ra.begin(), ra.end(), 0.0) / n, mb = std::accumulate(rb.begin(), rb.end(), 0.0) / n;
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < ra.size(); ++i) {
    sab += (ra[i] - ma) * (rb[i] - mb);
    saa += (ra[i] - ma) * (ra[i] - ma);
    sbb += (rb[i] - mb) * (rb[i] - mb);
  }
  return sab / std::sqrt(saa * sbb);
}

// Keys = A B + noise: A [n][r] Gaussian with column scales decaying as decay^j, B [r][d] Gaussian,
// plus a common offset (keys share a mean) and i.i.d. noise of size `noise`.
std::vector<float> low_rank_keys(int64_t n, int d, int r, double decay, double noise, uint64_t seed) {
  NormalRng g(seed);
  std::vector<double> b(static_cast<size_t>(r) * d), offset(static_cast<size_t>(d));
  for (double& x : b) x = g.next();
  for (double& x : offset) x = 3.0 * g.next();
  std::vector<float> k(static_cast<size_t>(n) * d);
  std::vector<double> a(static_cast<size_t>(r));
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < r; ++j) a[j] = g.next() * std::pow(decay, j);
    for (int c = 0; c < d; ++c) {
      double s = offset[c];
      for (int j = 0; j < r; ++j) s += a[j] * b[static_cast<size_t>(j) * d + c];
      k[static_cast<size_t>(i) * d + c] = static_cast<float>(s + noise * g.next());
    }
  }
  return k;
}

TEST(MathLeverage, HandComputedCases) {
  // K = [[1,0],[0,1],[0,2]]: K^T K = diag(1, 5), l = (1, 1/5, 4/5), rank 2 (uncentred).
  const std::vector<float> k1 = {1, 0, 0, 1, 0, 2};
  const auto e1 = exact_leverage(k1, 3, 2, 2, {.center = false});
  EXPECT_EQ(e1.rank, 2);
  EXPECT_NEAR(e1.scores[0], 1.0, 1e-12);
  EXPECT_NEAR(e1.scores[1], 0.2, 1e-12);
  EXPECT_NEAR(e1.scores[2], 0.8, 1e-12);
  // K = [[1,0],[0,1],[1,1]]: hat matrix diagonal = 2/3 each.
  const std::vector<float> k2 = {1, 0, 0, 1, 1, 1};
  const auto e2 = exact_leverage(k2, 3, 2, 2, {.center = false});
  for (double s : e2.scores) EXPECT_NEAR(s, 2.0 / 3.0, 1e-12);
  // Centred: rows (0,0),(2,0),(4,0),(0,3) -> mean (1.5, 0.75); hand-computed with the 2x2 Gram of
  // the centred rows: G = [[11, -4.5], [-4.5, 6.75]].
  const std::vector<float> k3 = {0, 0, 2, 0, 4, 0, 0, 3};
  const auto e3 = exact_leverage(k3, 4, 2, 2, {.center = true});
  const double g00 = 11, g01 = -4.5, g11 = 6.75, det = g00 * g11 - g01 * g01;
  const double xs[4][2] = {{-1.5, -0.75}, {0.5, -0.75}, {2.5, -0.75}, {-1.5, 2.25}};
  double total = 0;
  for (int i = 0; i < 4; ++i) {
    const double x = xs[i][0], y = xs[i][1];
    const double want = (g11 * x * x - 2 * g01 * x * y + g00 * y * y) / det;
    EXPECT_NEAR(e3.scores[i], want, 1e-12) << i;
    total += want;
  }
  EXPECT_NEAR(total, 2.0, 1e-12);
}

TEST(MathLeverage, ExactScoresSumToTheRankAndLieInUnitInterval) {
  struct Case { int r; double noise; bool center; int want_rank; };
  for (const Case c : {Case{5, 0.0, false, 6}, Case{5, 0.0, true, 5}, Case{16, 0.1, true, 16}, Case{16, 0.1, false, 16}}) {
    SCOPED_TRACE(testing::Message() << "r=" << c.r << " noise=" << c.noise << " center=" << c.center);
    // 16-dim keys; uncentred rank-5 data with a common offset has rank 6 (the offset is a direction).
    const auto k = low_rank_keys(300, 16, c.r, 0.9, c.noise, 21);
    const auto e = exact_leverage(k, 300, 16, 16, {.center = c.center});
    EXPECT_EQ(e.rank, c.want_rank);
    const double sum = std::accumulate(e.scores.begin(), e.scores.end(), 0.0);
    EXPECT_NEAR(sum, static_cast<double>(e.rank), 1e-6);
    for (double s : e.scores) {
      EXPECT_GE(s, -1e-9);
      EXPECT_LE(s, 1.0 + 1e-9);
    }
  }
}

TEST(MathLeverage, ApproximationIsExactWhenTheSketchCoversTheRank) {
  // rank 16 < k = 48: K Φ spans the same column space as K (almost surely), so l̃ = l.
  const auto k = low_rank_keys(1000, 64, 16, 0.8, 0.0, 5);
  const auto exact = exact_leverage(k, 1000, 64, 64);
  ASSERT_EQ(exact.rank, 16);
  const auto approx = approx_leverage(k, 1000, 64, 64);
  double worst = 0;
  for (size_t i = 0; i < approx.size(); ++i) worst = std::max(worst, std::abs(approx[i] - exact.scores[i]));
  EXPECT_LT(worst, 2e-3);
}

TEST(MathLeverage, ApproximationRanksLikeExactOnLowRankKeys) {
  // Random low-rank keys, n = 2048, d = 64, k = 48, three sketch seeds. Measured Spearman rho with
  // this generator (seeds 1-3): rank 32 -> 1.000; rank 48 -> 0.99; rank 56 (decay 0.95) -> 0.92;
  // full rank 64 (decay 0.93) -> 0.85; d = 128 full rank -> 0.57. The right sketch keeps k random
  // combinations of the d directions, and leverage weighs every direction equally once whitened,
  // so the approximation is good while rank(K) <= k and degrades beyond (Theorem 2 needs k >> rank).
  const int64_t n = 2048;
  struct Case { int rank; double decay; double min_rho; };
  for (const Case c : {Case{32, 1.0, 0.99}, Case{56, 0.95, 0.9}, Case{64, 0.93, 0.8}}) {
    const auto k = low_rank_keys(n, 64, c.rank, c.decay, 0.0, 77);
    const auto exact = exact_leverage(k, n, 64, 64);
    EXPECT_EQ(exact.rank, c.rank);
    for (uint64_t seed : {1u, 2u, 3u}) {
      const auto approx = approx_leverage(k, n, 64, 64, {.sketch_dim = 48, .seed = seed});
      SCOPED_TRACE(testing::Message() << "rank " << c.rank << " seed " << seed);
      EXPECT_GE(spearman(approx, exact.scores), c.min_rho);
    }
  }
}

// compactor-vllm's regulariser (ridge ρ): l_i = Σ_j (ŷ_i · v_j)² / (λ_j + ρ), ŷ = centred K Φ,
// (λ, v) the eigenpairs of Ŷ^T Ŷ — computed here in double with the Jacobi oracle. d = 64 > k = 16.
TEST(MathLeverage, RidgeIsAddedToTheSketchGramEigenvalues) {
  const int64_t n = 300;
  const int d = 64, k = 16;
  const auto keys = low_rank_keys(n, d, 40, 0.95, 0.05, 9);
  const auto phi = gaussian_sketch(d, k, 21);
  for (double ridge : {0.005, 50.0}) {
    const auto got = approx_leverage(keys, n, d, d, phi, k, /*center=*/true, 1e-6, ridge);
    std::vector<double> y(static_cast<size_t>(n) * k, 0.0), mu(static_cast<size_t>(k), 0.0), g(static_cast<size_t>(k) * k, 0.0);
    for (int64_t i = 0; i < n; ++i)
      for (int j = 0; j < k; ++j) {
        double s = 0;
        for (int c = 0; c < d; ++c) s += static_cast<double>(keys[i * d + c]) * phi[static_cast<size_t>(c) * k + j];
        y[static_cast<size_t>(i) * k + j] = s;
        mu[j] += s / n;
      }
    for (int64_t i = 0; i < n; ++i)
      for (int j = 0; j < k; ++j) y[static_cast<size_t>(i) * k + j] -= mu[j];
    for (int64_t i = 0; i < n; ++i)
      for (int a = 0; a < k; ++a)
        for (int b = 0; b < k; ++b) g[static_cast<size_t>(a) * k + b] += y[i * k + a] * y[i * k + b];
    const SymEigen e = sym_eigen_jacobi(g, k);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      double l = 0;
      for (int j = 0; j < k; ++j) {
        double p = 0;
        for (int a = 0; a < k; ++a) p += y[i * k + a] * e.vectors[static_cast<size_t>(a) * k + j];
        l += p * p / (e.values[j] + ridge);
      }
      worst = std::max(worst, std::abs(l - got[static_cast<size_t>(i)]) / (1e-6 + l));
    }
    EXPECT_LT(worst, 2e-3) << "ridge " << ridge;
  }
  // The ridge shrinks every score (a larger ridge more): it is not the relative floor.
  const auto none = approx_leverage(keys, n, d, d, phi, k, true);
  const auto big = approx_leverage(keys, n, d, d, phi, k, true, 1e-6, 50.0);
  EXPECT_LT(std::accumulate(big.begin(), big.end(), 0.0), std::accumulate(none.begin(), none.end(), 0.0));
  EXPECT_THROW(approx_leverage(keys, n, d, d, phi, k, true, 1e-6, -1.0), Error);
}

TEST(MathLeverage, SeededReproducibleAndStrided) {
  const int64_t n = 500;
  const int d = 32;
  const auto k = low_rank_keys(n, d, 8, 0.9, 0.1, 3);
  const auto a = approx_leverage(k, n, d, d, {.seed = 9});
  const auto b = approx_leverage(k, n, d, d, {.seed = 9});
  EXPECT_EQ(a, b);
  const auto c = approx_leverage(k, n, d, d, {.seed = 10});
  EXPECT_NE(a, c);
  EXPECT_EQ(gaussian_sketch(d, 48, 9), gaussian_sketch(d, 48, 9));
  // The same keys as head 1 of a [n][2][d] block.
  std::vector<float> two(static_cast<size_t>(n) * 2 * d, 7.0f);
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(k.begin() + i * d, d, two.begin() + (i * 2 + 1) * d);
  const auto s = approx_leverage(std::span<const float>(two).subspan(d), n, d, 2 * d, {.seed = 9});
  EXPECT_EQ(s, a);
  const auto es = exact_leverage(std::span<const float>(two).subspan(d), n, d, 2 * d);
  EXPECT_EQ(es.scores, exact_leverage(k, n, d, d).scores);
}

TEST(MathLeverage, DegenerateKeys) {
  // all keys equal: centred keys are zero -> every score 0 (exact rank 0)
  const std::vector<float> same(10 * 4, 1.5f);
  EXPECT_EQ(exact_leverage(same, 10, 4, 4).rank, 0);
  for (float s : approx_leverage(same, 10, 4, 4)) EXPECT_EQ(s, 0.0f);
  // uncentred, the one direction carries everything: l_i = 1/10
  for (double s : exact_leverage(same, 10, 4, 4, {.center = false}).scores) EXPECT_NEAR(s, 0.1, 1e-12);
  for (float s : approx_leverage(same, 10, 4, 4, {.center = false})) EXPECT_NEAR(s, 0.1f, 1e-5);
  EXPECT_TRUE(exact_leverage(std::vector<float>{}, 0, 4, 4).scores.empty());
  EXPECT_TRUE(approx_leverage(std::vector<float>{}, 0, 4, 4).empty());
  EXPECT_THROW(exact_leverage(same, 11, 4, 4), Error);              // too few floats
  EXPECT_THROW(approx_leverage(same, 10, 4, 3), Error);             // stride below d
  EXPECT_THROW(approx_leverage(same, 10, 4, 4, gaussian_sketch(4, 8, 1), 9), Error);  // Φ shape
}

}  // namespace
}  // namespace kvs::math
