// Backend ops other than the matmuls, each against a scalar reference written here (double
// accumulation), at the shapes the models run: head_dim 64 and 128, several heads, one row (the
// calling thread) and many rows (split across the pool).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/rope_cos_sin.h"
#include "backends.h"
#include "core/error.h"
#include "core/fp16.h"
#include "kernels/quant.h"
#include "kernels/ref/ref.h"

namespace kvs::backend::test {
namespace {

class BackendOps : public BackendTest {};
KVS_BACKEND_SUITE(BackendOps);

// RMSNorm of groups of g elements, in double.
std::vector<double> rms_ref(const std::vector<float>& x, const std::vector<float>& w, int64_t g, float eps) {
  std::vector<double> out(x.size());
  for (size_t b = 0; b < x.size(); b += static_cast<size_t>(g)) {
    double ss = 0;
    for (int64_t i = 0; i < g; ++i) ss += static_cast<double>(x[b + i]) * x[b + i];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(g) + eps);
    for (int64_t i = 0; i < g; ++i) out[b + i] = x[b + i] * inv * w[static_cast<size_t>(i)];
  }
  return out;
}

TEST_P(BackendOps, RmsNormRowsAndHeads) {
  for (int rows : {1, 9}) {
    for (int64_t D : {64, 128}) {
      const int heads = 4;
      const int64_t E = heads * D;
      std::vector<float> x = randn(static_cast<size_t>(rows * E), 1, 2.0f), out(x.size());
      // per row (the width's norm weights)
      std::vector<float> wr = randn(static_cast<size_t>(E), 2);
      Tensor o = host(out, rows, E);
      be().rms_norm(host(x, rows, E), f32_view(wr, E), o, 1e-5f);
      EXPECT_LT(max_rel_err(out, rms_ref(x, wr, E, 1e-5f)), 2e-6) << rows << " rows, E " << E;
      // per head (a weight of head_dim elements), in place
      std::vector<float> wh = randn(static_cast<size_t>(D), 3), y = x;
      Tensor t = host(y, rows, E);
      be().rms_norm(t, f32_view(wh, D), t, 1e-6f);
      EXPECT_LT(max_rel_err(y, rms_ref(x, wh, D, 1e-6f)), 2e-6) << rows << " rows, D " << D;
    }
  }
}

TEST_P(BackendOps, LayerNorm) {
  const int rows = 5;
  const int64_t E = 192;
  std::vector<float> x = randn(static_cast<size_t>(rows * E), 4, 3.0f), w = randn(E, 5), b = randn(E, 6), out(x.size());
  for (int i = 0; i < rows * E; ++i) x[static_cast<size_t>(i)] += 1.5f;  // a mean to remove
  Tensor o = host(out, rows, E);
  be().layer_norm(host(x, rows, E), f32_view(w, E), f32_view(b, E), o, 1e-5f);
  std::vector<double> ref(x.size());
  for (int t = 0; t < rows; ++t) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < E; ++i) m += x[static_cast<size_t>(t * E + i)];
    m /= E;
    for (int64_t i = 0; i < E; ++i) v += std::pow(x[static_cast<size_t>(t * E + i)] - m, 2);
    v /= E;
    for (int64_t i = 0; i < E; ++i)
      ref[static_cast<size_t>(t * E + i)] = (x[static_cast<size_t>(t * E + i)] - m) / std::sqrt(v + 1e-5) * w[i] + b[i];
  }
  EXPECT_LT(max_rel_err(out, ref), 1e-5);
}

TEST_P(BackendOps, AddBiasScaleAndFusedNorm) {
  const int rows = 7;
  const int64_t E = 320;
  std::vector<float> y = randn(static_cast<size_t>(rows * E), 7), x = randn(y.size(), 8), b = randn(E, 9),
                     w = randn(E, 10);
  // add
  std::vector<float> s = y;
  Tensor ts = host(s, rows, E);
  be().add(ts, host(x, rows, E));
  std::vector<double> ref(y.size());
  for (size_t i = 0; i < y.size(); ++i) ref[i] = static_cast<double>(y[i]) + x[i];
  EXPECT_LT(max_rel_err(s, ref), 1e-7);
  // add_bias
  std::vector<float> yb = y;
  Tensor tb = host(yb, rows, E);
  be().add_bias(tb, f32_view(b, E));
  for (size_t i = 0; i < y.size(); ++i) ref[i] = static_cast<double>(y[i]) + b[i % static_cast<size_t>(E)];
  EXPECT_LT(max_rel_err(yb, ref), 1e-7);
  // scale
  std::vector<float> sc = y;
  Tensor tsc = host(sc, rows, E);
  be().scale(tsc, 0.37f);
  for (size_t i = 0; i < y.size(); ++i) ref[i] = static_cast<double>(y[i]) * 0.37f;
  EXPECT_LT(max_rel_err(sc, ref), 1e-7);
  // add_then_rms_norm: the sum, and its norm
  std::vector<float> sum = y, out(y.size());
  Tensor tsum = host(sum, rows, E), tout = host(out, rows, E);
  be().add_then_rms_norm(tsum, host(x, rows, E), f32_view(w, E), tout, 1e-5f);
  std::vector<float> sum_ref(y.size());
  for (size_t i = 0; i < y.size(); ++i) sum_ref[i] = y[i] + x[i];
  std::vector<double> sum_ref_d(sum_ref.begin(), sum_ref.end());
  EXPECT_LT(max_rel_err(sum, sum_ref_d), 1e-7);
  EXPECT_LT(max_rel_err(out, rms_ref(sum_ref, w, E, 1e-5f)), 2e-6);
}

TEST_P(BackendOps, SoftcapSiluAndGelu) {
  const int rows = 6;
  const int64_t F = 384;
  std::vector<float> g = randn(static_cast<size_t>(rows * F), 11, 4.0f), u = randn(g.size(), 12);
  g[0] = -12.0f;  // outside (-10, 10): the F16 GELU's exact branches
  g[1] = 11.0f;
  std::vector<double> ref(g.size());
  // softcap
  std::vector<float> c = g;
  Tensor tc = host(c, rows, F);
  be().softcap(tc, 3.0f);
  for (size_t i = 0; i < g.size(); ++i) ref[i] = 3.0 * std::tanh(g[i] / 3.0);
  EXPECT_LT(max_rel_err(c, ref), 1e-6);
  // silu(g) * u
  std::vector<float> s = g;
  Tensor ts = host(s, rows, F);
  be().silu_mul(ts, host(u, rows, F));
  for (size_t i = 0; i < g.size(); ++i) ref[i] = g[i] / (1.0 + std::exp(-static_cast<double>(g[i]))) * u[i];
  EXPECT_LT(max_rel_err(s, ref), 1e-5);
  // gelu_tanh(g) * u, in F32 and through F16 as ggml's table
  auto gelu = [](double v) { return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))); };
  std::vector<float> ge = g;
  Tensor tg = host(ge, rows, F);
  be().gelu_tanh_mul(tg, host(u, rows, F), false);
  for (size_t i = 0; i < g.size(); ++i) ref[i] = gelu(g[i]) * u[i];
  EXPECT_LT(max_rel_err(ge, ref), 1e-5);
  std::vector<float> gh = g;
  Tensor th = host(gh, rows, F);
  be().gelu_tanh_mul(th, host(u, rows, F), true);
  for (size_t i = 0; i < g.size(); ++i) {
    const double v = g[i];
    const double r = v <= -10 ? 0.0 : v >= 10 ? v : fp16_to_fp32(fp32_to_fp16(static_cast<float>(gelu(fp16_to_fp32(fp32_to_fp16(g[i]))))));
    ref[i] = r * u[i];
  }
  // the F16 rounding of an F32-computed GELU: equal up to a tie at the F16 rounding step
  EXPECT_LT(max_rel_err(gh, ref), 2e-3);
  EXPECT_EQ(gh[0], 0.0f);
  EXPECT_FLOAT_EQ(gh[1], 11.0f * u[1]);
}

TEST_P(BackendOps, CopyGatherAndToHost) {
  const int rows = 5;
  const int64_t E = 64;
  std::vector<float> src = randn(static_cast<size_t>(rows * E), 13), dst(static_cast<size_t>(rows * (E + 8)), -1.0f);
  Tensor d = host(dst, rows, E, E + 8);  // strided destination
  be().copy(host(src, rows, E), d);
  for (int t = 0; t < rows; ++t)
    for (int64_t i = 0; i < E + 8; ++i)
      EXPECT_EQ(dst[static_cast<size_t>(t * (E + 8) + i)], i < E ? src[static_cast<size_t>(t * E + i)] : -1.0f);
  const std::vector<int> pick = {4, 0, 2};
  std::vector<float> g(3 * E);
  Tensor tg = host(g, 3, E);
  be().gather_rows(host(src, rows, E), pick, tg);
  for (size_t r = 0; r < pick.size(); ++r)
    for (int64_t i = 0; i < E; ++i) EXPECT_EQ(g[r * E + i], src[static_cast<size_t>(pick[r] * E + i)]);
  std::vector<float> back(src.size());
  be().to_host(host(src, rows, E), back.data());
  EXPECT_EQ(back, src);
}

TEST_P(BackendOps, RopeCosSinTable) {
  // Llama 3's inverse frequencies: base^(-2i/R) divided by rope_freqs factors (folded at load)
  const int R = 64;
  std::vector<float> f(R / 2);
  for (int i = 0; i < R / 2; ++i) f[i] = static_cast<float>(std::pow(500000.0, -2.0 * i / R) / (i < 8 ? 1.0 : 8.0));
  const std::vector<int32_t> pos = {0, 1, 17, 4095, 131000};
  std::vector<float> out(pos.size() * R);
  Tensor o = host(out, static_cast<int64_t>(pos.size()), R);
  be().rope_cos_sin(f, pos.data(), o);
  for (size_t t = 0; t < pos.size(); ++t)
    for (int i = 0; i < R / 2; ++i) {
      const double a = static_cast<double>(pos[t]) * f[i];
      EXPECT_NEAR(out[t * R + 2 * i], std::cos(a), 1e-7);
      EXPECT_NEAR(out[t * R + 2 * i + 1], std::sin(a), 1e-7);
    }
  // the host table the presses use is the same function
  std::vector<float> h(out.size());
  rope_cos_sin_host(f, pos.data(), static_cast<int>(pos.size()), h.data());
  EXPECT_EQ(h, out);
}

TEST_P(BackendOps, RopeBothStylesPartialAndShared) {
  for (kernels::RopeStyle style : {kernels::RopeStyle::Interleaved, kernels::RopeStyle::RotateHalf}) {
    for (int D : {64, 128}) {
      const int heads = 3, rows = 4;
      for (int rot : {D, D / 2}) {
        std::vector<float> x = randn(static_cast<size_t>(rows * heads * D), 14);
        std::vector<float> cs(static_cast<size_t>(rows * rot));
        for (int t = 0; t < rows; ++t)
          for (int i = 0; i < rot / 2; ++i) {
            const double a = (t + 3) * std::pow(10000.0, -2.0 * i / rot);
            cs[static_cast<size_t>(t * rot + 2 * i)] = static_cast<float>(std::cos(a));
            cs[static_cast<size_t>(t * rot + 2 * i + 1)] = static_cast<float>(std::sin(a));
          }
        for (bool shared : {false, true}) {
          std::vector<float> y = x;
          Tensor ty = host(y, rows, heads * D);
          be().rope(ty, heads, D, rot, host(cs, shared ? 1 : rows, rot), style);
          std::vector<double> ref(x.begin(), x.end());
          for (int t = 0; t < rows; ++t)
            for (int h = 0; h < heads; ++h)
              for (int i = 0; i < rot / 2; ++i) {
                const int i0 = style == kernels::RopeStyle::Interleaved ? 2 * i : i;
                const int i1 = style == kernels::RopeStyle::Interleaved ? 2 * i + 1 : i + rot / 2;
                const size_t b = static_cast<size_t>((t * heads + h) * D);
                const int ct = shared ? 0 : t;
                const double c = cs[static_cast<size_t>(ct * rot + 2 * i)], s = cs[static_cast<size_t>(ct * rot + 2 * i + 1)];
                ref[b + i0] = x[b + i0] * c - x[b + i1] * s;
                ref[b + i1] = x[b + i0] * s + x[b + i1] * c;
              }
          EXPECT_LT(max_rel_err(y, ref), 1e-6) << "D " << D << " rot " << rot << " shared " << shared;
        }
      }
    }
  }
}

TEST_P(BackendOps, EmbedRowsEveryTableType) {
  const int64_t E = 256, V = 40;
  const std::vector<float> table = randn(static_cast<size_t>(V * E), 15);
  const std::vector<int32_t> tokens = {3, 39, 0, 3, 17};
  for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0}) {
    std::vector<uint8_t> bytes(dtype_row_bytes(t, E) * V);
    for (int64_t r = 0; r < V; ++r)
      kernels::ref::quantize_row(t, table.data() + r * E, bytes.data() + r * dtype_row_bytes(t, E), E);
    TensorView tv;
    tv.name = "token_embd";
    tv.type = t;
    tv.n_dims = 2;
    tv.ne = {E, V, 1, 1};
    tv.data = bytes.data();
    tv.nbytes = bytes.size();
    for (float scale : {1.0f, 16.0f}) {
      std::vector<float> out(tokens.size() * E);
      Tensor o = host(out, static_cast<int64_t>(tokens.size()), E);
      be().embed_rows(tv, tokens.data(), o, scale);
      std::vector<float> row(E);
      for (size_t k = 0; k < tokens.size(); ++k) {
        kernels::ref::dequantize_row(t, bytes.data() + tokens[k] * dtype_row_bytes(t, E), row.data(), E);
        for (int64_t i = 0; i < E; ++i) ASSERT_EQ(out[k * E + i], row[i] * scale) << dtype_name(t) << " row " << k;
      }
    }
  }
}

TEST_P(BackendOps, ArgmaxRows) {
  const int64_t V = 1000;
  std::vector<float> x = randn(static_cast<size_t>(3 * V), 16);
  x[17] = 50.0f;               // row 0: one maximum
  x[V + 5] = x[V + 900] = 60;  // row 1: the first of two
  x[2 * V + 3] = std::numeric_limits<float>::quiet_NaN();  // row 2: a NaN is never chosen
  x[2 * V + 4] = 70.0f;
  int64_t out[3];
  be().argmax_rows(host(x, 3, V), out);
  EXPECT_EQ(out[0], 17);
  EXPECT_EQ(out[1], 5);
  EXPECT_EQ(out[2], 4);
}

TEST_P(BackendOps, BadOperandsFailNamingTheOp) {
  std::vector<float> x(64 * 3), w(48), y(64 * 3);
  Tensor tx = host(x, 3, 64), ty = host(y, 3, 64);
  auto expect_error = [](auto&& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error([&] { be().rms_norm(tx, f32_view(w, 48), ty, 1e-5f); }, "rms_norm");
  expect_error([&] { be().add_bias(ty, f32_view(w, 48)); }, "add_bias");
  Tensor short_y = host(y, 2, 64);
  expect_error([&] { be().add(short_y, tx); }, "add");
  expect_error([&] { be().rope(tx, 3, 64, 64, host(w, 1, 48), kernels::RopeStyle::Interleaved); }, "rope");
  expect_error([&] { be().softcap(tx, 0.0f); }, "softcap");
  const int32_t bad_token = 7;
  expect_error([&] { be().embed_rows(f32_view(w, 16, 3), &bad_token, short_y, 1.0f); }, "embed_rows");
  Tensor f16 = tx;
  f16.dtype = DType::F16;
  expect_error([&] { be().scale(f16, 2.0f); }, "expected f32");
}

}  // namespace
}  // namespace kvs::backend::test
