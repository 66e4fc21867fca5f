// The prefill attention's tile kernels (qk_panels over pack_key_panels' layout, pv_tile) on every
// kernel table against the scalar row references (ref::qk_rows_f32 / pv_rows_f32, which read the
// keys as plain rows): shapes that take every micro-tile and every remainder path — rows not a
// multiple of 6, keys not a multiple of 16 or 64, head dims with a remainder past the last whole
// vector.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attn_tile_test_util.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels {
namespace {

using test::Path;

class AttnTiles : public test::TablePaths {};

// A hand-made case: panel layout and padding. Keys j = 0..16 (17 keys: a second, padded panel),
// key j = (j + 1) * e_(j % D); the query row r = (r + 1) * (1, 1, ..., 1): S[r][j] = (r + 1)(j + 1).
TEST_P(AttnTiles, QkPanelsKnownAnswer) {
  constexpr int D = 8, n = 17, rows = 7, lds = 40;
  std::vector<float> K(n * D, 0.0f), Q(rows * D);
  for (int j = 0; j < n; ++j) K[j * D + j % D] = static_cast<float>(j + 1);
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < D; ++d) Q[r * D + d] = static_cast<float>(r + 1);
  std::vector<float> Kt(key_panels_floats(n, D), -7.0f);
  ASSERT_EQ(Kt.size(), 2u * 16 * D);
  pack_key_panels(K.data(), n, D, Kt.data());
  EXPECT_EQ(Kt[1 * D * 16 + 0 * 16 + 0], 17.0f);  // key 16, dim 0: panel 1, row d = 0, lane 0
  EXPECT_EQ(Kt[0 * D * 16 + 3 * 16 + 3], 4.0f);   // key 3, dim 3
  std::vector<float> S(rows * lds, -1.0f);
  k().qk_panels(Q.data(), rows, D, Kt.data(), 2, S.data(), lds);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < n; ++j) EXPECT_EQ(S[r * lds + j], static_cast<float>((r + 1) * (j + 1))) << r << " " << j;
    for (int j = n; j < 32; ++j) EXPECT_EQ(S[r * lds + j], 0.0f) << "padding key " << j;
    for (int j = 32; j < lds; ++j) EXPECT_EQ(S[r * lds + j], -1.0f) << "past the panels " << j;
  }
}

// The panel layout by its index formula on every table (the AVX-512 packing transposes 16 x 16
// in registers): key j's dim d at Kt[(j / 16) * D * 16 + d * 16 + j % 16], padding keys 0,
// nothing written past key_panels_floats.
TEST_P(AttnTiles, PackKeyPanelsByIndex) {
  for (int D : {8, 12, 16, 64, 80, 128}) {
    for (int n : {1, 15, 16, 17, 33, 64}) {
      const auto K = test::randn(static_cast<int64_t>(n) * D, static_cast<uint32_t>(D * 100 + n));
      const size_t len = key_panels_floats(n, D);
      std::vector<float> Kt(len + 37, -7.0f);
      k().pack_key_panels(K.data(), n, D, Kt.data());
      for (size_t i = 0; i < len; ++i) {
        const int j = static_cast<int>(i / (static_cast<size_t>(D) * 16)) * 16 + static_cast<int>(i % 16);
        const int d = static_cast<int>(i / 16 % static_cast<size_t>(D));
        const float want = j < n ? K[static_cast<size_t>(j) * D + d] : 0.0f;
        ASSERT_EQ(Kt[i], want) << "D=" << D << " n=" << n << " key " << j << " dim " << d;
      }
      for (size_t i = len; i < Kt.size(); ++i) ASSERT_EQ(Kt[i], -7.0f) << "written past the panels, D=" << D << " n=" << n;
    }
  }
}

TEST_P(AttnTiles, QkPanelsMatchReference) {
  test::for_each_tile_shape(test::kQkKeys, 0, [&](int D, int n, int rows, uint32_t seed) {
    const auto Q = test::randn(static_cast<int64_t>(rows) * D, seed);
    const auto K = test::randn(static_cast<int64_t>(n) * D, seed + 1);
    std::vector<float> Kt(key_panels_floats(n, D));
    pack_key_panels(K.data(), n, D, Kt.data());
    const int np = (n + 15) / 16, lds = np * 16 + 3;
    std::vector<float> got(static_cast<size_t>(rows) * lds, -1.0f), want(got.size(), -1.0f);
    k().qk_panels(Q.data(), rows, D, Kt.data(), np, got.data(), lds);
    ref::qk_rows_f32(Q.data(), rows, K.data(), n, D, 1.0f, want.data(), lds);
    test::expect_qk_scores(got, want, D, n, rows, lds);
  });
}

TEST_P(AttnTiles, PvTileMatchReference) {
  test::for_each_tile_shape(test::kPvKeys, 7, [&](int D, int n, int rows, uint32_t seed) {
    const int ldp = n + 5;
    const auto P = test::tile_probabilities(rows, ldp, seed);
    const auto V = test::randn(static_cast<int64_t>(n) * D, seed + 1);
    std::vector<float> got(static_cast<size_t>(rows) * D, 0.25f), want(got.size(), 0.25f);  // accumulates
    k().pv_tile(P.data(), rows, ldp, V.data(), n, D, got.data());
    ref::pv_rows_f32(P.data(), rows, ldp, V.data(), n, D, want.data());
    test::expect_pv_acc(got, want, D, n, rows);
  });
}

INSTANTIATE_TEST_SUITE_P(Kernels, AttnTiles, test::all_paths(), test::path_name);

// The public fronts dispatch to the active table.
TEST(AttnTilesFront, DispatchesToActiveTable) {
  constexpr int D = 64, n = 40, rows = 9;
  const auto Q = test::randn(rows * D, 1), K = test::randn(n * D, 2), V = test::randn(n * D, 3);
  std::vector<float> Kt(key_panels_floats(n, D));
  pack_key_panels(K.data(), n, D, Kt.data());
  std::vector<float> a(rows * 48), b(rows * 48);
  qk_panels(Q.data(), rows, D, Kt.data(), 3, a.data(), 48);
  active_kernels().qk_panels(Q.data(), rows, D, Kt.data(), 3, b.data(), 48);
  EXPECT_EQ(a, b);
  std::vector<float> oa(rows * D, 0.0f), ob(rows * D, 0.0f);
  pv_tile(a.data(), rows, 48, V.data(), n, D, oa.data());
  active_kernels().pv_tile(b.data(), rows, 48, V.data(), n, D, ob.data());
  EXPECT_EQ(oa, ob);
}

}  // namespace
}  // namespace kvs::kernels
