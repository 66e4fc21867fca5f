// score_token against log softmax and a full sort written here: the token's log-probability, the
// top-N list (most likely first, lowest id on ties) and the token equal to its top-1 entry exactly
// when it is a most likely token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/token_logprobs.h"

namespace kvs {
namespace {

TEST(TokenLogprobs, MatchesLogSoftmaxAndSortedTopList) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> x(1000);
  for (auto& v : x) v = nd(rng);
  x[10] = x[20] = x[30] = 9.0f;  // a three-way tie at the top
  double mx = *std::max_element(x.begin(), x.end()), z = 0;
  for (float v : x) z += std::exp(v - mx);
  std::vector<int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  for (int32_t tok : {10, 20, 7, 999}) {
    for (int n : {0, 1, 5, 20}) {
      const TokenLogprob e = score_token(x, tok, n);
      EXPECT_EQ(e.token, tok);
      EXPECT_NEAR(e.logprob, x[tok] - mx - std::log(z), 1e-5);
      ASSERT_EQ(e.top.size(), static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(e.top[i].first, order[i]) << i;
        EXPECT_NEAR(e.top[i].second, x[order[i]] - mx - std::log(z), 1e-5);
      }
      if (n > 0) EXPECT_EQ(e.logprob == e.top[0].second, x[tok] == mx) << "a most likely token equals top-1 exactly";
    }
  }
  // Rows: row r scores next[r].
  std::vector<float> rows(x);
  rows.insert(rows.end(), x.rbegin(), x.rend());
  std::vector<TokenLogprob> out;
  const std::vector<int32_t> next = {3, 4};
  score_rows(rows, static_cast<int64_t>(x.size()), next, 2, out);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].logprob, score_token(x, 3, 2).logprob);
  EXPECT_NEAR(out[1].logprob, x[x.size() - 1 - 4] - mx - std::log(z), 1e-5);
}

}  // namespace
}  // namespace kvs
