// Repacked Q4_0 (kernels/q4_0_packed.h): pack/unpack round trip, the scalar packed tile against
// the Q4_0 scalar reference (ref::vec_dot), the AVX-512 packed tile against the scalar packed tile,
// and matmul through the registry on every table (the tables without a packed tile must ignore
// it) for row counts that are not multiples of 16, block counts that are odd and not multiples of
// 8 (K not a multiple of 256), n_tok = 1 and > 1.
//
// Tolerance: every path computes the same exact integer block sums; only the float summation of
// d_w * d_a * sum over the blocks differs (order, FMA), so 1e-5 of the sum of |terms|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "core/thread_pool.h"
#include "kernel_test_util.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"
#include "kernels/q4_0_packed.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels {
namespace {

using test::Path;

std::vector<uint8_t> random_q4_0(int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<uint8_t> w;  // [rows][cols / 32 blocks]
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = test::random_row(DType::Q4_0, cols, seed + static_cast<uint32_t>(r));
    w.insert(w.end(), row.begin(), row.end());
  }
  return w;
}

// q4_0p activations of nt random rows: [nt][stride bytes].
std::vector<uint8_t> make_act(int64_t nt, int64_t cols, size_t stride, uint32_t seed) {
  std::vector<uint8_t> a(stride * nt);
  const auto x = test::randn(nt * cols, seed);
  for (int64_t t = 0; t < nt; ++t) {
    ref::prepare_act(DType::Q4_0, x.data() + t * cols, a.data() + t * stride, cols);
    finish_act_q4_0p(a.data() + t * stride, cols);
  }
  return a;
}

// Sum of |d_w * d_a * block dot| bound, from the dequantised row and the activation's scales.
double tol(const uint8_t* wrow, const uint8_t* act, int64_t cols) {
  std::vector<float> w(cols);
  ref::dequantize_row(DType::Q4_0, wrow, w.data(), cols);
  const auto* ab = reinterpret_cast<const block_q8_0*>(act);
  const float* sa = act_q8_0_scales(act, cols);
  double s = 0;
  for (int64_t c = 0; c < cols; ++c) s += std::fabs(double(w[c]) * sa[c / 32] * ab[c / 32].qs[c % 32]);
  return 1e-5 * s + 1e-7;
}

const int64_t kRows[] = {1, 7, 16, 17, 37, 100};
const int64_t kCols[] = {32, 96, 160, 288, 800};  // nb = 1, 3, 5, 9, 25

TEST(Q4_0Packed, PackUnpackRoundTrip) {
  for (int64_t rows : kRows)
    for (int64_t cols : kCols) {
      const auto w = random_q4_0(rows, cols, 11);
      const auto p = pack_q4_0(w.data(), rows, cols);
      EXPECT_EQ(p->ngroups, (rows + 15) / 16);
      EXPECT_EQ(p->group_stride % 64, 0u);
      const size_t rb = dtype_row_bytes(DType::Q4_0, cols);
      std::vector<block_q4_0> back(cols / 32);
      for (int64_t r = 0; r < rows; ++r) {
        unpack_q4_0_row(*p, r, back.data());
        ASSERT_EQ(std::memcmp(back.data(), w.data() + r * rb, rb), 0) << rows << "x" << cols << " row " << r;
      }
    }
}

// Tensors of 8 MiB and more are packed on several threads: the same bytes.
TEST(Q4_0Packed, LargeTensorRoundTrip) {
  const int64_t rows = 2001, cols = 8192;
  const auto w = random_q4_0(rows, cols, 3);
  const auto p = pack_q4_0(w.data(), rows, cols);
  ASSERT_GE(p->bytes(), size_t{8} << 20);
  const size_t rb = dtype_row_bytes(DType::Q4_0, cols);
  std::vector<block_q4_0> back(cols / 32);
  for (int64_t r = 0; r < rows; ++r) {
    unpack_q4_0_row(*p, r, back.data());
    ASSERT_EQ(std::memcmp(back.data(), w.data() + r * rb, rb), 0) << "row " << r;
  }
  // The padding rows of the last group are zero.
  const uint8_t* last = p->group(p->ngroups - 1);
  for (int k = 0; k < 4; ++k)
    for (int r = 1; r < 16; ++r)
      for (int j = 0; j < 4; ++j) ASSERT_EQ(last[64 * k + 4 * r + j], 0) << "padding row " << r;
}

TEST(Q4_0Packed, ScalarTileMatchesQ4_0Reference) {
  for (int64_t rows : kRows)
    for (int64_t cols : kCols) {
      const auto w = random_q4_0(rows, cols, 5);
      const auto p = pack_q4_0(w.data(), rows, cols);
      const int nt = 3;
      const size_t as = act_q4_0p_bytes(cols);
      const auto a = make_act(nt, cols, as, 9);
      std::vector<float> out(nt * rows, 1e30f);
      tile_q4_0p_ref(*p, 0, p->ngroups, a.data(), as, nt, out.data(), rows);
      const size_t rb = dtype_row_bytes(DType::Q4_0, cols);
      for (int t = 0; t < nt; ++t)
        for (int64_t r = 0; r < rows; ++r) {
          const float want = ref::vec_dot(DType::Q4_0, w.data() + r * rb, a.data() + t * as, cols);
          ASSERT_NEAR(out[t * rows + r], want, tol(w.data() + r * rb, a.data() + t * as, cols))
              << rows << "x" << cols << " t=" << t << " r=" << r;
        }
    }
}

TEST(Q4_0Packed, Avx512TileMatchesScalarTile) {
  if (!test::avx512_available()) GTEST_SKIP() << "CPU or OS lacks AVX-512 F/BW/DQ/VL/VNNI";
  const PackedTileFn tile = avx512_kernels().tile_q4_0p;
  ASSERT_NE(tile, nullptr);
  for (int64_t rows : kRows)
    for (int64_t cols : kCols)
      for (int nt : {1, 2, 5, 8, 11}) {
        const auto w = random_q4_0(rows, cols, 21);
        const auto p = pack_q4_0(w.data(), rows, cols);
        const size_t as = act_q4_0p_bytes(cols) + 8;  // an odd stride too
        const auto a = make_act(nt, cols, as, 23);
        const int64_t ldo = rows + 3;
        std::vector<float> want(nt * ldo, -7.0f), got(nt * ldo, -7.0f);
        tile_q4_0p_ref(*p, 0, p->ngroups, a.data(), as, nt, want.data(), ldo);
        tile(p->group(0), p->group_stride, static_cast<int>(p->ngroups), rows, a.data(), as, nt, cols, got.data(), ldo);
        const size_t rb = dtype_row_bytes(DType::Q4_0, cols);
        for (int t = 0; t < nt; ++t)
          for (int64_t r = 0; r < ldo; ++r) {
            if (r >= rows) {
              ASSERT_EQ(got[t * ldo + r], -7.0f) << "wrote past the rows";
              continue;
            }
            ASSERT_NEAR(got[t * ldo + r], want[t * ldo + r], tol(w.data() + r * rb, a.data() + t * as, cols))
                << rows << "x" << cols << " nt=" << nt << " t=" << t << " r=" << r;
          }
      }
}

class Q4_0PackedMatmul : public testing::TestWithParam<Path> {
 protected:
  void SetUp() override { KVS_SKIP_IF_NO_AVX2(GetParam()); }
};

// matmul on a registered Q4_0 weight: the packed tile where the table has one, the Q4_0 tiles
// otherwise; both must match the scalar Q4_0 reference on the quantised activations.
TEST_P(Q4_0PackedMatmul, RegisteredWeightMatchesReference) {
  const KernelTable& k = test::table(GetParam());
  ThreadPool pool(2);
  for (int64_t rows : {37, 100})
    for (int64_t cols : {160, 800}) {
      const auto w = random_q4_0(rows, cols, 31);
      TensorView v;
      v.name = "test.q4_0";
      v.type = DType::Q4_0;
      v.n_dims = 2;
      v.ne = {cols, rows, 1, 1};
      v.data = w.data();
      v.nbytes = w.size();
      register_packed_q4_0(v.data, pack_q4_0(w.data(), rows, cols));
      ASSERT_NE(find_packed_q4_0(v.data, rows, cols), nullptr);
      EXPECT_EQ(find_packed_q4_0(v.data, rows + 1, cols), nullptr) << "shape must match";
      const int64_t max_tok = 20;
      const auto x = test::randn(max_tok * cols, 41);
      const size_t abytes = ref::act_row_bytes(DType::Q4_0, cols), rb = v.row_bytes();
      std::vector<uint8_t> act(abytes * max_tok);
      for (int64_t i = 0; i < max_tok; ++i)
        ref::prepare_act(DType::Q4_0, x.data() + i * cols, act.data() + i * abytes, cols);
      MatmulConfig cfg;
      cfg.min_parallel_macs = 0;
      MatmulScratch scratch;
      for (int64_t n_tok : {1, 2, 9, 20}) {
        std::vector<float> y(n_tok * rows);
        matmul_with(k, cfg, v, x.data(), n_tok, y.data(), pool, scratch);
        for (int64_t t = 0; t < n_tok; ++t)
          for (int64_t r = 0; r < rows; ++r) {
            const uint8_t* at = act.data() + t * abytes;
            const float want = ref::vec_dot(DType::Q4_0, w.data() + r * rb, at, cols);
            ASSERT_NEAR(y[t * rows + r], want, tol(w.data() + r * rb, at, cols))
                << k.name << " " << rows << "x" << cols << " n_tok=" << n_tok << " t=" << t << " r=" << r;
          }
      }
      unregister_packed_q4_0(v.data);
      EXPECT_EQ(find_packed_q4_0(v.data, rows, cols), nullptr);
    }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Q4_0PackedMatmul, test::all_paths(), test::path_name);

TEST(Q4_0Packed, PackingFollowsTableAndEnv) {
  const bool has = active_kernels().tile_q4_0p != nullptr;
  ::unsetenv("KVS_NO_REPACK");
  EXPECT_EQ(q4_0_packing_active(), has);
  ::setenv("KVS_NO_REPACK", "1", 1);
  EXPECT_FALSE(q4_0_packing_active());
  ::setenv("KVS_NO_REPACK", "0", 1);
  EXPECT_EQ(q4_0_packing_active(), has);
  ::unsetenv("KVS_NO_REPACK");
}

}  // namespace
}  // namespace kvs::kernels
