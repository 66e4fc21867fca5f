// Attention row kernels (qk_rows, pv_rows) and the online-softmax pieces (exp_sub_sum, max_f32) on
// both dispatch paths against the scalar references, plus the dispatching front.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/fp16.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels {
namespace {

using test::Path;

class AttnPaths : public test::TablePaths {};

constexpr int kLd = 40;  // row stride of scores / probabilities (> every n below)

struct Rows {
  std::vector<float> Q, K, V, P;  // [nq][D], [n][D], [n][D], [nq][kLd]
  std::vector<uint16_t> K16, V16;
};

// K and V hold fp16-representable values so the f32 and f16 kernels share one reference.
Rows make_rows(int nq, int n, int D, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  Rows r{std::vector<float>(nq * D), std::vector<float>(n * D), std::vector<float>(n * D),
         std::vector<float>(nq * kLd), std::vector<uint16_t>(n * D), std::vector<uint16_t>(n * D)};
  for (auto& x : r.Q) x = nd(rng);
  for (size_t i = 0; i < r.K.size(); ++i) {
    r.K16[i] = fp32_to_fp16(nd(rng));
    r.K[i] = fp16_to_fp32(r.K16[i]);
    r.V16[i] = fp32_to_fp16(nd(rng));
    r.V[i] = fp16_to_fp32(r.V16[i]);
  }
  for (auto& x : r.P) x = std::abs(nd(rng));
  for (int q = 0; q < nq; ++q)
    if (n > 2) r.P[q * kLd + 1] = 0.0f;  // masked probabilities are exact zeros
  for (int q = 0; q < nq; q += 2)
    if (n > 3) r.P[q * kLd + 2] = 0.0f;  // zero for some queries of a block only
  return r;
}

// n rows of D values as GGUF Q4_0 blocks, as a Q4_0 KV page holds them.
std::vector<uint8_t> q4_0_rows(const std::vector<float>& x, int n, int D) {
  std::vector<uint8_t> out(static_cast<size_t>(n) * (D / QK4_0) * sizeof(block_q4_0));
  quantize_row_q4_0(x.data(), reinterpret_cast<block_q4_0*>(out.data()), static_cast<int64_t>(n) * D);
  return out;
}

// A hand-made Q4_0 row: element j < 16 of a block is byte j's low nibble, 16 + j its high nibble,
// value d * (nibble - 8).
TEST_P(AttnPaths, Q4_0RowsReadNibblesInGgufOrder) {
  constexpr int D = 64;
  block_q4_0 row[2];
  row[0].d = fp32_to_fp16(0.5f);
  row[1].d = fp32_to_fp16(-2.0f);
  for (int j = 0; j < 16; ++j) {
    row[0].qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);  // elements j: j, 16 + j: 15 - j
    row[1].qs[j] = static_cast<uint8_t>(9 | 3 << 4);        // elements 32 + j: 9, 48 + j: 3
  }
  auto want = [&](int d) {
    if (d < 16) return 0.5f * (d - 8);
    if (d < 32) return 0.5f * (15 - (d - 16) - 8);
    return -2.0f * ((d < 48 ? 9 : 3) - 8);
  };
  // Q = e_5 + e_20 + e_40 + e_60: score = 0.5 (5 - 8) + 0.5 (11 - 8) - 2 (1) - 2 (-5) = 8.
  std::vector<float> Q(D, 0.0f);
  Q[5] = Q[20] = Q[40] = Q[60] = 1.0f;
  float s = 0;
  k().qk_rows_q4_0(Q.data(), 1, reinterpret_cast<const uint8_t*>(row), 1, D, 1.0f, &s, 1);
  EXPECT_FLOAT_EQ(s, 8.0f);
  std::vector<float> acc(D, 0.0f);
  const float p = 1.0f;
  k().pv_rows_q4_0(&p, 1, 1, reinterpret_cast<const uint8_t*>(row), 1, D, acc.data());
  for (int d = 0; d < D; ++d) EXPECT_FLOAT_EQ(acc[d], want(d)) << d;
}

// A hand-made Q8_0 row: the kernels read block b's scale for elements [32b, 32b + 32) and the
// int8 value itself (not a re-quantised one).
TEST_P(AttnPaths, QkRowsQ8_0ReadScaleTimesQuant) {
  constexpr int D = 64;
  const test::HandQ8Row row = test::hand_q8_0_row();
  // Q = e_5 + e_40: score = 0.5 * (5 - 16) + (-2) * 3 = -11.5; acc += 1 * row: dims 0..31 (i - 16) / 2, 32.. -6.
  std::vector<float> Q(D, 0.0f);
  Q[5] = 1.0f;
  Q[40] = 1.0f;
  float s = 0;
  k().qk_rows_q8_0(Q.data(), 1, row.bytes(), 1, D, 1.0f, &s, 1);
  EXPECT_FLOAT_EQ(s, -11.5f);
  std::vector<float> acc(D, 0.0f);
  const float p = 1.0f;
  k().pv_rows_q8_0(&p, 1, 1, row.bytes(), 1, D, acc.data());
  for (int d = 0; d < D; ++d) EXPECT_FLOAT_EQ(acc[d], d < 32 ? 0.5f * (d - 16) : -6.0f) << d;
}

TEST_P(AttnPaths, QkRowsMatchReference) {
  // nq 1..8: every block size of the AVX-512 kernels (4 queries per block + 1, 2 or 3 left);
  // D 80 / 96: pieces of 5 and 6 16-value vectors (64 + 16, 64 + 32); 256: four 64-dim pieces.
  for (int D : {4, 8, 12, 16, 24, 64, 80, 96, 128, 256}) {
    for (int n : {1, 3, 4, 7, 32}) {
      for (int nq : {1, 2, 3, 4, 5, 6, 7, 8}) {
        const Rows r = make_rows(nq, n, D, D * 1000 + n * 10 + nq);
        // Entries r >= n of each output row must stay untouched (-1).
        std::vector<float> got(nq * kLd, -1), want(nq * kLd, -1);
        ref::qk_rows_f32(r.Q.data(), nq, r.K.data(), n, D, 0.5f, want.data(), kLd);
        k().qk_rows_f32(r.Q.data(), nq, r.K.data(), n, D, 0.5f, got.data(), kLd);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 2e-6f * D * (1 + std::abs(want[i]))) << "f32 D=" << D << " n=" << n << " i=" << i;
        std::fill(got.begin(), got.end(), -1.0f);
        k().qk_rows_f16(r.Q.data(), nq, r.K16.data(), n, D, 0.5f, got.data(), kLd);
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 2e-6f * D * (1 + std::abs(want[i]))) << "f16 D=" << D << " n=" << n << " i=" << i;
        if (D % QK8_0 == 0) {  // Q8_0 rows: whole blocks; the reference decodes d * q element by element
          const std::vector<uint8_t> K8 = test::q8_0_rows(r.K, n, D);
          std::vector<float> want8(nq * kLd, -1);
          ref::qk_rows_q8_0(r.Q.data(), nq, K8.data(), n, D, 0.5f, want8.data(), kLd);
          std::fill(got.begin(), got.end(), -1.0f);
          k().qk_rows_q8_0(r.Q.data(), nq, K8.data(), n, D, 0.5f, got.data(), kLd);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], want8[i], 2e-6f * D * (1 + std::abs(want8[i]))) << "q8_0 D=" << D << " n=" << n << " i=" << i;
          const std::vector<uint8_t> K4 = q4_0_rows(r.K, n, D);
          ref::qk_rows_q4_0(r.Q.data(), nq, K4.data(), n, D, 0.5f, want8.data(), kLd);
          std::fill(got.begin(), got.end(), -1.0f);
          k().qk_rows_q4_0(r.Q.data(), nq, K4.data(), n, D, 0.5f, got.data(), kLd);
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], want8[i], 2e-6f * D * (1 + std::abs(want8[i]))) << "q4_0 D=" << D << " n=" << n << " i=" << i;
        }
      }
    }
  }
}

TEST_P(AttnPaths, PvRowsMatchReference) {
  // nq 1..8: every block size of the AVX-512 kernels (4 queries per block + 1, 2 or 3 left);
  // D 80 / 96: pieces of 5 and 6 16-value vectors (64 + 16, 64 + 32); 256: four 64-dim pieces.
  for (int D : {4, 8, 12, 16, 24, 64, 80, 96, 128, 256}) {
    for (int n : {1, 3, 4, 7, 32}) {
      for (int nq : {1, 2, 3, 4, 5, 6, 7, 8}) {
        const Rows r = make_rows(nq, n, D, 7 + D * 1000 + n * 10 + nq);
        std::vector<float> want(nq * D, 0.25f), got(nq * D, 0.25f);  // accumulates onto acc
        ref::pv_rows_f32(r.P.data(), nq, kLd, r.V.data(), n, D, want.data());
        k().pv_rows_f32(r.P.data(), nq, kLd, r.V.data(), n, D, got.data());
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 2e-6f * n * (1 + std::abs(want[i]))) << "f32 D=" << D << " n=" << n << " i=" << i;
        std::fill(got.begin(), got.end(), 0.25f);
        k().pv_rows_f16(r.P.data(), nq, kLd, r.V16.data(), n, D, got.data());
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 2e-6f * n * (1 + std::abs(want[i]))) << "f16 D=" << D << " n=" << n << " i=" << i;
        if (D % QK8_0 == 0) {
          const std::vector<uint8_t> V8 = test::q8_0_rows(r.V, n, D);
          std::vector<float> want8(nq * D, 0.25f);
          ref::pv_rows_q8_0(r.P.data(), nq, kLd, V8.data(), n, D, want8.data());
          std::fill(got.begin(), got.end(), 0.25f);
          k().pv_rows_q8_0(r.P.data(), nq, kLd, V8.data(), n, D, got.data());
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], want8[i], 2e-6f * n * (1 + std::abs(want8[i]))) << "q8_0 D=" << D << " n=" << n << " i=" << i;
          const std::vector<uint8_t> V4 = q4_0_rows(r.V, n, D);
          std::fill(want8.begin(), want8.end(), 0.25f);
          ref::pv_rows_q4_0(r.P.data(), nq, kLd, V4.data(), n, D, want8.data());
          std::fill(got.begin(), got.end(), 0.25f);
          k().pv_rows_q4_0(r.P.data(), nq, kLd, V4.data(), n, D, got.data());
          for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], want8[i], 2e-6f * n * (1 + std::abs(want8[i]))) << "q4_0 D=" << D << " n=" << n << " i=" << i;
        }
      }
    }
  }
}

TEST_P(AttnPaths, MaxF32) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(k().max_f32(nullptr, 0), -kInf);
  for (int64_t n : {1, 2, 7, 8, 9, 16, 17, 33, 100, 1000}) {
    auto x = test::randn(n, 11 + n, 10.0f);
    EXPECT_EQ(k().max_f32(x.data(), n), ref::max_f32(x.data(), n)) << n;
    x[n - 1] = 1e30f;  // the maximum in the scalar tail
    EXPECT_EQ(k().max_f32(x.data(), n), 1e30f) << n;
    std::vector<float> masked(n, -kInf);
    EXPECT_EQ(k().max_f32(masked.data(), n), -kInf) << n;
  }
}

TEST_P(AttnPaths, ExpSubSum) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  for (int64_t n : {1, 2, 7, 8, 9, 15, 16, 17, 33, 100, 512, 1001}) {
    auto x = test::randn(n, 13 + n, 5.0f);
    if (n > 3) x[2] = -kInf;  // a masked entry
    const float m = ref::max_f32(x.data(), n);
    auto want = x;
    const float sum_want = ref::exp_sub_sum(want.data(), n, m);
    const float sum = k().exp_sub_sum(x.data(), n, m);
    EXPECT_NEAR(sum, sum_want, 1e-6f * n * sum_want) << n;
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(x[i], want[i], 3e-7f * want[i] + 1e-38f) << n << " " << i;
    if (n > 3) {
      EXPECT_EQ(x[2], 0.0f);
    }
  }
  // Exponents from 0 down to -100 (underflow to 0 below about -87.3).
  std::vector<float> ramp(101);
  for (int i = 0; i < 101; ++i) ramp[i] = -static_cast<float>(i);
  auto want = ramp;
  ref::exp_sub_sum(want.data(), 101, 0.0f);
  k().exp_sub_sum(ramp.data(), 101, 0.0f);
  for (int i = 0; i < 101; ++i) ASSERT_NEAR(ramp[i], want[i], 3e-7f * want[i] + 1.2e-38f) << i;
}

INSTANTIATE_TEST_SUITE_P(Kernels, AttnPaths, test::all_paths(), test::path_name);

// The public front dispatches to the active table (same results as calling it directly).
TEST(AttnFront, DispatchesToActiveTable) {
  const Rows r = make_rows(3, 7, 64, 99);
  std::vector<float> a(3 * kLd, -1), b(3 * kLd, -1);
  qk_rows_f16(r.Q.data(), 3, r.K16.data(), 7, 64, 0.125f, a.data(), kLd);
  active_kernels().qk_rows_f16(r.Q.data(), 3, r.K16.data(), 7, 64, 0.125f, b.data(), kLd);
  EXPECT_EQ(a, b);
  std::vector<float> acc_a(3 * 64, 0.0f), acc_b(3 * 64, 0.0f);
  pv_rows_f32(r.P.data(), 3, kLd, r.V.data(), 7, 64, acc_a.data());
  active_kernels().pv_rows_f32(r.P.data(), 3, kLd, r.V.data(), 7, 64, acc_b.data());
  EXPECT_EQ(acc_a, acc_b);
  auto x = test::randn(37, 5), y = x;
  EXPECT_EQ(exp_sub_sum(x.data(), 37, 1.0f), active_kernels().exp_sub_sum(y.data(), 37, 1.0f));
  EXPECT_EQ(x, y);
  EXPECT_EQ(max_f32(x.data(), 37), active_kernels().max_f32(x.data(), 37));
}

}  // namespace
}  // namespace kvs::kernels
