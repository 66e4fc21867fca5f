// core/rng.h: SplitMix64 matches the published reference stream, the portable logarithm agrees with
// libm to a few ulp, and the normal stream is pinned (so a change that would alter every seeded
// sketch or GVote sample is caught) and has the right first two moments.
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"

namespace kvs {
namespace {

TEST(MathRng, SplitMix64ReferenceValues) {
  SplitMix64 zero(0);
  EXPECT_EQ(zero.next(), 0xe220a8397b1dcdafULL);  // the reference implementation's first output for seed 0
  SplitMix64 s(42);
  EXPECT_EQ(s.next(), 0xbdd732262feb6e95ULL);
  EXPECT_EQ(s.next(), 0x28efe333b266f103ULL);
  EXPECT_EQ(s.next(), 0x47526757130f9f52ULL);
  SplitMix64 u(9);
  for (int i = 0; i < 1000; ++i) {
    const double x = u.uniform();
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
  }
}

TEST(MathRng, PortableLogWithinFewUlpOfLibm) {
  SplitMix64 u(1);
  double worst = 0;
  for (int i = 0; i < 200000; ++i) {
    const double x = std::ldexp(u.uniform() + 0.5, static_cast<int>(u.next() % 2000) - 1000);
    const double a = portable_log(x), b = std::log(x);
    if (b == 0) continue;
    const double ulp = std::nextafter(std::abs(b), INFINITY) - std::abs(b);
    worst = std::max(worst, std::abs(a - b) / ulp);
  }
  EXPECT_LE(worst, 4.0);
  EXPECT_EQ(portable_log(1.0), 0.0);
  EXPECT_NEAR(portable_log(2.0), std::log(2.0), 1e-16);
  EXPECT_TRUE(std::isinf(portable_log(0.0)) && portable_log(0.0) < 0);
  EXPECT_TRUE(std::isnan(portable_log(-1.0)));
}

TEST(MathRng, NormalStreamIsPinnedAndStandard) {
  NormalRng g(42);
  // Bit-exact on any IEEE-754 platform (no libm transcendental in the path); printed with %.17g.
  EXPECT_EQ(g.next(), 0.49295065581737485);
  EXPECT_EQ(g.next(), -0.69400566721601742);
  EXPECT_EQ(g.next(), -1.2810773478777024);
  EXPECT_EQ(g.next(), -0.901557193497174);
  NormalRng h(5);
  const int n = 200000;
  double m = 0, v = 0;
  for (int i = 0; i < n; ++i) {
    const double x = h.next();
    m += x;
    v += x * x;
  }
  m /= n;
  v = v / n - m * m;
  EXPECT_NEAR(m, 0.0, 0.01);  // sd of the mean: 0.0022
  EXPECT_NEAR(v, 1.0, 0.015);  // sd of the variance: 0.0032
}

}  // namespace
}  // namespace kvs
