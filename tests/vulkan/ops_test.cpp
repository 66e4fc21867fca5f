// The first shaders against the CPU's scalar reference (kernels/ref) at real shapes: the decode
// mat-vec of every weight type it takes (rows x cols of Qwen2.5-0.5B's FFN, Llama-3.2-1B's FFN,
// odd row counts, more rows than one dispatch dimension holds), RMSNorm, both RoPE styles at head
// dims 64 and 128 over several heads and tokens, SiLU-mul, add, softmax and argmax.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "core/dtype.h"
#include "core/error.h"
#include "core/fp16.h"
#include "kernels/ops.h"
#include "kernels/quant_blocks.h"
#include "kernels/ref/ref.h"
#include "vulkan/ops.h"
#include "vulkan_test_util.h"

namespace kvs::vulkan::test {
namespace {

Ops& ops() {
  static Ops o(ctx());
  return o;
}

// Weights of type t, rows x cols, as GGUF bytes (quantised from uniform floats), and their values.
struct Weights {
  std::vector<uint8_t> bytes;
  std::vector<float> values;  // ref::dequantize_row of the bytes
  size_t row_bytes = 0;
};

Weights make_weights(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  const std::vector<float> f = random_floats(size_t(rows * cols), seed);
  Weights w;
  w.row_bytes = dtype_row_bytes(t, cols);
  w.bytes.resize(w.row_bytes * rows);
  w.values.resize(f.size());
  for (int64_t r = 0; r < rows; ++r) {
    kernels::ref::quantize_row(t, f.data() + r * cols, w.bytes.data() + r * w.row_bytes, cols);
    kernels::ref::dequantize_row(t, w.bytes.data() + r * w.row_bytes, w.values.data() + r * cols, cols);
  }
  return w;
}

using MatVecCase = std::tuple<DType, int64_t, int64_t>;

class VulkanMatVec : public testing::TestWithParam<MatVecCase> {};

TEST_P(VulkanMatVec, MatchesReference) {
  KVS_NEED_VULKAN();
  const auto [t, rows, cols] = GetParam();
  const Weights w = make_weights(t, rows, cols, uint32_t(rows * 31 + cols));
  const std::vector<float> x = random_floats(size_t(cols), 99, -2.0f, 2.0f);
  Buffer dw = to_device(w.bytes), dx = to_device(x), dy = mem().allocate(rows * 4);
  ops().mat_vec(t, dw.view(), rows, cols, dx.view(), dy.view());
  const std::vector<float> y = to_host<float>(dy, size_t(rows));

  // The reference, written here: the dequantised weights' dot with x in double.
  // Tolerance: f32 accumulation over cols / 128 terms per lane and a 7-step tree, relative to
  // sum |w x|.
  // Against the CPU's vec_dot (which first rounds x to Q8_0 blocks for Q8_0/Q4_0 weights): within
  // the activation's rounding, sum_j |w_j| * d_x(block of j) / 2, d_x = max |x| over the block / 127.
  std::vector<uint8_t> act(kernels::ref::act_row_bytes(t, cols));
  kernels::ref::prepare_act(t, x.data(), act.data(), cols);
  const bool quantised_act = t == DType::Q8_0 || t == DType::Q4_0;
  int64_t bad = 0, bad_cpu = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* wr = w.values.data() + r * cols;
    double exact = 0, mag = 0, act_bound = 0;
    for (int64_t c = 0; c < cols; ++c) {
      exact += double(wr[c]) * x[c];
      mag += std::fabs(double(wr[c]) * x[c]);
    }
    if (quantised_act) {
      for (int64_t b = 0; b < cols / 32; ++b) {
        double amax = 0, wsum = 0;
        for (int j = 0; j < 32; ++j) {
          amax = std::fmax(amax, std::fabs(x[b * 32 + j]));
          wsum += std::fabs(wr[b * 32 + j]);
        }
        act_bound += wsum * (amax / 127.0) / 2.0;
      }
    }
    const double tol = 1e-5 * mag + 1e-6;
    if (std::fabs(y[r] - exact) > tol && bad++ < 5)
      ADD_FAILURE() << dtype_name(t) << " row " << r << ": " << y[r] << " vs " << exact << " (tol " << tol << ")";
    const double cpu = kernels::ref::vec_dot(t, w.bytes.data() + r * w.row_bytes, act.data(), cols);
    const double tol_cpu = act_bound + 2 * tol;
    if (std::fabs(y[r] - cpu) > tol_cpu && bad_cpu++ < 5)
      ADD_FAILURE() << dtype_name(t) << " row " << r << ": " << y[r] << " vs the CPU's " << cpu << " (bound " << tol_cpu
                    << ")";
  }
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(bad_cpu, 0);
}

std::string mat_vec_name(const testing::TestParamInfo<MatVecCase>& info) {
  const auto [t, rows, cols] = info.param;
  return std::string(dtype_name(t)) + "_" + std::to_string(rows) + "x" + std::to_string(cols);
}

INSTANTIATE_TEST_SUITE_P(Shapes, VulkanMatVec,
                         testing::Combine(testing::Values(DType::F32, DType::F16, DType::Q8_0, DType::Q4_0),
                                          testing::Values(int64_t{896}, int64_t{1001}),
                                          testing::Values(int64_t{4864})),
                         mat_vec_name);
INSTANTIATE_TEST_SUITE_P(Large, VulkanMatVec,
                         testing::Combine(testing::Values(DType::F32, DType::F16, DType::Q8_0, DType::Q4_0),
                                          testing::Values(int64_t{2048}), testing::Values(int64_t{8192})),
                         mat_vec_name);
// 70,001 rows: more workgroups than one dispatch dimension takes (65,535), so the rows wrap over y.
INSTANTIATE_TEST_SUITE_P(ManyRows, VulkanMatVec,
                         testing::Combine(testing::Values(DType::F16), testing::Values(int64_t{70001}),
                                          testing::Values(int64_t{64})),
                         mat_vec_name);

TEST(VulkanMatVecErrors, RefusedShapesAndTypesNameThem) {
  KVS_NEED_VULKAN();
  Buffer b = mem().allocate(1 << 16);
  auto msg = [&](auto fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(msg([&] { ops().mat_vec(DType::Q6_K, b.view(), 4, 256, b.view(), b.view()); }).find("q6_k has no shader"),
            std::string::npos);
  EXPECT_NE(msg([&] { ops().mat_vec(DType::Q8_0, b.view(), 4, 40, b.view(), b.view()); }).find("not a multiple"),
            std::string::npos);
  EXPECT_NE(msg([&] { ops().mat_vec(DType::F32, b.view(), 4096, 4096, b.view(), b.view()); }).find("the weights holds"),
            std::string::npos);
}

TEST(VulkanOps, RmsNorm) {
  KVS_NEED_VULKAN();
  for (const int64_t n : {int64_t{896}, int64_t{4096}, int64_t{1001}}) {
    const int64_t rows = 7;
    const std::vector<float> x = random_floats(size_t(rows * n), uint32_t(n), -3.0f, 3.0f);
    const std::vector<float> w = random_floats(size_t(n), uint32_t(n) + 1, 0.5f, 1.5f);
    Buffer dx = to_device(x), dw = to_device(w), dout = mem().allocate(rows * n * 4);
    ops().rms_norm(dx.view(), dw.view(), dout.view(), rows, n, 1e-6f);
    ops().rms_norm(dx.view(), dw.view(), dx.view(), rows, n, 1e-6f);  // in place
    const auto out = to_host<float>(dout, size_t(rows * n)), inplace = to_host<float>(dx, size_t(rows * n));
    std::vector<float> ref(static_cast<size_t>(n));
    for (int64_t r = 0; r < rows; ++r) {
      kernels::ref::rmsnorm(x.data() + r * n, w.data(), ref.data(), n, 1e-6f);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(out[r * n + i], ref[i], 1e-5 * std::fabs(ref[i]) + 1e-6) << "n " << n << " row " << r << " i " << i;
        ASSERT_EQ(inplace[r * n + i], out[r * n + i]);
      }
    }
  }
}

TEST(VulkanOps, RopeBothStyles) {
  KVS_NEED_VULKAN();
  struct Case {
    int n_heads, head_dim, rot_dim;
  };
  // Qwen2.5-0.5B's 14 query heads of 64, Llama-3's 32 of 128, and a partial rotation (Phi-3 style
  // rot_dim < head_dim).
  for (const Case c : {Case{14, 64, 64}, Case{32, 128, 128}, Case{5, 96, 32}}) {
    for (const auto style : {kernels::RopeStyle::Interleaved, kernels::RopeStyle::RotateHalf}) {
      const int64_t n_tok = 3;
      const int64_t per_tok = int64_t(c.n_heads) * c.head_dim;
      const std::vector<float> x = random_floats(size_t(n_tok * per_tok), uint32_t(c.head_dim + int(style)), -2, 2);
      std::vector<float> cs(size_t(n_tok * c.rot_dim));
      for (int64_t t = 0; t < n_tok; ++t)
        for (int i = 0; i < c.rot_dim / 2; ++i) {
          const double theta = double(1000 + 37 * t) * std::pow(10000.0, -2.0 * i / c.rot_dim);
          cs[t * c.rot_dim + 2 * i] = float(std::cos(theta));
          cs[t * c.rot_dim + 2 * i + 1] = float(std::sin(theta));
        }
      Buffer dx = to_device(x), dcs = to_device(cs);
      ops().rope(dx.view(), n_tok, c.n_heads, c.head_dim, c.rot_dim, dcs.view(),
                 style == kernels::RopeStyle::Interleaved ? Rope::Interleaved : Rope::RotateHalf);
      const auto got = to_host<float>(dx, x.size());
      std::vector<float> ref = x;
      for (int64_t t = 0; t < n_tok; ++t)
        kernels::ref::rope(ref.data() + t * per_tok, c.n_heads, c.head_dim, c.rot_dim, cs.data() + t * c.rot_dim, style);
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(got[i], ref[i], 1e-5 * (std::fabs(ref[i]) + 1)) << "head_dim " << c.head_dim << " i " << i;
    }
  }
}

TEST(VulkanOps, SiluMulAndAdd) {
  KVS_NEED_VULKAN();
  const int64_t n = 4864 * 3 + 1;
  const std::vector<float> g = random_floats(size_t(n), 1, -8, 8), u = random_floats(size_t(n), 2, -2, 2);
  Buffer dg = to_device(g), du = to_device(u);
  ops().silu_mul(dg.view(), du.view(), n);
  std::vector<float> ref = g;
  kernels::ref::silu_mul(ref.data(), u.data(), n);
  const auto got = to_host<float>(dg, size_t(n));
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[i], ref[i], 1e-5 * std::fabs(ref[i]) + 1e-6) << i;

  ops().add(dg.view(), du.view(), n);
  kernels::ref::add_f32(ref.data(), u.data(), n);
  const auto sum = to_host<float>(dg, size_t(n));
  for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(sum[i], ref[i], 1e-5 * std::fabs(ref[i]) + 1e-6) << i;
}

TEST(VulkanOps, SoftMaxRowsWithLse) {
  KVS_NEED_VULKAN();
  const int64_t rows = 5, n = 1000;
  std::vector<float> x = random_floats(size_t(rows * n), 3, -20, 20);
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) x[3 * n + i] = ninf;      // a fully masked row
  for (int64_t i = 0; i < n; i += 2) x[1 * n + i] = ninf;   // half masked
  Buffer dx = to_device(x), dl = mem().allocate(rows * 4);
  ops().soft_max(dx.view(), dl.view(), rows, n);
  const auto got = to_host<float>(dx, x.size()), lse = to_host<float>(dl, size_t(rows));
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> ref(x.begin() + r * n, x.begin() + (r + 1) * n);
    const float ref_lse = kernels::ref::softmax(ref.data(), n);
    if (std::isinf(ref_lse)) {
      EXPECT_EQ(lse[r], ref_lse);
    } else {
      EXPECT_NEAR(lse[r], ref_lse, 1e-5 * std::fabs(ref_lse) + 1e-6) << r;
    }
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(got[r * n + i], ref[i], 1e-5 * ref[i] + 1e-7) << r << " " << i;
  }
}

TEST(VulkanOps, ArgmaxFirstOfTiesNeverNan) {
  KVS_NEED_VULKAN();
  const int64_t n = 151936;  // Qwen2.5's vocabulary
  std::vector<float> x = random_floats(size_t(n), 4, -10, 10);
  x[120000] = 50.0f;
  x[90001] = 50.0f;  // a tie: the first wins
  x[5] = std::numeric_limits<float>::quiet_NaN();
  x[7] = std::numeric_limits<float>::infinity() * 0.0f;  // NaN as well
  Buffer dx = to_device(x), di = mem().allocate(4);
  ops().argmax(dx.view(), n, di.view());
  EXPECT_EQ(to_host<uint32_t>(di, 1)[0], uint32_t(kernels::argmax_f32(x.data(), n)));
  EXPECT_EQ(to_host<uint32_t>(di, 1)[0], 90001u);

  std::vector<float> nans(1000, std::numeric_limits<float>::quiet_NaN());
  nans[999] = -std::numeric_limits<float>::infinity();
  Buffer dn = to_device(nans);
  ops().argmax(dn.view(), 1000, di.view());
  EXPECT_EQ(to_host<uint32_t>(di, 1)[0], 999u);
  ops().argmax(dn.view(), 999, di.view());  // only NaNs: 0
  EXPECT_EQ(to_host<uint32_t>(di, 1)[0], 0u);
}

}  // namespace
}  // namespace kvs::vulkan::test
