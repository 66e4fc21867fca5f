// Q.K against Q8_0 rows with int16 queries (ops.h: prepare_queries_q8_0, qk_rows_q8_0_prepared):
// a known answer worked out by hand, every query block size and row count against a double
// reference from the f32 queries within the bound ops.h states, and the refusals (head dims other
// than 64, NaN / infinite / subnormal-only queries, tables without the path).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/quant.h"

namespace kvs::kernels {
namespace {

using test::Path;

class PreparedQ8Paths : public test::TablePaths {
 protected:
  // The table's path, or skip: only the AVX-512 table has one.
  bool has_path() const { return k().prepare_queries_q8_0 != nullptr && k().qk_rows_q8_0_prepared != nullptr; }
};

constexpr int kD = 64;
constexpr int kLd = 48;  // row stride of the scores (> every n below)

// Row r's value j as the page holds it: d(r, j / 32) * q(r, j).
double key_value(const std::vector<uint8_t>& K, int r, int j) {
  const auto* b = reinterpret_cast<const block_q8_0*>(K.data()) + r * (kD / QK8_0) + j / QK8_0;
  return static_cast<double>(fp16_to_fp32(b->d)) * b->qs[j % QK8_0];
}

// Queries whose values are -m, 0 or +m round to -32767, 0, 32767 exactly: the prepared scores equal
// the f32 queries' scores, worked out here by hand.
TEST_P(PreparedQ8Paths, KnownAnswer) {
  if (!has_path()) GTEST_SKIP() << "no int16-query path in this table (the float row kernel serves)";
  const test::HandQ8Row row = test::hand_q8_0_row();
  // Q = 0.25 (e_5 - e_20 + e_40): 0.25 * (0.5 * (5 - 16) - 0.5 * (20 - 16) + (-2) * 3) = -3.375, times 2.
  std::vector<float> Q(kD, 0.0f);
  Q[5] = 0.25f;
  Q[20] = -0.25f;
  Q[40] = 0.25f;
  std::vector<uint8_t> prep(kQ8PreparedQueryBytes);
  ASSERT_TRUE(k().prepare_queries_q8_0(Q.data(), 1, kD, 2.0f, prep.data()));
  float s = 0;
  k().qk_rows_q8_0_prepared(prep.data(), 1, row.bytes(), 1, kD, &s, 1);
  EXPECT_FLOAT_EQ(s, -6.75f);
  // A zero query scores 0 against any row.
  std::fill(Q.begin(), Q.end(), 0.0f);
  ASSERT_TRUE(k().prepare_queries_q8_0(Q.data(), 1, kD, 2.0f, prep.data()));
  s = 1;
  k().qk_rows_q8_0_prepared(prep.data(), 1, row.bytes(), 1, kD, &s, 1);
  EXPECT_EQ(s, 0.0f);
}

// nq 1..9 (blocks of 4 queries and every remainder), n 1..33 (groups of 4 rows and every short last
// group), queries of very different magnitudes: each score within scale * (s_q / 2) * sum_j |d k_j|
// (the int16 rounding, s_q = max|q| / 32767) plus 1e-6 relative of sum_j |q_j d k_j| (f32
// arithmetic) of the double-precision score of the f32 queries. Scores past n stay untouched.
TEST_P(PreparedQ8Paths, MatchesDoubleReferenceWithinStatedBound) {
  if (!has_path()) GTEST_SKIP() << "no int16-query path in this table (the float row kernel serves)";
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  const float scale = 0.125f;
  for (int nq : {1, 2, 3, 4, 5, 6, 7, 8, 9}) {
    for (int n : {1, 2, 3, 4, 5, 7, 16, 33}) {
      std::vector<float> Q(nq * kD), Kf(n * kD);
      for (int q = 0; q < nq; ++q) {
        const float mag = std::pow(10.0f, static_cast<float>(q % 5) - 2.0f);  // 0.01 .. 100
        for (int j = 0; j < kD; ++j) Q[q * kD + j] = mag * nd(rng);
      }
      for (auto& x : Kf) x = 3.0f * nd(rng);
      const std::vector<uint8_t> K = test::q8_0_rows(Kf, n, kD);
      std::vector<uint8_t> prep(nq * kQ8PreparedQueryBytes);
      ASSERT_TRUE(k().prepare_queries_q8_0(Q.data(), nq, kD, scale, prep.data()));
      std::vector<float> got(nq * kLd, -1.0f);
      k().qk_rows_q8_0_prepared(prep.data(), nq, K.data(), n, kD, got.data(), kLd);
      for (int q = 0; q < nq; ++q) {
        double mx = 0;
        for (int j = 0; j < kD; ++j) mx = std::max(mx, std::abs(static_cast<double>(Q[q * kD + j])));
        const double sq = mx / 32767.0;
        for (int r = 0; r < kLd; ++r) {
          const float g = got[q * kLd + r];
          if (r >= n) {
            ASSERT_EQ(g, -1.0f) << "nq=" << nq << " n=" << n << " q=" << q << " r=" << r;
            continue;
          }
          double want = 0, sum_abs_k = 0, sum_abs_qk = 0;
          for (int j = 0; j < kD; ++j) {
            const double kv = key_value(K, r, j);
            want += Q[q * kD + j] * kv;
            sum_abs_k += std::abs(kv);
            sum_abs_qk += std::abs(Q[q * kD + j] * kv);
          }
          want *= scale;
          const double bound = scale * (sq / 2 * sum_abs_k + 1e-6 * sum_abs_qk) + 1e-30;
          ASSERT_LE(std::abs(g - want), bound) << "nq=" << nq << " n=" << n << " q=" << q << " r=" << r;
        }
      }
    }
  }
}

TEST_P(PreparedQ8Paths, RefusesWhatItCannotRoundExactly) {
  if (!has_path()) GTEST_SKIP() << "no int16-query path in this table (the float row kernel serves)";
  std::vector<float> Q(2 * 128, 0.5f);
  std::vector<uint8_t> prep(2 * kQ8PreparedQueryBytes);
  EXPECT_FALSE(k().prepare_queries_q8_0(Q.data(), 1, 128, 1.0f, prep.data())) << "head dim 128";
  EXPECT_FALSE(k().prepare_queries_q8_0(Q.data(), 1, 32, 1.0f, prep.data())) << "head dim 32";
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    std::vector<float> q(2 * kD, 0.5f);
    q[kD + 37] = bad;  // in the second query: the first one's success does not hide it
    EXPECT_FALSE(k().prepare_queries_q8_0(q.data(), 2, kD, 1.0f, prep.data())) << bad;
  }
  // Only subnormal magnitudes: 32767 / max|q| would overflow.
  std::vector<float> tiny(kD, 0.0f);
  tiny[3] = std::numeric_limits<float>::denorm_min() * 64;
  EXPECT_FALSE(k().prepare_queries_q8_0(tiny.data(), 1, kD, 1.0f, prep.data()));
  // The smallest normal magnitude is still taken.
  tiny[3] = std::numeric_limits<float>::min();
  EXPECT_TRUE(k().prepare_queries_q8_0(tiny.data(), 1, kD, 1.0f, prep.data()));
}

TEST_P(PreparedQ8Paths, TablesWithoutThePathLeaveBothEntriesEmpty) {
  if (GetParam() == Path::Avx512) {
    EXPECT_TRUE(has_path());
  } else {
    EXPECT_EQ(k().prepare_queries_q8_0, nullptr);
    EXPECT_EQ(k().qk_rows_q8_0_prepared, nullptr);
  }
}

INSTANTIATE_TEST_SUITE_P(Tables, PreparedQ8Paths, test::all_paths(), test::path_name);

// The dispatching front answers false where the active table has no path, and otherwise prepares
// exactly what the table does.
TEST(PreparedQ8Front, FollowsTheActiveTable) {
  std::vector<float> Q(3 * kD);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (auto& x : Q) x = nd(rng);
  std::vector<uint8_t> a(3 * kQ8PreparedQueryBytes, 0), b(3 * kQ8PreparedQueryBytes, 0);
  const bool ok = prepare_queries_q8_0(Q.data(), 3, kD, 0.125f, a.data());
  if (active_kernels().prepare_queries_q8_0 == nullptr) {
    EXPECT_FALSE(ok);
    return;
  }
  ASSERT_TRUE(ok);
  ASSERT_TRUE(active_kernels().prepare_queries_q8_0(Q.data(), 3, kD, 0.125f, b.data()));
  EXPECT_EQ(a, b);
}

}  // namespace
}  // namespace kvs::kernels
