// matmul against matmul_ref: every weight type, both dispatch tables, the decode and the prefill
// path, n_tok 1..70, row counts that are multiples of nothing, a wider output stride, several
// pool sizes and both prefill BLAS threading modes.
//
// Tolerance: prefill multiplies float activations (sgemm), so only float rounding differs from the
// double reference. Decode quantises the activation of Q8_0/Q4_0/Q4_K/Q6_K weights, so it must
// (a) match the quantised scalar reference (ref::vec_dot) to float rounding and (b) stay within
// the activation-quantisation error bound of the float reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels {
namespace {

using test::Path;

struct Weight {
  std::vector<uint8_t> bytes;  // [rows][row_bytes]
  std::vector<float> deq;      // [rows][cols] reference dequantisation
  TensorView view;
};

Weight make_weight(DType t, int64_t rows, int64_t cols, uint32_t seed) {
  Weight w;
  const auto f = test::randn(rows * cols, seed, 0.5f);
  const size_t rb = dtype_row_bytes(t, cols);
  w.bytes.resize(rb * rows);
  w.deq.resize(rows * cols);
  const bool quantize = test::has_quantizer(t);
  for (int64_t r = 0; r < rows; ++r) {
    if (quantize) {
      ref::quantize_row(t, f.data() + r * cols, w.bytes.data() + r * rb, cols);
    } else {
      const auto row = test::random_row(t, cols, seed + static_cast<uint32_t>(r));
      std::memcpy(w.bytes.data() + r * rb, row.data(), rb);
    }
    ref::dequantize_row(t, w.bytes.data() + r * rb, w.deq.data() + r * cols, cols);
  }
  w.view.name = "test.weight";
  w.view.type = t;
  w.view.n_dims = 2;
  w.view.ne = {cols, rows, 1, 1};
  w.view.data = w.bytes.data();
  w.view.nbytes = w.bytes.size();
  return w;
}

int64_t cols_for(DType t) {
  switch (dtype_info(t).block_size) {
    case 1: return 71;
    case 32: return 160;
    default: return 512;
  }
}

// Per-(t, r) tolerance for decode vs the float reference: activation quantisation bound + float.
double act_quant_bound(DType t, const Weight& w, const float* x, int64_t r, int64_t cols) {
  double bound = 0, absw = 0;
  const bool k_quant = test::act_format(t) == test::ActFormat::Q8_K;
  const bool quant = test::act_format(t) != test::ActFormat::F32;
  const int64_t ab = k_quant ? 256 : 32;
  for (int64_t b = 0; b < cols; b += ab) {
    double amax = 0, sw = 0;
    for (int64_t c = b; c < std::min(cols, b + ab); ++c) {
      amax = std::max(amax, double(std::fabs(x[c])));
      sw += std::fabs(w.deq[r * cols + c]);
      absw += std::fabs(double(w.deq[r * cols + c]) * x[c]);
    }
    if (quant) bound += (k_quant ? 0.5 : 0.563) * amax / 127.0 * sw;
  }
  return bound + 2e-5 * absw + 1e-6;
}

class MatmulPaths : public test::TablePaths {
 protected:
  // Runs matmul_with for n_tok = 1..max_tok on one weight and checks every output.
  void check(DType t, int64_t rows, MatmulPath path, ThreadPool& pool, MatmulConfig cfg,
             int64_t max_tok, int64_t extra_ld) {
    const int64_t cols = cols_for(t);
    const Weight w = make_weight(t, rows, cols, static_cast<uint32_t>(rows * 7 + int(t)));
    const auto x = test::randn(max_tok * cols, 1234 + static_cast<uint32_t>(rows));
    cfg.path = path;
    cfg.min_parallel_macs = 0;  // always split, even the small test shapes
    MatmulScratch scratch;
    std::vector<float> want(max_tok * rows);
    matmul_ref(w.view, x.data(), max_tok, want.data());
    const size_t abytes = ref::act_row_bytes(t, cols);
    std::vector<uint8_t> act(abytes * max_tok);  // quantised reference activations
    for (int64_t i = 0; i < max_tok; ++i) ref::prepare_act(t, x.data() + i * cols, act.data() + i * abytes, cols);
    for (int64_t n_tok = 1; n_tok <= max_tok; ++n_tok) {
      const int64_t ldy = rows + extra_ld;
      std::vector<float> y(n_tok * ldy, 12345.0f);
      matmul_with(k(), cfg, w.view, x.data(), n_tok, y.data(), pool, scratch, extra_ld ? ldy : 0);
      for (int64_t i = 0; i < n_tok; ++i) {
        for (int64_t r = 0; r < ldy; ++r) {
          const float got = y[i * ldy + r];
          if (r >= rows) {
            ASSERT_EQ(got, 12345.0f) << "wrote past rows";
            continue;
          }
          const float* xi = x.data() + i * cols;
          // Prefill multiplies FLOAT activations with dequantised weight tiles: only float
          // rounding is allowed, not the activation quantisation error decode may make (a
          // prefill that quantised its activations, or took the int8 tiles, fails this).
          const double bound = path == MatmulPath::Prefill ? act_quant_bound(DType::F32, w, xi, r, cols)
                                                           : act_quant_bound(t, w, xi, r, cols);
          ASSERT_NEAR(got, want[i * rows + r], bound)
              << dtype_name(t) << " rows=" << rows << " n_tok=" << n_tok << " t=" << i << " r=" << r;
          if (path == MatmulPath::Decode) {
            const float qref = ref::vec_dot(t, w.bytes.data() + r * w.view.row_bytes(), act.data() + i * abytes, cols);
            ASSERT_NEAR(got, qref, 2e-5 * std::fabs(want[i * rows + r]) + act_quant_bound(DType::F32, w, xi, r, cols))
                << dtype_name(t) << " (quantised reference) n_tok=" << n_tok;
          }
        }
      }
    }
  }
};

TEST_P(MatmulPaths, DecodeEveryType) {
  ThreadPool pool(2);
  for (DType t : test::kAllTypes)
    for (int64_t rows : {1, 37}) check(t, rows, MatmulPath::Decode, pool, {}, rows == 1 ? 9 : 70, 0);
}

TEST_P(MatmulPaths, PrefillEveryType) {
  ThreadPool pool(2);
  MatmulConfig cfg;
  cfg.tile_rows = 16;  // several tiles per thread for 37 rows
  for (DType t : test::kAllTypes)
    for (int64_t rows : {1, 37}) check(t, rows, MatmulPath::Prefill, pool, cfg, rows == 1 ? 9 : 70, 0);
}

TEST_P(MatmulPaths, AutoPathWithWideOutputAndOddPool) {
  ThreadPool pool(3);
  for (DType t : {DType::F32, DType::Q8_0, DType::Q4_K}) check(t, 101, MatmulPath::Auto, pool, {}, 20, 5);
}

TEST_P(MatmulPaths, PrefillBlasInternalThreading) {
  ThreadPool pool(2);
  MatmulConfig cfg;
  cfg.blas = BlasThreading::BlasInternal;
  cfg.tile_rows = 16;
  for (DType t : {DType::F32, DType::F16, DType::Q6_K}) check(t, 53, MatmulPath::Prefill, pool, cfg, 24, 3);
}

INSTANTIATE_TEST_SUITE_P(Kernels, MatmulPaths, test::all_paths(), test::path_name);

TEST(MatmulApi, SingleThreadPoolAndDefaultDispatch) {
  ThreadPool pool(1);
  MatmulScratch scratch;
  const Weight w = make_weight(DType::Q8_0, 33, 64, 3);
  const auto x = test::randn(40 * 64, 4);
  std::vector<float> y(40 * 33), want(40 * 33);
  matmul_ref(w.view, x.data(), 40, want.data());
  for (int64_t n_tok : {1, 4, 40}) {
    matmul(w.view, x.data(), n_tok, y.data(), pool, scratch);
    for (int64_t i = 0; i < n_tok * 33; ++i)
      ASSERT_NEAR(y[i], want[i], act_quant_bound(DType::Q8_0, w, x.data() + (i / 33) * 64, i % 33, 64)) << n_tok;
  }
}

TEST(MatmulApi, RejectsUnsupportedWeightType) {
  ThreadPool pool(1);
  MatmulScratch scratch;
  std::vector<uint8_t> bytes(256);
  TensorView v;
  v.name = "blk.0.ffn_down.weight";
  v.type = DType::IQ2_S;
  v.n_dims = 2;
  v.ne = {256, 1, 1, 1};
  v.data = bytes.data();
  float x[256] = {}, y[1];
  try {
    matmul(v, x, 1, y, pool, scratch);
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("iq2_s"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ffn_down"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kvs::kernels
