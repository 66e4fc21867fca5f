// P.V against Q8_0 rows with int16 weights (ops.h: pv_rows_q8_0_i16): a known answer worked out by
// hand, every query block size and row count (chunks of 32 and their remainders) against a double
// reference from the f32 weights within the bound ops.h states, the chunks that take the float
// kernel (NaN / infinite weights or scales, products below the smallest normal float) equal to it
// bit for bit, and the tables and head dims that have the path.
#include <gtest/gtest.h>

#include <algorithm>
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

class PvI16Paths : public test::TablePaths {
 protected:
  bool has_path() const { return k().pv_rows_q8_0_i16 != nullptr; }
};

constexpr int kD = 64;
constexpr int kChunk = 32;  // the kernel's rows per integer pass (ops.h)

block_q8_0* blocks(std::vector<uint8_t>& V) { return reinterpret_cast<block_q8_0*>(V.data()); }
const block_q8_0& block_at(const std::vector<uint8_t>& V, int r, int b) {
  return reinterpret_cast<const block_q8_0*>(V.data())[r * (kD / QK8_0) + b];
}

// Weights p = 1 against scales of magnitude 2: every weight is +-max, rounded to +-32767 exactly,
// so the result is the f32 P.V, worked out here by hand.
TEST_P(PvI16Paths, KnownAnswer) {
  if (!has_path()) GTEST_SKIP() << "no int16-weight path in this table (the float row kernel serves)";
  std::vector<uint8_t> V(2 * 2 * sizeof(block_q8_0));
  block_q8_0* bl = blocks(V);
  // Row A: block 0 d = 2, values i - 16; block 1 d = -2, values 3.
  // Row B: block 0 d = -2, values 1;     block 1 d = 2, values i % 5 - 2.
  bl[0].d = fp32_to_fp16(2.0f);
  bl[1].d = fp32_to_fp16(-2.0f);
  bl[2].d = fp32_to_fp16(-2.0f);
  bl[3].d = fp32_to_fp16(2.0f);
  for (int i = 0; i < QK8_0; ++i) {
    bl[0].qs[i] = static_cast<int8_t>(i - 16);
    bl[1].qs[i] = 3;
    bl[2].qs[i] = 1;
    bl[3].qs[i] = static_cast<int8_t>(i % 5 - 2);
  }
  const float P[2] = {1.0f, 1.0f};
  std::vector<float> acc(kD, 0.25f);
  k().pv_rows_q8_0_i16(P, 1, 2, V.data(), 2, kD, acc.data());
  for (int j = 0; j < 32; ++j) EXPECT_FLOAT_EQ(acc[j], 0.25f + 2.0f * j - 34.0f) << j;       // 2 (j - 16) - 2
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(acc[32 + i], 0.25f + 2.0f * (i % 5) - 10.0f) << i;  // -6 + 2 (i % 5 - 2)
  // A zero weight drops its row: row A alone.
  const float PA[2] = {1.0f, 0.0f};
  std::fill(acc.begin(), acc.end(), 0.0f);
  k().pv_rows_q8_0_i16(PA, 1, 2, V.data(), 2, kD, acc.data());
  for (int j = 0; j < 32; ++j) EXPECT_FLOAT_EQ(acc[j], 2.0f * (j - 16)) << j;
  for (int i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(acc[32 + i], -6.0f) << i;
  // All weights zero: acc untouched.
  const float P0[2] = {0.0f, 0.0f};
  std::fill(acc.begin(), acc.end(), 0.5f);
  k().pv_rows_q8_0_i16(P0, 1, 2, V.data(), 2, kD, acc.data());
  for (float x : acc) EXPECT_EQ(x, 0.5f);
}

// nq 1..9 and 12 (blocks of 3 or 4 queries and every remainder), n from 1 to 100 (chunks of 32
// and every short last chunk, odd counts), weights spanning six decades with exact zeros: each
// value within the bound ops.h states, summed over the chunks: (s_c / 2) * sum_{r in c} |k(r, j)|
// with s_c = max_{r in c} |p(q, r)| * max_{r in c, b} |d(r, b)| / 32767 (x 1.02 for the f32
// products the rounding starts from), plus 1e-6 relative of sum_r |p d k| for the f32 sums, of
// the double-precision P.V of the f32 weights. Queries past nq and dims stay untouched.
TEST_P(PvI16Paths, MatchesDoubleReferenceWithinStatedBound) {
  if (!has_path()) GTEST_SKIP() << "no int16-weight path in this table (the float row kernel serves)";
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  std::uniform_real_distribution<float> ud(0.0f, 1.0f);
  for (int nq : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12}) {
    for (int n : {1, 2, 3, 15, 16, 17, 31, 32, 33, 64, 100}) {
      const int ldp = n + 3;
      std::vector<float> P(nq * ldp, -99.0f), Vf(n * kD);
      for (int q = 0; q < nq; ++q)
        for (int r = 0; r < n; ++r) P[q * ldp + r] = ud(rng) < 0.1f ? 0.0f : std::exp(3.0f * nd(rng) - 4.0f);
      for (int r = 0; r < n; ++r) {
        const float mag = std::pow(2.0f, static_cast<float>(r % 4));  // rows of different scales
        for (int j = 0; j < kD; ++j) Vf[r * kD + j] = mag * nd(rng);
      }
      const std::vector<uint8_t> V = test::q8_0_rows(Vf, n, kD);
      std::vector<float> got((nq + 1) * kD, 0.5f);
      k().pv_rows_q8_0_i16(P.data(), nq, ldp, V.data(), n, kD, got.data());
      for (int q = 0; q < nq; ++q)
        for (int j = 0; j < kD; ++j) {
          double want = 0.5, bound = 1e-7, sum_abs = 0;
          for (int c = 0; c < n; c += kChunk) {
            const int ce = std::min(n, c + kChunk);
            double pm = 0, dm = 0, sum_abs_k = 0;
            for (int r = c; r < ce; ++r) {
              pm = std::max(pm, std::abs(static_cast<double>(P[q * ldp + r])));
              for (int b = 0; b < kD / QK8_0; ++b) dm = std::max(dm, std::abs(static_cast<double>(fp16_to_fp32(block_at(V, r, b).d))));
              sum_abs_k += std::abs(block_at(V, r, j / QK8_0).qs[j % QK8_0]);
            }
            bound += 1.02 * (pm * dm / 32767.0 / 2) * sum_abs_k;
          }
          for (int r = 0; r < n; ++r) {
            const block_q8_0& bk = block_at(V, r, j / QK8_0);
            const double t = static_cast<double>(P[q * ldp + r]) * fp16_to_fp32(bk.d) * bk.qs[j % QK8_0];
            want += t;
            sum_abs += std::abs(t);
          }
          bound += 1e-6 * sum_abs;
          ASSERT_LE(std::abs(got[q * kD + j] - want), bound) << "nq=" << nq << " n=" << n << " q=" << q << " j=" << j;
        }
      for (int j = 0; j < kD; ++j) ASSERT_EQ(got[nq * kD + j], 0.5f) << "past nq, nq=" << nq << " n=" << n;
    }
  }
}

// A chunk the int16 rounding cannot take exactly goes through the table's float kernel: the
// result equals pv_rows_q8_0's bit for bit, chunk by chunk (the other chunks of the same call
// keep the int16 path).
TEST_P(PvI16Paths, UnroundableChunksTakeTheFloatKernel) {
  if (!has_path()) GTEST_SKIP() << "no int16-weight path in this table (the float row kernel serves)";
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  const int n = 40, nq = 3;  // chunks [0, 32) and [32, 40)
  std::vector<float> Vf(n * kD);
  for (auto& x : Vf) x = nd(rng);
  const std::vector<uint8_t> V0 = test::q8_0_rows(Vf, n, kD);
  std::vector<float> P0(nq * n);
  for (auto& p : P0) p = std::exp(nd(rng));
  struct Case {
    const char* name;
    float p;      // weight written at (query 1, row 35), or 0 for none
    float d;      // scale written at (row 37, block 1), or 0 for none
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const Case& cs : {Case{"NaN weight", nan, 0}, Case{"infinite weight", inf, 0}, Case{"infinite scale", 0, inf},
                         Case{"NaN scale", 0, nan}}) {
    std::vector<float> P = P0;
    std::vector<uint8_t> V = V0;
    if (cs.p != 0) P[1 * n + 35] = cs.p;
    if (cs.d != 0) blocks(V)[37 * 2 + 1].d = fp32_to_fp16(cs.d);
    std::vector<float> got(nq * kD, 0.0f), want(nq * kD, 0.0f);
    k().pv_rows_q8_0_i16(P.data(), nq, n, V.data(), n, kD, got.data());
    // Chunk 0 by the int16 path, chunk 1 by the float kernel.
    k().pv_rows_q8_0_i16(P.data(), nq, n, V.data(), 32, kD, want.data());
    k().pv_rows_q8_0(P.data() + 32, nq, n, V.data() + 32 * 2 * sizeof(block_q8_0), 8, kD, want.data());
    for (int i = 0; i < nq * kD; ++i) {
      if (std::isnan(want[i])) {
        ASSERT_TRUE(std::isnan(got[i])) << cs.name << " " << i;
      } else {
        ASSERT_EQ(got[i], want[i]) << cs.name << " " << i;
      }
    }
  }
  // Products below the smallest normal float: 32767 / max would overflow, so the float kernel.
  std::vector<float> tiny(nq * n, 0.0f);
  tiny[5] = std::numeric_limits<float>::denorm_min() * 1024;
  std::vector<float> got(nq * kD, 0.0f), want(nq * kD, 0.0f);
  k().pv_rows_q8_0_i16(tiny.data(), nq, n, V0.data(), 32, kD, got.data());
  k().pv_rows_q8_0(tiny.data(), nq, n, V0.data(), 32, kD, want.data());
  EXPECT_EQ(got, want);
}

TEST_P(PvI16Paths, OnlyTheAvx512TableHasThePath) {
  if (GetParam() == Path::Avx512)
    EXPECT_TRUE(has_path());
  else
    EXPECT_EQ(k().pv_rows_q8_0_i16, nullptr);
}

INSTANTIATE_TEST_SUITE_P(Tables, PvI16Paths, test::all_paths(), test::path_name);

// The front says yes only for head dim 64 on a table with the path.
TEST(PvI16Front, FollowsTheActiveTableAndHeadDim) {
  const bool table = active_kernels().pv_rows_q8_0_i16 != nullptr;
  EXPECT_EQ(has_pv_rows_q8_0_i16(64), table);
  EXPECT_FALSE(has_pv_rows_q8_0_i16(128));
  EXPECT_FALSE(has_pv_rows_q8_0_i16(32));
}

}  // namespace
}  // namespace kvs::kernels
