// Weight-row dot products: every type on both dispatch paths against the scalar reference (same
// prepared activation, so only float summation order may differ), the quantised dot against the
// float dot of the dequantised weights (bounded by the activation quantisation error), and the
// dot tiles against single dots.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels {
namespace {

using test::Path;

// The activation as the dot product sees it (dequantised activation format).
std::vector<float> act_values(DType wtype, const void* act, int64_t n) {
  std::vector<float> v(n);
  switch (test::act_format(wtype)) {
    case test::ActFormat::Q8_0:
    case test::ActFormat::Q8_1: ref::dequantize_row(DType::Q8_0, act, v.data(), n); break;
    case test::ActFormat::Q8_K: {
      const auto* b = static_cast<const block_q8_K*>(act);
      for (int64_t i = 0; i < n; ++i) v[i] = b[i / 256].d * b[i / 256].qs[i % 256];
      break;
    }
    default: std::memcpy(v.data(), act, n * sizeof(float));
  }
  return v;
}

// sum |w_i * a_i| over the values the kernel multiplies: the scale of float rounding error.
double abs_dot(DType t, const void* w, const void* act, int64_t n) {
  std::vector<float> wd(n);
  ref::dequantize_row(t, w, wd.data(), n);
  const auto av = act_values(t, act, n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(double(wd[i]) * av[i]);
  return s;
}

class DotPaths : public test::TablePaths {};

TEST_P(DotPaths, MatchesReferenceOnRandomBlocks) {
  for (DType t : test::kAllTypes) {
    for (int64_t n : test::test_lengths(t)) {
      for (uint32_t seed = 1; seed <= 3; ++seed) {
        const auto w = test::random_row(t, n, seed * 1000 + static_cast<uint32_t>(n));
        const auto x = test::randn(n, seed + 17 * static_cast<uint32_t>(n));
        std::vector<uint8_t> act(ref::act_row_bytes(t, n));
        ref::prepare_act(t, x.data(), act.data(), n);
        const float want = ref::vec_dot(t, w.data(), act.data(), n);
        const float got = dot_fn(k(), t)(w.data(), act.data(), n);
        const double tol = 1e-5 * abs_dot(t, w.data(), act.data(), n) + 1e-30;
        ASSERT_NEAR(got, want, tol) << dtype_name(t) << " n=" << n << " seed=" << seed;
      }
    }
  }
}

TEST_P(DotPaths, QuantisedDotTracksFloatDot) {
  // w: realistic quantised weights; x: float activations. The kernel quantises x, so it may differ
  // from sum(dequant(w) * x) by at most sum_b max_err(x in block b) * sum_{i in b} |w_i|.
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    const int64_t n = 1536;
    const auto wf = test::randn(n, 11);
    std::vector<uint8_t> w(dtype_row_bytes(t, n));
    ref::quantize_row(t, wf.data(), w.data(), n);
    std::vector<float> wd(n);
    ref::dequantize_row(t, w.data(), wd.data(), n);
    for (uint32_t seed = 0; seed < 4; ++seed) {
      const auto x = test::randn(n, 100 + seed, 2.0f);
      std::vector<uint8_t> act(ref::act_row_bytes(t, n));
      const QuantFn q = act_quant_fn(k(), t);
      q(x.data(), act.data(), n);
      const float got = dot_fn(k(), t)(w.data(), act.data(), n);
      const bool k_quant = test::act_format(t) == test::ActFormat::Q8_K;
      const int64_t ab = k_quant ? 256 : 32;
      // Q8_0 activations store d in fp16: |x - fp16(d) q| <= d/2 + 127 |d - fp16(d)| < 0.563 d.
      const double per_d = k_quant ? 0.5 + 1e-6 : 0.563;
      double want = 0, bound = 0, absw = 0;
      for (int64_t b = 0; b < n; b += ab) {
        double amax = 0, sw = 0;
        for (int64_t i = b; i < b + ab; ++i) {
          amax = std::max(amax, double(std::fabs(x[i])));
          sw += std::fabs(wd[i]);
          want += double(wd[i]) * x[i];
          absw += std::fabs(double(wd[i]) * x[i]);
        }
        bound += per_d * amax / 127.0 * sw;
      }
      bound += 1e-5 * absw;
      EXPECT_NEAR(got, want, bound) << dtype_name(t) << " seed=" << seed;
      // And the bound is meaningful: the quantised dot is close in relative terms.
      EXPECT_LT(std::fabs(got - want), 0.02 * absw) << dtype_name(t);
    }
  }
}

TEST_P(DotPaths, TilesMatchSingleDots) {
  for (DType t : test::kAllTypes) {
    // Lengths: float rows with and without a partial 16-element step, an odd number of 32-blocks.
    const int bs = dtype_info(t).block_size;
    for (const int64_t n : bs == 1 ? std::vector<int64_t>{72, 37, 160} : bs == 32 ? std::vector<int64_t>{512, 544}
                                                                                  : std::vector<int64_t>{512, 768}) {
    const int nr = 5, nt = 7;
    const size_t ws = dtype_row_bytes(t, n), as = ref::act_row_bytes(t, n);
    std::vector<uint8_t> w(ws * nr), act(as * nt);
    for (int r = 0; r < nr; ++r) {
      const auto row = test::random_row(t, n, 40 + r);
      std::memcpy(w.data() + r * ws, row.data(), ws);
    }
    for (int i = 0; i < nt; ++i) {
      const auto x = test::randn(n, 70 + i);
      ref::prepare_act(t, x.data(), act.data() + i * as, n);
    }
    for (int tr = 1; tr <= nr; ++tr)
      for (int tt = 1; tt <= nt; ++tt) {
        const int64_t ldo = nr + 3;
        std::vector<float> out(ldo * nt, -7.0f);
        dot_tile_fn(k(), t)(w.data(), ws, tr, act.data(), as, tt, n, out.data(), ldo);
        for (int i = 0; i < nt; ++i)
          for (int r = 0; r < ldo; ++r) {
            if (i < tt && r < tr) {
              const float want = ref::vec_dot(t, w.data() + r * ws, act.data() + i * as, n);
              const double tol = 1e-5 * abs_dot(t, w.data() + r * ws, act.data() + i * as, n) + 1e-30;
              ASSERT_NEAR(out[i * ldo + r], want, tol) << dtype_name(t) << " tile " << tr << "x" << tt;
            } else {
              ASSERT_EQ(out[i * ldo + r], -7.0f) << "tile wrote outside its rows/tokens";
            }
          }
      }
    }
  }
}

// Decode-shaped tiles (one or two tokens, the path the AVX-512 K-quant tiles take one row at a
// time): Llama-3.2-1B-length rows (2048, and 8192 for ffn_down), odd row counts, each output
// against the scalar reference's dot and nothing written outside the tile.
TEST_P(DotPaths, DecodeTilesOverLongRowsAndOddRowCounts) {
  for (DType t : test::kAllTypes) {
    for (const int64_t n : {int64_t{2048}, int64_t{8192}}) {
      const int max_rows = 13, max_tok = 2;
      const size_t ws = dtype_row_bytes(t, n), as = ref::act_row_bytes(t, n);
      std::vector<uint8_t> w(ws * max_rows), act(as * max_tok);
      for (int r = 0; r < max_rows; ++r) {
        const auto row = test::random_row(t, n, 900 + r + static_cast<uint32_t>(n));
        std::memcpy(w.data() + r * ws, row.data(), ws);
      }
      for (int i = 0; i < max_tok; ++i) {
        const auto x = test::randn(n, 300 + i);
        ref::prepare_act(t, x.data(), act.data() + i * as, n);
      }
      for (const int nr : {1, 3, 5, 7, 13})
        for (int nt = 1; nt <= max_tok; ++nt) {
          const int64_t ldo = nr + 2;
          std::vector<float> out(ldo * max_tok, -7.0f);
          dot_tile_fn(k(), t)(w.data(), ws, nr, act.data(), as, nt, n, out.data(), ldo);
          for (int i = 0; i < max_tok; ++i)
            for (int r = 0; r < ldo; ++r) {
              if (i < nt && r < nr) {
                const float want = ref::vec_dot(t, w.data() + r * ws, act.data() + i * as, n);
                const double tol = 1e-5 * abs_dot(t, w.data() + r * ws, act.data() + i * as, n) + 1e-30;
                ASSERT_NEAR(out[i * ldo + r], want, tol)
                    << dtype_name(t) << " n=" << n << " rows=" << nr << " tokens=" << nt << " r=" << r;
              } else {
                ASSERT_EQ(out[i * ldo + r], -7.0f) << dtype_name(t) << ": tile wrote outside its rows/tokens";
              }
            }
        }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, DotPaths, test::all_paths(), test::path_name);

TEST(DotApi, PublicEntryPointsAgreeWithReference) {
  for (DType t : test::kAllTypes) {
    const int64_t n = 768;
    const auto w = test::random_row(t, n, 5);
    const auto x = test::randn(n, 6);
    ASSERT_EQ(act_row_bytes(t, n), ref::act_row_bytes(t, n));
    std::vector<uint8_t> act(act_row_bytes(t, n)), act_ref(act.size());
    prepare_act(t, x.data(), act.data(), n);
    ref::prepare_act(t, x.data(), act_ref.data(), n);
    ASSERT_EQ(act, act_ref) << dtype_name(t);
    EXPECT_NEAR(vec_dot(t, w.data(), act.data(), n), ref::vec_dot(t, w.data(), act.data(), n),
                1e-5 * abs_dot(t, w.data(), act.data(), n))
        << dtype_name(t);
  }
  EXPECT_THROW(act_row_bytes(DType::Q4_K, 100), Error);
  EXPECT_THROW(act_row_bytes(DType::IQ3_S, 256), Error);
}

}  // namespace
}  // namespace kvs::kernels
