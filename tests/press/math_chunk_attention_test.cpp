// Compactor's chunked non-causal attention (Eq. 5) against a brute-force reference, chunk
// boundaries, and the z-score blend (Eq. 6).
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "core/rng.h"
#include "press/math/chunk_attention.h"

namespace kvs::math {
namespace {

std::vector<float> gaussian(size_t n, uint64_t seed, double sd = 1.0) {
  NormalRng g(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(sd * g.next());
  return v;
}

// Materialises every chunk's full attention matrix in double.
std::vector<double> reference(const std::vector<float>& q, const std::vector<float>& k, int64_t n, int H, int Hkv,
                              int D, int C, double scale) {
  const int G = H / Hkv;
  std::vector<double> out(static_cast<size_t>(Hkv) * n, 0.0);
  for (int h = 0; h < H; ++h) {
    const int kvh = h / G;
    for (int64_t c0 = 0; c0 < n; c0 += C) {
      const int64_t c1 = std::min<int64_t>(n, c0 + C);
      for (int64_t i = c0; i < c1; ++i) {
        std::vector<double> row;
        for (int64_t j = c0; j < c1; ++j) {
          double s = 0;
          for (int d = 0; d < D; ++d) s += static_cast<double>(q[(i * H + h) * D + d]) * k[(j * Hkv + kvh) * D + d];
          row.push_back(s * scale);
        }
        const double mx = *std::max_element(row.begin(), row.end());
        double z = 0;
        for (double& r : row) z += (r = std::exp(r - mx));
        for (int64_t j = c0; j < c1; ++j) out[kvh * n + j] += row[j - c0] / z / G;
      }
    }
  }
  return out;
}

TEST(MathChunkAttention, MatchesBruteForceReference) {
  const int64_t n = 10;
  const int H = 4, Hkv = 2, D = 3, C = 4;  // chunks of 4, 4, 2
  const auto q = gaussian(n * H * D, 1), k = gaussian(n * Hkv * D, 2);
  for (float scale : {1.0f, 0.7f}) {
    const auto got = chunk_attention_scores(q, k, n, H, Hkv, D, {.chunk = C, .scale = scale});
    const auto want = reference(q, k, n, H, Hkv, D, C, scale);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << i;
  }
  // a larger case through the vectorised kernels (D = 64, C = 32, n not a multiple of C)
  const int64_t n2 = 100;
  const auto q2 = gaussian(n2 * 6 * 64, 3, 0.2), k2 = gaussian(n2 * 2 * 64, 4, 0.2);
  const auto got2 = chunk_attention_scores(q2, k2, n2, 6, 2, 64, {.chunk = 32});
  const auto want2 = reference(q2, k2, n2, 6, 2, 64, 32, 1.0);
  for (size_t i = 0; i < got2.size(); ++i) EXPECT_NEAR(got2[i], want2[i], 1e-4) << i;
}

TEST(MathChunkAttention, ChunkBoundaries) {
  const int64_t n = 9;
  const int H = 2, Hkv = 1, D = 4, C = 4;  // chunks [0,4) [4,8) [8,9)
  auto q = gaussian(n * H * D, 5), k = gaussian(n * Hkv * D, 6);
  const auto a = chunk_attention_scores(q, k, n, H, Hkv, D, {.chunk = C});
  // each chunk hands out one unit of attention per query (mean over the group): sums 4, 4, 1
  EXPECT_NEAR(a[0] + a[1] + a[2] + a[3], 4.0, 1e-5);
  EXPECT_NEAR(a[4] + a[5] + a[6] + a[7], 4.0, 1e-5);
  EXPECT_NEAR(a[8], 1.0, 1e-6);  // a 1-token last chunk: its key gets its own query's whole mass
  // queries and keys of chunk 1 do not affect chunk 0's scores (no attention across chunks)
  for (int64_t t = 4; t < 8; ++t) {
    for (int d = 0; d < H * D; ++d) q[t * H * D + d] = 5.0f;
    for (int d = 0; d < D; ++d) k[t * D + d] = -3.0f;
  }
  const auto b = chunk_attention_scores(q, k, n, H, Hkv, D, {.chunk = C});
  for (int j = 0; j < 4; ++j) EXPECT_EQ(a[j], b[j]);
  EXPECT_EQ(a[8], b[8]);
  // chunk >= n: one chunk, plain non-causal attention over the whole sequence
  const auto full = chunk_attention_scores(q, k, n, H, Hkv, D, {.chunk = 1000});
  const auto ref = reference(q, k, n, H, Hkv, D, static_cast<int>(n), 1.0);
  for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(full[j], ref[j], 1e-5);
  // the causal structure is absent: an early key can be favoured by later queries of its chunk
  std::vector<float> q1(4 * 1 * 2, 0.0f), k1(4 * 2, 0.0f);
  for (int t = 0; t < 4; ++t) q1[t * 2] = 4.0f;  // every query points along x
  k1[0] = 1.0f;                                   // only key 0 points along x
  const auto c = chunk_attention_scores(q1, k1, 4, 1, 1, 2, {.chunk = 4});
  EXPECT_GT(c[0], 3.0f);  // e^4 / (e^4 + 3) per query, 4 queries
  EXPECT_NEAR(c[0] + c[1] + c[2] + c[3], 4.0, 1e-5);
}

TEST(MathChunkAttention, BadShapesThrow) {
  const std::vector<float> q(2 * 3 * 4), k(2 * 2 * 4);
  EXPECT_THROW(chunk_attention_scores(q, k, 2, 3, 2, 4), Error);  // 3 heads for 2 KV heads
  EXPECT_THROW(chunk_attention_scores(q, k, 3, 3, 1, 4), Error);  // sizes do not match n
  EXPECT_THROW(chunk_attention_scores(std::vector<float>(16), std::vector<float>(8), 2, 2, 1, 4, {.chunk = 0}), Error);
  EXPECT_TRUE(chunk_attention_scores({}, {}, 0, 2, 1, 4).empty());
}

TEST(MathChunkAttention, ZscoreAndBlend) {
  std::vector<float> x = {1, 2, 3, 4};  // mean 2.5, population sd sqrt(1.25)
  zscore(x);
  const double sd = std::sqrt(1.25);
  EXPECT_NEAR(x[0], -1.5 / sd, 1e-6);
  EXPECT_NEAR(x[3], 1.5 / sd, 1e-6);
  std::vector<float> c = {7, 7, 7};
  zscore(c);
  EXPECT_EQ(c, (std::vector<float>{0, 0, 0}));
  std::vector<float> bad = {1, INFINITY};
  EXPECT_THROW(zscore(bad), Error);
  // s = z(a) + 0.3 z(o): a = (0, 2) -> (-1, 1); o = (5, 1) -> (1, -1)
  const auto s = blend_scores(std::vector<float>{0, 2}, std::vector<float>{5, 1}, 0.3);
  EXPECT_NEAR(s[0], -1.0 + 0.3, 1e-6);
  EXPECT_NEAR(s[1], 1.0 - 0.3, 1e-6);
  // scale invariance of each part: multiplying o by 100 changes nothing
  const auto s2 = blend_scores(std::vector<float>{0, 2}, std::vector<float>{500, 100}, 0.3);
  EXPECT_NEAR(s2[0], s[0], 1e-6);
  EXPECT_THROW(blend_scores(std::vector<float>{1}, std::vector<float>{1, 2}), Error);
}

}  // namespace
}  // namespace kvs::math
