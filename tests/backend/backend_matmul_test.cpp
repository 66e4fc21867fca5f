// Backend::matmul and matmul_shared against a scalar reference (weights dequantised by the scalar
// kernels' oracle, products accumulated in double), for float and quantised weights, decode-sized
// and prefill-sized batches (the CPU's two paths), and the shared-input form against separate
// products.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "backends.h"
#include "core/error.h"
#include "kernels/ref/ref.h"

namespace kvs::backend::test {
namespace {

class BackendMatmul : public BackendTest {};
KVS_BACKEND_SUITE(BackendMatmul);

struct Weight {
  std::vector<uint8_t> bytes;
  TensorView view;
  std::vector<float> deq;  // [rows][cols] as the reference reads it
};

Weight make_weight(DType t, int64_t rows, int64_t cols, uint32_t seed, std::string name) {
  Weight w;
  const std::vector<float> v = randn(static_cast<size_t>(rows * cols), seed, 0.2f);
  const size_t rb = dtype_row_bytes(t, cols);
  w.bytes.resize(rb * static_cast<size_t>(rows));
  w.deq.resize(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    kernels::ref::quantize_row(t, v.data() + r * cols, w.bytes.data() + r * rb, cols);
    kernels::ref::dequantize_row(t, w.bytes.data() + r * rb, w.deq.data() + r * cols, cols);
  }
  w.view.name = std::move(name);
  w.view.type = t;
  w.view.n_dims = 2;
  w.view.ne = {cols, rows, 1, 1};
  w.view.data = w.bytes.data();
  w.view.nbytes = w.bytes.size();
  return w;
}

std::vector<double> matmul_ref(const Weight& w, const std::vector<float>& x, int64_t n_tok) {
  const int64_t rows = w.view.rows(), cols = w.view.cols();
  std::vector<double> y(static_cast<size_t>(n_tok * rows));
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double s = 0;
      for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(w.deq[r * cols + c]) * x[t * cols + c];
      y[t * rows + r] = s;
    }
  return y;
}

// |y - ref| relative to the output's scale (the largest |ref|): the quantised activations of Q8_0 /
// Q4_0 / K-quant weights make each element's error proportional to the row's magnitude.
double scaled_err(const std::vector<float>& y, const std::vector<double>& ref) {
  double m = 1e-30, e = 0;
  for (double r : ref) m = std::max(m, std::abs(r));
  for (size_t i = 0; i < y.size(); ++i) e = std::max(e, std::abs(y[i] - ref[i]));
  return e / m;
}

double tolerance(DType t) { return t == DType::F32 ? 1e-6 : t == DType::F16 ? 1e-5 : 2e-2; }

TEST_P(BackendMatmul, EveryPathAgainstReference) {
  const int64_t cols = 256, rows = 72;
  for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0, DType::Q6_K}) {
    const Weight w = make_weight(t, rows, cols, 21, "blk.0.attn_q.weight");
    for (int64_t n_tok : {1, 3, 80}) {  // decode, a few rows, past the per-type prefill crossover
      const std::vector<float> x = randn(static_cast<size_t>(n_tok * cols), 22);
      std::vector<float> y(static_cast<size_t>(n_tok * rows));
      Tensor ty = host(y, n_tok, rows);
      be().matmul(w.view, Tensor::host_f32(x.data(), n_tok, cols), ty);
      EXPECT_LT(scaled_err(y, matmul_ref(w, x, n_tok)), tolerance(t)) << dtype_name(t) << ", " << n_tok << " rows";
    }
  }
}

TEST_P(BackendMatmul, SharedInputEqualsSeparateProducts) {
  // A layer's Q, K, V (Hkv < H) over one input, one shared call vs three separate ones.
  const int64_t E = 256, D = 64, H = 4, Hkv = 2;
  for (DType t : {DType::F32, DType::Q8_0, DType::Q4_0}) {
    const Weight wq = make_weight(t, H * D, E, 31, "q"), wk = make_weight(t, Hkv * D, E, 32, "k"),
                 wv = make_weight(t, Hkv * D, E, 33, "v");
    for (int64_t n_tok : {1, 40}) {
      const std::vector<float> x = randn(static_cast<size_t>(n_tok * E), 34);
      const Tensor tx = Tensor::host_f32(x.data(), n_tok, E);
      std::vector<float> q(static_cast<size_t>(n_tok * H * D)), k(static_cast<size_t>(n_tok * Hkv * D)), v(k.size());
      const MatmulOut outs[] = {{&wq.view, host(q, n_tok, H * D)}, {&wk.view, host(k, n_tok, Hkv * D)},
                                {&wv.view, host(v, n_tok, Hkv * D)}};
      be().matmul_shared(outs, tx);
      for (const auto& [w, y] : {std::pair{&wq, &q}, std::pair{&wk, &k}, std::pair{&wv, &v}}) {
        std::vector<float> sep(y->size());
        Tensor ts = host(sep, n_tok, w->view.rows());
        be().matmul(w->view, tx, ts);
        EXPECT_EQ(*y, sep) << dtype_name(t) << " " << w->view.name << ", " << n_tok << " rows";
        EXPECT_LT(scaled_err(*y, matmul_ref(*w, x, n_tok)), tolerance(t));
      }
    }
  }
}

TEST_P(BackendMatmul, ShapeMismatchFailsNamingTheWeight) {
  const Weight w = make_weight(DType::F32, 8, 64, 41, "blk.3.ffn_down.weight");
  std::vector<float> x(2 * 32), y(2 * 8);
  Tensor ty = host(y, 2, 8);
  try {
    be().matmul(w.view, host(x, 2, 32), ty);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.3.ffn_down.weight"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvs::backend::test
