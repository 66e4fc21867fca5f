// UNComp truncated matrix entropy (Eqs. 1, 5, 6): known spectra (identity -> k, rank one -> 1), the
// two eigenvalue normalisations, and the streamed Gram covariance against a direct two-pass one.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "press/math/matrix_entropy.h"

namespace kvs::math {
namespace {

std::vector<double> identity(int d, double s = 1.0) {
  std::vector<double> a(static_cast<size_t>(d) * d, 0.0);
  for (int i = 0; i < d; ++i) a[static_cast<size_t>(i) * d + i] = s;
  return a;
}

TEST(MathMatrixEntropy, IdentityGivesKAndRankOneGivesOne) {
  const auto id = identity(64, 3.0);
  // top-k renormalised: the top-k block of the identity is flat -> erank k
  EXPECT_NEAR(truncated_entropy_of(id, 64, 32, EntropyNorm::TopK).erank, 32.0, 1e-9);
  EXPECT_NEAR(truncated_entropy_of(id, 64, 32, EntropyNorm::TopK).h, std::log(32.0), 1e-12);
  EXPECT_NEAR(truncated_entropy_of(id, 64, 64, EntropyNorm::TopK).erank, 64.0, 1e-9);
  const auto big_k = truncated_entropy_of(id, 64, 100);  // k > d: all 64 used
  EXPECT_EQ(big_k.k_used, 64);
  EXPECT_NEAR(big_k.erank, 64.0, 1e-9);
  // the default (Lemma 4's trace-1 matrix, the official code): k terms of (1/64) log 64;
  // k = 16 = D/4 (the paper's 32 of 128): H = (1/4) log 64, i.e. 0.25 in units of log D
  EXPECT_NEAR(truncated_entropy_of(id, 64, 16).h, 0.25 * std::log(64.0), 1e-12);
  EXPECT_NEAR(truncated_entropy_of(id, 64, 32).erank, 8.0, 1e-9);
  EXPECT_NEAR(truncated_entropy_of(id, 64, 64, EntropyNorm::Trace).erank, 64.0, 1e-9);
  // rank one: v v^T
  std::vector<double> v(16), r1(16 * 16);
  for (int i = 0; i < 16; ++i) v[i] = std::sin(i + 1.0);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) r1[i * 16 + j] = v[i] * v[j];
  for (EntropyNorm nm : {EntropyNorm::TopK, EntropyNorm::Trace}) {
    const auto e = truncated_entropy_of(r1, 16, 32, nm);
    EXPECT_EQ(e.k_used, 1);
    EXPECT_NEAR(e.erank, 1.0, 1e-12);
  }
}

TEST(MathMatrixEntropy, KnownSpectrum) {
  const std::vector<double> ev = {4, 2, 1, 1};
  const auto top2 = truncated_entropy(ev, 2, EntropyNorm::TopK);
  const double p = 2.0 / 3.0, q = 1.0 / 3.0;
  EXPECT_NEAR(top2.h, -(p * std::log(p) + q * std::log(q)), 1e-14);
  EXPECT_NEAR(top2.erank, std::exp(top2.h), 1e-14);
  const auto tr2 = truncated_entropy(ev, 2, EntropyNorm::Trace);  // (0.5, 0.25) of the trace 8
  EXPECT_NEAR(tr2.h, -(0.5 * std::log(0.5) + 0.25 * std::log(0.25)), 1e-14);
  EXPECT_EQ(truncated_entropy(ev, 2).h, tr2.h);  // trace is the default
  // k = d: both forms are the full entropy of (1/2, 1/4, 1/8, 1/8)
  const double full = -(0.5 * std::log(0.5) + 0.25 * std::log(0.25) + 2 * 0.125 * std::log(0.125));
  EXPECT_NEAR(truncated_entropy(ev, 4).h, full, 1e-14);
  EXPECT_NEAR(truncated_entropy(ev, 4, EntropyNorm::TopK).h, full, 1e-14);
  // zero and rank-deficient spectra
  const auto z = truncated_entropy(std::vector<double>{0, 0, 0}, 2);
  EXPECT_EQ(z.k_used, 0);
  EXPECT_EQ(z.h, 0.0);
  EXPECT_EQ(z.erank, 1.0);
  const auto def = truncated_entropy(std::vector<double>{3, 3, 1e-20, -1e-17}, 4);
  EXPECT_EQ(def.k_used, 2);
  EXPECT_NEAR(def.erank, 2.0, 1e-12);
  EXPECT_THROW(truncated_entropy(std::vector<double>{1, 2}, 2), Error);  // not descending
  EXPECT_THROW(truncated_entropy(ev, 0), Error);
}

// Hand-computed: tokens ±3 e1 and ±e2 (one each, D = 4). Eq. 1: covariance diag(6, 2/3, 0, 0), with
// the e1 : e2 variance ratio 9 : 1 -> trace-normalised (0.9, 0.1, 0, 0); k = 1: H = -0.9 ln 0.9;
// top-k renormalised: (1) -> H = 0. The official unit-norm covariance: every centred token has
// norm 1 -> Z^T Z / 4 = diag(1/2, 1/2, 0, 0), trace 1; k = 1: H = (1/2) ln 2 = 0.25 ln 4.
TEST(MathMatrixEntropy, HandComputedEq1AndUnitNormCovariances) {
  const std::vector<float> x = {3, 0, 0, 0, -3, 0, 0, 0, 0, 1, 0, 0, 0, -1, 0, 0};
  GramAccumulator acc(4);
  acc.add(x, 4);
  const auto cov = acc.covariance();
  EXPECT_NEAR(cov[0], 18.0 / 3, 1e-12);
  EXPECT_NEAR(cov[5], 2.0 / 3, 1e-12);
  EXPECT_NEAR(truncated_entropy_of(cov, 4, 1).h, -0.9 * std::log(0.9), 1e-12);
  EXPECT_NEAR(truncated_entropy_of(cov, 4, 1, EntropyNorm::TopK).h, 0.0, 1e-12);
  const auto un = unit_norm_covariance(x, 4, 4);
  const std::vector<double> want = {0.5, 0, 0, 0, 0, 0.5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(un[i], want[i], 1e-15) << i;
  EXPECT_NEAR(truncated_entropy_of(un, 4, 1).h, 0.5 * std::log(2.0), 1e-12);
  EXPECT_NEAR(truncated_entropy_of(un, 4, 1).h / std::log(4.0), 0.25, 1e-12);
  // Strided rows (one head of a [n][2][4] block), and a zero centred row stays zero.
  std::vector<float> y(4 * 8, 7.0f);
  for (int t = 0; t < 4; ++t)
    for (int c = 0; c < 4; ++c) y[static_cast<size_t>(t) * 8 + 4 + c] = x[static_cast<size_t>(t) * 4 + c];
  EXPECT_EQ(unit_norm_covariance(std::span<const float>(y).subspan(4), 4, 4, 8), un);
  const auto zero = unit_norm_covariance(std::span<const float>(y), 4, 4, 8);  // all rows equal
  for (double v : zero) EXPECT_EQ(v, 0.0);
  EXPECT_THROW(unit_norm_covariance(x, 5, 4), Error);
}

TEST(MathMatrixEntropy, StreamedGramEqualsDirectCovariance) {
  const int d = 16, H = 3, h = 1;
  const int64_t n = 1000;
  NormalRng g(3);
  // [n][H][d]: head 1 has a large common offset (1000) against a unit spread, correlated channels
  std::vector<float> x(static_cast<size_t>(n) * H * d);
  for (int64_t t = 0; t < n; ++t) {
    const double z = g.next();
    for (int hh = 0; hh < H; ++hh)
      for (int c = 0; c < d; ++c) x[(t * H + hh) * d + c] = static_cast<float>(1000.0 + c + z * (c % 4) + g.next());
  }
  // direct two-pass covariance of head h in double
  std::vector<double> mean(d, 0.0), cov(static_cast<size_t>(d) * d, 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int c = 0; c < d; ++c) mean[c] += x[(t * H + h) * d + c];
  for (double& m : mean) m /= n;
  for (int64_t t = 0; t < n; ++t)
    for (int a = 0; a < d; ++a)
      for (int b = 0; b < d; ++b)
        cov[a * d + b] += (x[(t * H + h) * d + a] - mean[a]) * (x[(t * H + h) * d + b] - mean[b]) / (n - 1);
  // streamed in uneven batches through the strided layout
  GramAccumulator acc(d);
  int64_t t0 = 0;
  for (int64_t batch : {1, 7, 300, 0, 692}) {
    acc.add(std::span<const float>(x).subspan(static_cast<size_t>(t0 * H + h) * d), batch, H * d);
    t0 += batch;
  }
  ASSERT_EQ(t0, n);
  EXPECT_EQ(acc.count(), n);
  const auto got = acc.covariance();
  for (size_t i = 0; i < cov.size(); ++i) EXPECT_NEAR(got[i], cov[i], 1e-9 * (1.0 + std::abs(cov[i]))) << i;
  const auto m = acc.mean();
  for (int c = 0; c < d; ++c) EXPECT_NEAR(m[c], mean[c], 1e-9);
  // entropy from the streamed covariance equals the entropy from the direct one
  EXPECT_NEAR(truncated_entropy_of(got, d, 8).erank, truncated_entropy_of(cov, d, 8).erank, 1e-9);
  acc.reset();
  EXPECT_EQ(acc.count(), 0);
}

TEST(MathMatrixEntropy, RankOneTokensAndErrors) {
  // tokens on a line through a point: rank-one covariance -> erank 1
  const int d = 8;
  std::vector<float> x(50 * d);
  for (int t = 0; t < 50; ++t)
    for (int c = 0; c < d; ++c) x[t * d + c] = static_cast<float>(2.0 + 0.25 * t * (c - 3.5));
  GramAccumulator acc(d);
  acc.add(x, 50);
  EXPECT_NEAR(truncated_entropy_of(acc.covariance(), d, 32).erank, 1.0, 1e-9);
  GramAccumulator one(d);
  one.add(x, 1);
  EXPECT_THROW(one.covariance(), Error);  // N - 1 = 0
  EXPECT_THROW(one.add(x, 51), Error);    // past the end
  EXPECT_THROW(one.add(x, 2, 4), Error);  // stride below d
  EXPECT_THROW(GramAccumulator(0), Error);
}

}  // namespace
}  // namespace kvs::math
