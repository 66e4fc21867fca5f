// Float vector ops on both dispatch paths against the scalar reference, odd lengths included.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/fp16.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels {
namespace {

using test::Path;

const int64_t kLengths[] = {1, 2, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 257, 576, 1000, 4099};

std::vector<uint16_t> to_f16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = fp32_to_fp16(v[i]);
  return h;
}

class OpsPaths : public test::TablePaths {};

TEST_P(OpsPaths, Dots) {
  for (int64_t n : kLengths) {
    const auto a = test::randn(n, 1 + n), b = test::randn(n, 2 + n);
    const auto bh = to_f16(b);
    double abs = 0;
    for (int64_t i = 0; i < n; ++i) abs += std::fabs(double(a[i]) * b[i]);
    EXPECT_NEAR(k().dot_f32(a.data(), b.data(), n), ref::dot_f32(a.data(), b.data(), n), 1e-5 * abs) << n;
    EXPECT_NEAR(k().dot_f32_f16(a.data(), bh.data(), n), ref::dot_f32_f16(a.data(), bh.data(), n), 1e-5 * abs)
        << n;
  }
}

TEST_P(OpsPaths, AxpyScaleAdd) {
  for (int64_t n : kLengths) {
    const auto x = test::randn(n, 3 + n), y0 = test::randn(n, 4 + n);
    const auto xh = to_f16(x);
    auto y = y0, yr = y0;
    k().axpy_f32(0.37f, x.data(), y.data(), n);
    ref::axpy_f32(0.37f, x.data(), yr.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], yr[i], 1e-6f * (1 + std::fabs(yr[i]))) << n;
    y = y0, yr = y0;
    k().axpy_f16(-1.5f, xh.data(), y.data(), n);
    ref::axpy_f16(-1.5f, xh.data(), yr.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[i], yr[i], 1e-6f * (1 + std::fabs(yr[i]))) << n;
    y = y0, yr = y0;
    k().scale_f32(y.data(), 0.125f, n);
    ref::scale_f32(yr.data(), 0.125f, n);
    ASSERT_EQ(y, yr);
    y = y0, yr = y0;
    k().add_f32(y.data(), x.data(), n);
    ref::add_f32(yr.data(), x.data(), n);
    ASSERT_EQ(y, yr);
  }
}

TEST_P(OpsPaths, RmsNorm) {
  for (int64_t n : kLengths) {
    const auto x = test::randn(n, 5 + n, 3.0f), w = test::randn(n, 6 + n);
    std::vector<float> got(n), want(n);
    k().rmsnorm(x.data(), w.data(), got.data(), n, 1e-5f);
    ref::rmsnorm(x.data(), w.data(), want.data(), n, 1e-5f);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], want[i], 2e-6f * (1 + std::fabs(want[i]))) << n;
    auto inplace = x;  // out may alias x
    k().rmsnorm(inplace.data(), w.data(), inplace.data(), n, 1e-5f);
    ASSERT_EQ(inplace, got);
  }
}

TEST_P(OpsPaths, Softmax) {
  for (int64_t n : kLengths) {
    auto x = test::randn(n, 7 + n, 5.0f);
    if (n > 3) x[2] = -std::numeric_limits<float>::infinity();  // a masked entry
    auto want = x;
    const float lse_want = ref::softmax(want.data(), n);
    const float lse = k().softmax(x.data(), n);
    EXPECT_NEAR(lse, lse_want, 1e-5f * (1 + std::fabs(lse_want))) << n;
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(x[i], want[i], 1e-6f + 2e-6f * want[i]) << n << " " << i;
      sum += x[i];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5) << n;
    if (n > 3) {
      EXPECT_EQ(x[2], 0.0f);
    }
  }
}

TEST_P(OpsPaths, SoftmaxExtremes) {
  std::vector<float> masked(37, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(k().softmax(masked.data(), 37), -std::numeric_limits<float>::infinity());
  for (float v : masked) EXPECT_EQ(v, 0.0f);
  std::vector<float> big = {1e30f, 0.0f, -1e30f, 1e30f, 3.0f, 88.0f, -88.0f, 1e30f, 5.0f};
  auto want = big;
  const float lse_want = ref::softmax(want.data(), 9);
  EXPECT_NEAR(k().softmax(big.data(), 9), lse_want, 1e24f);
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(big[i], want[i], 1e-6f);
  // Wide range of exponents: x - max from 0 down to -100.
  std::vector<float> ramp(101);
  for (int i = 0; i < 101; ++i) ramp[i] = -static_cast<float>(i);
  auto rr = ramp;
  ref::softmax(rr.data(), 101);
  k().softmax(ramp.data(), 101);
  for (int i = 0; i < 101; ++i) ASSERT_NEAR(ramp[i], rr[i], 2e-7f * rr[i] + 1e-38f) << i;
}

// argmax_f32 against a brute force written here: the first index of the largest non-NaN value, 0
// when every value is NaN. Ties across lanes and in the tail, NaNs at index 0 and next to the
// maximum, infinities.
int64_t first_max(const std::vector<float>& x) {
  int64_t best = -1;
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isnan(x[i]) && (best < 0 || x[i] > x[static_cast<size_t>(best)])) best = static_cast<int64_t>(i);
  return best < 0 ? 0 : best;
}

TEST_P(OpsPaths, Argmax) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t n : kLengths) {
    auto x = test::randn(n, 30 + n);
    EXPECT_EQ(k().argmax_f32(x.data(), n), first_max(x)) << n;
    // The maximum repeated: in a later lane, a later 16-block and the tail; the first one wins.
    const int64_t at = first_max(x);
    // (16, 32, 48 and 64 apart: other accumulators and later passes of the 4-accumulator AVX-512 loop.)
    for (int64_t j : {at + 5, at + 16, at + 17, at + 32, at + 48, at + 64, at + 67, n - 1})
      if (j < n) x[static_cast<size_t>(j)] = x[static_cast<size_t>(at)];
    ASSERT_EQ(k().argmax_f32(x.data(), n), at) << n;
    // An equal value earlier, in another accumulator or an earlier pass, wins instead.
    for (int64_t back : {int64_t{17}, int64_t{64}, int64_t{100}})
      if (at - back >= 0) {
        auto y = x;
        y[static_cast<size_t>(at - back)] = x[static_cast<size_t>(at)];
        ASSERT_EQ(k().argmax_f32(y.data(), n), at - back) << n << " " << back;
      }
    x[static_cast<size_t>(n - 1)] = 100.0f;  // a larger one in the last element
    ASSERT_EQ(k().argmax_f32(x.data(), n), n - 1) << n;
    // NaNs are never chosen, wherever they are.
    x[0] = nan;
    if (n > 3) x[static_cast<size_t>(n / 2)] = nan;
    x[static_cast<size_t>(n - 1)] = nan;
    ASSERT_EQ(k().argmax_f32(x.data(), n), first_max(x)) << n;
    if (n > 3) {
      x[2] = inf;
      ASSERT_EQ(k().argmax_f32(x.data(), n), 2) << n;
    }
    std::vector<float> ninf(static_cast<size_t>(n), -inf), nans(static_cast<size_t>(n), nan);
    ASSERT_EQ(k().argmax_f32(ninf.data(), n), 0) << n;
    ASSERT_EQ(k().argmax_f32(nans.data(), n), 0) << n;
    if (n > 1) {
      nans[static_cast<size_t>(n - 1)] = -inf;  // the only non-NaN value, -inf, in the last place
      ASSERT_EQ(k().argmax_f32(nans.data(), n), n - 1) << n;
      nans[static_cast<size_t>(n / 2)] = -3.0f;
      ASSERT_EQ(k().argmax_f32(nans.data(), n), n / 2) << n;
    }
  }
}

TEST_P(OpsPaths, SiluMul) {
  for (int64_t n : kLengths) {
    auto g = test::randn(n, 8 + n, 4.0f);
    if (n > 4) {
      g[0] = -100.0f;
      g[1] = 100.0f;
      g[3] = 0.0f;
    }
    const auto up = test::randn(n, 9 + n);
    auto want = g;
    ref::silu_mul(want.data(), up.data(), n);
    k().silu_mul(g.data(), up.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(g[i], want[i], 1e-6f * (1 + std::fabs(want[i]))) << n << " " << i;
  }
}

TEST_P(OpsPaths, Rope) {
  struct Case {
    int n_heads, head_dim, rot_dim;
  };
  for (const Case c : {Case{1, 2, 2}, Case{3, 64, 64}, Case{2, 80, 32}, Case{4, 128, 128},
                       Case{5, 96, 96}, Case{2, 64, 6}, Case{3, 72, 40}}) {
    std::vector<float> cs(c.rot_dim);
    for (int i = 0; i < c.rot_dim / 2; ++i) {
      const double theta = 17.0 * std::pow(10000.0, -2.0 * i / c.rot_dim);
      cs[2 * i] = static_cast<float>(std::cos(theta));
      cs[2 * i + 1] = static_cast<float>(std::sin(theta));
    }
    for (RopeStyle style : {RopeStyle::Interleaved, RopeStyle::RotateHalf}) {
      auto x = test::randn(int64_t{c.n_heads} * c.head_dim, c.head_dim + c.rot_dim);
      auto want = x;
      ref::rope(want.data(), c.n_heads, c.head_dim, c.rot_dim, cs.data(), style);
      k().rope(x.data(), c.n_heads, c.head_dim, c.rot_dim, cs.data(), style);
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_NEAR(x[i], want[i], 1e-6f * (1 + std::fabs(want[i])))
            << c.head_dim << "/" << c.rot_dim << " style " << int(style) << " i=" << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, OpsPaths, test::all_paths(), test::path_name);

TEST(OpsRef, RopeStylesPairTheDocumentedDims) {
  // One head of 8, rot_dim 4: Interleaved rotates (0,1),(2,3); RotateHalf rotates (0,2),(1,3).
  const float cs[4] = {0.0f, 1.0f, 0.0f, 1.0f};  // 90 degrees for both frequencies
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8}, b[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  rope(a, 1, 8, 4, cs, RopeStyle::Interleaved);
  rope(b, 1, 8, 4, cs, RopeStyle::RotateHalf);
  const float want_a[8] = {-2, 1, -4, 3, 5, 6, 7, 8};
  const float want_b[8] = {-3, -4, 1, 2, 5, 6, 7, 8};
  for (int i = 0; i < 8; ++i) {
    EXPECT_FLOAT_EQ(a[i], want_a[i]) << i;
    EXPECT_FLOAT_EQ(b[i], want_b[i]) << i;
  }
}

TEST(OpsRef, SoftmaxReturnsLogSumExp) {
  float x[3] = {1.0f, 2.0f, 3.0f};
  const float lse = softmax(x, 3);
  EXPECT_NEAR(lse, std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)), 1e-6);
  EXPECT_NEAR(x[2], std::exp(3.0 - lse), 1e-6);
}

}  // namespace
}  // namespace kvs::kernels
