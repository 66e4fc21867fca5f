// GVote pieces: top-p size (p -> 1 keeps everything, one dominant key keeps one), channel
// statistics against a two-pass estimate, seeded Gaussian samples, and the union of top-B votes
// over samples and the query heads of a group. (The averaged RoPE table is the probe's:
// tests/runtime/forward_hooks_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/ops.h"
#include "press/math/channel_stats.h"
#include "press/math/gvote_math.h"

namespace kvs::math {
namespace {

TEST(MathGvote, TopPSize) {
  const std::vector<float> dominant = {0.01f, 0.97f, 0.01f, 0.01f};
  EXPECT_EQ(gvote_top_p_size(dominant, 0.95), 1);
  EXPECT_EQ(gvote_top_p_size(dominant, 0.975), 2);
  EXPECT_EQ(gvote_top_p_size(dominant, 1.0), 4);  // p -> 1 keeps everything
  const std::vector<float> flat(10, 0.1f);
  EXPECT_EQ(gvote_top_p_size(flat, 0.95), 10);
  EXPECT_EQ(gvote_top_p_size(flat, 0.5), 5);
  EXPECT_EQ(gvote_top_p_size(flat, 0.0), 1);
  // a long smooth tail: p close to 1 needs (almost) everything, and the size grows with p
  std::vector<float> tail(1000);
  double z = 0;
  for (int i = 0; i < 1000; ++i) z += (tail[i] = static_cast<float>(std::exp(-i / 200.0)));
  for (float& t : tail) t = static_cast<float>(t / z);
  int64_t prev = 0;
  for (double p : {0.5, 0.9, 0.95, 0.99, 0.999999}) {
    const int64_t m = gvote_top_p_size(tail, p);
    EXPECT_GT(m, prev);
    prev = m;
  }
  EXPECT_GE(prev, 990);
  EXPECT_EQ(gvote_top_p_size(std::vector<float>{}, 0.9), 0);
  EXPECT_THROW(gvote_top_p_size(std::vector<float>{0.5f, -0.1f}, 0.9), Error);
}

TEST(MathGvote, ChannelStatsAndSamples) {
  const int d = 5;
  const int64_t n = 400;
  NormalRng g(8);
  std::vector<float> x(n * 2 * d);  // [n][2][d], channel stats of the second block
  for (float& v : x) v = static_cast<float>(100 + 3 * g.next());
  ChannelStats st(d);
  st.add(std::span<const float>(x).subspan(d), 150, 2 * d);
  st.add(std::span<const float>(x).subspan(150 * 2 * d + d), n - 150, 2 * d);
  EXPECT_EQ(st.count(), n);
  const auto mu = st.mean();
  const auto sd = st.stddev();
  for (int c = 0; c < d; ++c) {
    double m = 0, v = 0;
    for (int64_t t = 0; t < n; ++t) m += x[(t * 2 + 1) * d + c];
    m /= n;
    for (int64_t t = 0; t < n; ++t) v += (x[(t * 2 + 1) * d + c] - m) * (x[(t * 2 + 1) * d + c] - m);
    EXPECT_NEAR(mu[c], m, 1e-4);
    EXPECT_NEAR(sd[c], std::sqrt(v / (n - 1)), 1e-5);  // unbiased, as torch.std
    EXPECT_NEAR(st.stddev(false)[c], std::sqrt(v / n), 1e-5);
  }
  // samples: reproducible by seed, moments right, sigma = 0 gives mu exactly
  const std::vector<float> m0 = {1.0f, -2.0f, 0.5f}, s0 = {0.5f, 2.0f, 0.0f};
  const auto a = gvote_sample_hidden(m0, s0, 20000, 3);
  EXPECT_EQ(a, gvote_sample_hidden(m0, s0, 20000, 3));
  EXPECT_NE(a, gvote_sample_hidden(m0, s0, 20000, 4));
  ChannelStats sa(3);
  sa.add(a, 20000);
  EXPECT_NEAR(sa.mean()[0], 1.0, 0.02);
  EXPECT_NEAR(sa.mean()[1], -2.0, 0.06);
  EXPECT_NEAR(sa.stddev()[0], 0.5, 0.01);
  EXPECT_NEAR(sa.stddev()[1], 2.0, 0.04);
  for (int s = 0; s < 20000; ++s) ASSERT_EQ(a[s * 3 + 2], 0.5f);
  ChannelStats one(3);
  one.add(m0, 1);
  EXPECT_THROW(one.stddev(), Error);
}

TEST(MathGvote, UnionOfVotesOverSamplesAndGroupHeads) {
  // keys = the identity (D = n = 6), so each query's logits are the query itself
  const int n = 6;
  std::vector<float> keys(n * n, 0.0f);
  for (int j = 0; j < n; ++j) keys[j * n + j] = 1.0f;
  // q [2 heads][2 samples][6]
  const std::vector<float> q = {
      5, 0, 0, 0,   0, 0,  // head 0 sample 0 -> {0}          (B = 1)
      0, 0, 0, 0,   0, 7,  // head 0 sample 1 -> {5}
      0, 3, 2, 0,   0, 0,  // head 1 sample 0 -> {1, 2}       (B = 2)
      0, 3, 0, 2.5, 0, 0,  // head 1 sample 1 -> {1, 3}
  };
  const auto keep = gvote_union_votes(q, 2, 2, keys, n, n, n, std::vector<int64_t>{1, 2});
  EXPECT_EQ(keep, (std::vector<uint8_t>{1, 1, 1, 1, 0, 1}));
  // a budget of n (p -> 1) keeps everything
  const auto all = gvote_union_votes(q, 2, 2, keys, n, n, n, std::vector<int64_t>{1, n});
  EXPECT_EQ(std::accumulate(all.begin(), all.end(), 0), n);
  // one dominant key that every sample and head ranks first, B = 1: keeps exactly that key
  std::vector<float> qd(2 * 3 * n);
  NormalRng g(2);
  for (float& v : qd) v = static_cast<float>(0.1 * g.next());
  for (int r = 0; r < 6; ++r) qd[r * n + 4] = 10.0f;
  const auto one = gvote_union_votes(qd, 2, 3, keys, n, n, n, std::vector<int64_t>{1, 1});
  EXPECT_EQ(one, (std::vector<uint8_t>{0, 0, 0, 0, 1, 0}));
  // ties go to the higher index; budget 0 votes for nothing
  std::vector<uint8_t> m(4, 0);
  gvote_vote_top_b(std::vector<float>{1, 2, 2, 0}, 1, m);
  EXPECT_EQ(m, (std::vector<uint8_t>{0, 0, 1, 0}));
  gvote_vote_top_b(std::vector<float>{1, 2, 2, 0}, 0, m);
  EXPECT_EQ(m, (std::vector<uint8_t>{0, 0, 1, 0}));
  // keys through a stride (one head of [n][2][D])
  std::vector<float> k2(n * 2 * n, -9.0f);
  for (int j = 0; j < n; ++j) std::copy_n(keys.begin() + j * n, n, k2.begin() + (j * 2 + 1) * n);
  EXPECT_EQ(gvote_union_votes(q, 2, 2, std::span<const float>(k2).subspan(n), n, n, 2 * n, std::vector<int64_t>{1, 2}), keep);
  EXPECT_THROW(gvote_union_votes(q, 2, 2, keys, n, n, n, std::vector<int64_t>{1}), Error);
}

}  // namespace
}  // namespace kvs::math
