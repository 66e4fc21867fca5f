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
  EXPECT_NEAR(truncated_entropy_of(id, 64, 32).erank, 32.0, 1e-9);
  EXPECT_NEAR(truncated_entropy_of(id, 64, 32).h, std::log(32.0), 1e-12);
  EXPECT_NEAR(truncated_entropy_of(id, 64, 64).erank, 64.0, 1e-9);
  const auto big_k = truncated_entropy_of(id, 64, 100);  // k > d: all 64 used
  EXPECT_EQ(big_k.k_used, 64);
  EXPECT_NEAR(big_k.erank, 64.0, 1e-9);
  // the official code's trace normalisation: 32 terms of (1/64) log 64 -> exp(log(64) / 2) = 8
  EXPECT_NEAR(truncated_entropy_of(id, 64, 32, EntropyNorm::Trace).erank, 8.0, 1e-9);
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
  const auto top2 = truncated_entropy(ev, 2);
  const double p = 2.0 / 3.0, q = 1.0 / 3.0;
  EXPECT_NEAR(top2.h, -(p * std::log(p) + q * std::log(q)), 1e-14);
  EXPECT_NEAR(top2.erank, std::exp(top2.h), 1e-14);
  const auto tr2 = truncated_entropy(ev, 2, EntropyNorm::Trace);  // (0.5, 0.25) of the trace 8
  EXPECT_NEAR(tr2.h, -(0.5 * std::log(0.5) + 0.25 * std::log(0.25)), 1e-14);
  // erank_k <= min(k, erank) (Lemma 4) for the trace form; the full entropy is k = d
  const auto full = truncated_entropy(ev, 4);
  EXPECT_LE(tr2.erank, full.erank);
  EXPECT_LE(top2.erank, 2.0);
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
