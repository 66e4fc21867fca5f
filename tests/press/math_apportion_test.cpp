// apportion(): exact sums, proportionality, caps with the excess redistributed, ties, edge cases.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "press/math/apportion.h"

namespace kvs::math {
namespace {

int64_t sum(const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t{0}); }

TEST(MathApportion, ProportionalWithLargestRemainder) {
  // ideal 10 * (1, 2, 3, 4) / 10 = (1, 2, 3, 4) exactly
  EXPECT_EQ(apportion(std::vector<double>{1, 2, 3, 4}, 10), (std::vector<int64_t>{1, 2, 3, 4}));
  // ideal 10 / 3 each = 3.33: one extra unit to the first (ties: lower index)
  EXPECT_EQ(apportion(std::vector<double>{1, 1, 1}, 10), (std::vector<int64_t>{4, 3, 3}));
  // ideal (0.7, 1.4, 2.1, 2.8) -> floors (0, 1, 2, 2) + 2 leftover to remainders .8 and .7
  EXPECT_EQ(apportion(std::vector<double>{1, 2, 3, 4}, 7), (std::vector<int64_t>{1, 1, 2, 3}));
}

TEST(MathApportion, CapsRedistributeTheExcess) {
  // ideal (50, 25, 25) but the first holds only 20: 80 left over (1:1) -> (20, 40, 40)
  const std::vector<int64_t> caps = {20, 100, 100};
  EXPECT_EQ(apportion(std::vector<double>{2, 1, 1}, 100, caps), (std::vector<int64_t>{20, 40, 40}));
  // a cascade: after the first cap the second binds too
  const std::vector<int64_t> caps2 = {10, 50, 1000};  // round 1 closes the first (ideal 75), round 2 the second (91.7)
  EXPECT_EQ(apportion(std::vector<double>{10, 5, 1}, 120, caps2), (std::vector<int64_t>{10, 50, 60}));
  // total above the sum of caps: everyone at the cap
  EXPECT_EQ(apportion(std::vector<double>{1, 1}, 50, std::vector<int64_t>{10, 20}), (std::vector<int64_t>{10, 20}));
  // zero caps take nothing
  EXPECT_EQ(apportion(std::vector<double>{5, 1}, 6, std::vector<int64_t>{0, 10}), (std::vector<int64_t>{0, 6}));
}

TEST(MathApportion, ZeroWeightsAndZeroTotal) {
  EXPECT_EQ(apportion(std::vector<double>{0, 0, 0}, 5), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(apportion(std::vector<double>{0, 3}, 5), (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(apportion(std::vector<double>{1, 2}, 0), (std::vector<int64_t>{0, 0}));
  EXPECT_TRUE(apportion(std::vector<double>{}, 7).empty());
}

TEST(MathApportion, RandomCasesSumExactlyAndRespectCaps) {
  SplitMix64 r(11);
  for (int t = 0; t < 500; ++t) {
    const int n = 1 + static_cast<int>(r.next() % 40);
    std::vector<double> w(n);
    std::vector<int64_t> caps(n);
    int64_t cap_sum = 0;
    for (int i = 0; i < n; ++i) {
      w[i] = r.uniform() < 0.1 ? 0.0 : std::exp(8 * r.uniform() - 4);
      caps[i] = static_cast<int64_t>(r.next() % 500);
      cap_sum += caps[i];
    }
    const int64_t total = static_cast<int64_t>(r.next() % static_cast<uint64_t>(cap_sum + 1));
    const auto out = apportion(w, total, caps);
    ASSERT_EQ(sum(out), total);
    for (int i = 0; i < n; ++i) {
      ASSERT_GE(out[i], 0);
      ASSERT_LE(out[i], caps[i]);
    }
  }
}

TEST(MathApportion, BadInputThrows) {
  EXPECT_THROW(apportion(std::vector<double>{-1, 1}, 3), Error);
  EXPECT_THROW(apportion(std::vector<double>{NAN}, 3), Error);
  EXPECT_THROW(apportion(std::vector<double>{1, 1}, 3, std::vector<int64_t>{1}), Error);
  EXPECT_THROW(apportion(std::vector<double>{1}, -3), Error);
}

}  // namespace
}  // namespace kvs::math
