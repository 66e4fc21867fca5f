// The F16 dot tiles with one token (decode: the AVX-512 table runs one row at a time with four
// accumulators and an in-loop prefetch) and with a few tokens, on every table, against the scalar
// reference: row lengths around the 16-, 32- and 64-element steps, odd row counts, rows that
// start at any even byte offset, and the model shapes (2048 / 8192 columns).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels {
namespace {

using test::Path;

class F16DecodeTiles : public test::TablePaths {
 protected:
  // nr rows of n F16 weights starting `offset` bytes into the buffer (row stride 2n bytes, so odd n
  // gives rows at every even byte alignment), nt tokens; checks every output against ref::vec_dot.
  void check(int64_t n, int nr, int nt, size_t offset) {
    const size_t ws = dtype_row_bytes(DType::F16, n);
    std::vector<uint8_t> buf(offset + ws * nr);
    uint8_t* w = buf.data() + offset;  // [nr][n] F16
    for (int r = 0; r < nr; ++r) {
      const auto row = test::random_row(DType::F16, n, 1000 + static_cast<uint32_t>(n) * 7 + r);
      std::memcpy(w + r * ws, row.data(), ws);
    }
    std::vector<float> act(static_cast<size_t>(n) * nt);  // [nt][n]
    for (int t = 0; t < nt; ++t) {
      const auto x = test::randn(n, 50 + static_cast<uint32_t>(t) + 3 * static_cast<uint32_t>(n));
      std::memcpy(act.data() + t * n, x.data(), n * sizeof(float));
    }
    const int64_t ldo = nr + 2;
    std::vector<float> out(ldo * nt, -7.0f);  // [nt][ldo]
    const size_t as = n * sizeof(float);
    k().tile_f16(w, ws, nr, reinterpret_cast<const uint8_t*>(act.data()), as, nt, n, out.data(), ldo);
    for (int t = 0; t < nt; ++t)
      for (int64_t r = 0; r < ldo; ++r) {
        const float got = out[t * ldo + r];
        if (r >= nr) {
          ASSERT_EQ(got, -7.0f) << "tile wrote past its rows: n=" << n << " nr=" << nr << " nt=" << nt;
          continue;
        }
        const uint8_t* wr = w + r * ws;
        const float* x = act.data() + t * n;
        const float want = ref::vec_dot(DType::F16, wr, x, n);
        std::vector<float> wf(n);
        ref::dequantize_row(DType::F16, wr, wf.data(), n);
        double absdot = 0;
        for (int64_t i = 0; i < n; ++i) absdot += std::fabs(double(wf[i]) * x[i]);
        ASSERT_NEAR(got, want, 1e-5 * absdot + 1e-30)
            << "n=" << n << " nr=" << nr << " nt=" << nt << " offset=" << offset << " row " << r << " token " << t;
      }
  }
};

TEST_P(F16DecodeTiles, OneTokenMatchesReference) {
  for (int64_t n : {1, 7, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 79, 80, 127, 128, 129, 200, 1001})
    for (int nr : {1, 2, 3, 4, 5, 7})
      for (size_t offset : {size_t{0}, size_t{2}, size_t{6}}) check(n, nr, 1, offset);
}

TEST_P(F16DecodeTiles, SmallTokenCountsMatchReference) {
  for (int64_t n : {9, 33, 72, 130})
    for (int nr : {1, 3, 4, 5})
      for (int nt : {1, 2, 3, 4, 5}) check(n, nr, nt, 0);
}

TEST_P(F16DecodeTiles, ModelShapes) {
  // Llama-3.2-1B: 2048 columns (attention, gate/up, output), 8192 (down); Qwen2.5-0.5B: 896, 4864.
  for (int64_t n : {896, 2048, 4864, 8192}) {
    check(n, 5, 1, 0);
    check(n, 3, 2, 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, F16DecodeTiles, test::all_paths(), test::path_name);

}  // namespace
}  // namespace kvs::kernels
