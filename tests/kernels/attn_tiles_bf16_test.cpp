// The BF16 attention tiles (qk_panels_bf16 over pack_key_panels_bf16's layout, pv_tile_bf16 over
// pack_value_pairs_bf16's, to_bf16, exp_sub_sum_bf16) on every kernel table — the AVX512_BF16
// kernels where the CPU has them — against the scalar f32 row references (ref::qk_rows_f32 / pv_rows_f32) run on
// operands rounded to BF16 one by one with core's fp32_to_bf16: products of BF16 values are exact
// in f32, so only the summation order may differ. Shapes take every micro-tile and remainder
// path (rows not a multiple of 6, keys not a multiple of 16 or 64, odd key counts, head dims
// with dims past the last whole vector).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/fp16.h"
#include "attn_tile_test_util.h"
#include "kernel_test_util.h"
#include "kernels/cpu_features.h"
#include "kernels/ops.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels {
namespace {

using test::Path;

class AttnTilesBf16 : public test::TablePaths {};

std::vector<float> rounded(const std::vector<float>& x) {
  std::vector<float> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = bf16_to_fp32(fp32_to_bf16(x[i]));
  return y;
}
std::vector<uint16_t> as_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = fp32_to_bf16(x[i]);
  return y;
}

// Round to nearest, ties to even, worked by hand: BF16 keeps 7 mantissa bits.
TEST_P(AttnTilesBf16, ToBf16RoundsToNearestEven) {
  const std::vector<float> x = {1.0f,
                                1.0f + 0x1p-8f,         // halfway 1 | 1 + 2^-7: to even, 1
                                1.0f + 3 * 0x1p-8f,     // halfway 1 + 2^-7 | 1 + 2^-6: to even, 1 + 2^-6
                                1.0f + 0x1p-8f + 0x1p-20f,  // just above halfway: up
                                -2.5f, 3.0e38f, 0.0f, -0.0f, 1e-3f,
                                std::numeric_limits<float>::infinity(),
                                1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f};  // 17: a masked tail
  const std::vector<uint16_t> want = {0x3F80, 0x3F80, 0x3F82, 0x3F81, 0xC020, 0x7F62, 0x0000, 0x8000, 0x3A83,
                                      0x7F80, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0};
  std::vector<uint16_t> got(x.size() + 1, 0xABCD);
  k().to_bf16(x.data(), got.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], want[i]) << i << ": " << x[i];
  EXPECT_EQ(got[x.size()], 0xABCD) << "wrote past n";
  const auto r = test::randn(1000, 99);
  std::vector<uint16_t> a(r.size());
  k().to_bf16(r.data(), a.data(), static_cast<int64_t>(r.size()));
  EXPECT_EQ(a, as_bf16(r));
}

// Layout by hand: 17 keys (a second, padded panel), key j = (j + 1) e_(j % D); query row r =
// (r + 1)(1, ..., 1): S[r][j] = (r + 1)(j + 1), every value exact in BF16.
TEST_P(AttnTilesBf16, QkPanelsKnownAnswer) {
  constexpr int D = 8, n = 17, rows = 7, lds = 40;
  std::vector<float> K(n * D, 0.0f), Q(rows * D);
  for (int j = 0; j < n; ++j) K[j * D + j % D] = static_cast<float>(j + 1);
  for (int r = 0; r < rows; ++r)
    for (int d = 0; d < D; ++d) Q[r * D + d] = static_cast<float>(r + 1);
  std::vector<uint16_t> Kt(key_panels_floats(n, D), 0xFFFF);
  pack_key_panels_bf16(K.data(), n, D, Kt.data());
  EXPECT_EQ(Kt[1 * 16 * D + 0 * 32 + 0 * 2 + 0], fp32_to_bf16(17.0f));  // key 16, dim 0: panel 1, pair 0, lane 0
  EXPECT_EQ(Kt[0 * 16 * D + 1 * 32 + 3 * 2 + 1], fp32_to_bf16(4.0f));   // key 3, dim 3: pair 1, lane 3, odd
  EXPECT_EQ(Kt[1 * 16 * D + 0 * 32 + 5 * 2 + 0], 0) << "padding key";
  const auto Qb = as_bf16(Q);
  std::vector<float> S(rows * lds, -1.0f);
  k().qk_panels_bf16(Qb.data(), rows, D, Kt.data(), 2, S.data(), lds);
  for (int r = 0; r < rows; ++r) {
    for (int j = 0; j < n; ++j) EXPECT_EQ(S[r * lds + j], static_cast<float>((r + 1) * (j + 1))) << r << " " << j;
    for (int j = n; j < 32; ++j) EXPECT_EQ(S[r * lds + j], 0.0f) << "padding key " << j;
    for (int j = 32; j < lds; ++j) EXPECT_EQ(S[r * lds + j], -1.0f) << "past the panels " << j;
  }
}

TEST_P(AttnTilesBf16, QkPanelsMatchReferenceOnRoundedOperands) {
  test::for_each_tile_shape(test::kQkKeys, 0, [&](int D, int n, int rows, uint32_t seed) {
    const auto Q = test::randn(static_cast<int64_t>(rows) * D, seed);
    const auto K = test::randn(static_cast<int64_t>(n) * D, seed + 1);
    std::vector<uint16_t> Kt(key_panels_floats(n, D));
    pack_key_panels_bf16(K.data(), n, D, Kt.data());
    const auto Qb = as_bf16(Q);
    const int np = (n + 15) / 16, lds = np * 16 + 3;
    std::vector<float> got(static_cast<size_t>(rows) * lds, -1.0f), want(got.size(), -1.0f);
    k().qk_panels_bf16(Qb.data(), rows, D, Kt.data(), np, got.data(), lds);
    const auto Qr = rounded(Q), Kr = rounded(K);
    ref::qk_rows_f32(Qr.data(), rows, Kr.data(), n, D, 1.0f, want.data(), lds);
    test::expect_qk_scores(got, want, D, n, rows, lds);
  });
}

TEST_P(AttnTilesBf16, PvTileMatchReferenceOnRoundedOperands) {
  test::for_each_tile_shape(test::kPvKeys, 7, [&](int D, int n, int rows, uint32_t seed) {
    const int ldp = n + 5;
    const auto P = test::tile_probabilities(rows, ldp, seed);
    auto Pb = as_bf16(P);
    // Elements past n must not be read: a NaN there would poison the sums.
    for (int r = 0; r < rows; ++r) Pb[r * ldp + n] = 0x7FC0;
    const auto V = test::randn(static_cast<int64_t>(n) * D, seed + 1);
    std::vector<uint16_t> Vp(static_cast<size_t>((n + 1) / 2) * 2 * D, 0xFFFF);
    pack_value_pairs_bf16(V.data(), n, D, Vp.data());
    std::vector<float> got(static_cast<size_t>(rows) * D, 0.25f), want(got.size(), 0.25f);  // accumulates
    k().pv_tile_bf16(Pb.data(), rows, ldp, Vp.data(), n, D, got.data());
    const auto Pr = rounded(P), Vr = rounded(V);
    ref::pv_rows_f32(Pr.data(), rows, ldp, Vr.data(), n, D, want.data());
    test::expect_pv_acc(got, want, D, n, rows);
  });
}

// exp rounded to BF16, against exp in double: every output within one BF16 rounding of the exact
// value (relative 2^-8: the exp's own error may move a value across a rounding boundary), zeros
// below -87.3 and for -inf (masked keys), nothing written past n; the sum within 1e-5 of the
// exact sum of exp (it adds the unrounded values).
TEST_P(AttnTilesBf16, ExpSubSumBf16MatchesExpInDouble) {
  for (int n : {1, 15, 16, 17, 100, 515}) {
    auto x = test::randn(n, 300 + n);
    for (auto& v : x) v *= 8.0f;
    x[0] = -std::numeric_limits<float>::infinity();
    if (n > 3) x[3] = 0.0f - 100.0f;  // exp(-100 - sub) underflows
    const float sub = 2.5f;
    std::vector<uint16_t> y(static_cast<size_t>(n) + 1, 0xABCD);
    const float sum = k().exp_sub_sum_bf16(x.data(), y.data(), n, sub);
    double want_sum = 0;
    for (int i = 0; i < n; ++i) {
      const double e = std::exp(static_cast<double>(x[i]) - sub);
      const double e_kept = static_cast<double>(x[i]) - sub < -87.3 ? 0.0 : e;
      want_sum += e_kept;
      ASSERT_NEAR(bf16_to_fp32(y[i]), e_kept, 0x1p-8 * e_kept) << "n=" << n << " i=" << i << " x=" << x[i];
    }
    EXPECT_EQ(y[0], 0) << "exp(-inf)";
    if (n > 3) {
      EXPECT_EQ(y[3], 0) << "exp(-102.5)";
    }
    EXPECT_EQ(y[static_cast<size_t>(n)], 0xABCD) << "wrote past n";
    EXPECT_NEAR(sum, want_sum, 1e-5 * want_sum) << "n=" << n;
  }
}

// Each table's BF16 packings (the AVX512_BF16 ones transpose and interleave in registers) against
// their index formulas with core's rounding: key j's dim d at (j / 16) 16 D + (d / 2) 32 +
// (j % 16) 2 + d % 2, padding keys 0; value j's dim d at (j / 2) 2 D + 2 d + j % 2, an odd n's
// last pair padded with 0; nothing written past either.
TEST_P(AttnTilesBf16, PackingsByIndex) {
  for (int D : {8, 12, 16, 64, 80, 128}) {
    for (int n : {1, 15, 16, 17, 33, 64}) {
      const auto X = test::randn(static_cast<int64_t>(n) * D, static_cast<uint32_t>(D * 100 + n));
      const size_t klen = key_panels_floats(n, D), vlen = static_cast<size_t>((n + 1) / 2) * 2 * D;
      std::vector<uint16_t> Kt(klen + 21, 0xABCD), Vp(vlen + 21, 0xABCD);
      k().pack_key_panels_bf16(X.data(), n, D, Kt.data());
      k().pack_value_pairs_bf16(X.data(), n, D, Vp.data());
      for (size_t i = 0; i < klen; ++i) {
        const int j = static_cast<int>(i / (16 * static_cast<size_t>(D))) * 16 + static_cast<int>(i % 32 / 2);
        const int d = static_cast<int>(i % (16 * static_cast<size_t>(D)) / 32 * 2 + i % 2);
        const uint16_t want = j < n ? fp32_to_bf16(X[static_cast<size_t>(j) * D + d]) : uint16_t{0};
        ASSERT_EQ(Kt[i], want) << "keys D=" << D << " n=" << n << " key " << j << " dim " << d;
      }
      for (size_t i = 0; i < vlen; ++i) {
        const int j = static_cast<int>(i / (2 * static_cast<size_t>(D))) * 2 + static_cast<int>(i % 2);
        const int d = static_cast<int>(i % (2 * static_cast<size_t>(D)) / 2);
        const uint16_t want = j < n ? fp32_to_bf16(X[static_cast<size_t>(j) * D + d]) : uint16_t{0};
        ASSERT_EQ(Vp[i], want) << "values D=" << D << " n=" << n << " key " << j << " dim " << d;
      }
      for (size_t i = klen; i < Kt.size(); ++i) ASSERT_EQ(Kt[i], 0xABCD) << "keys written past, D=" << D << " n=" << n;
      for (size_t i = vlen; i < Vp.size(); ++i) ASSERT_EQ(Vp[i], 0xABCD) << "values written past, D=" << D << " n=" << n;
    }
  }
}

// Value pairs by hand: key j's dim d at (j / 2) * 2D + 2d + j % 2; odd n pads the last pair with 0.
TEST(AttnTilesBf16Layout, ValuePairs) {
  constexpr int D = 4, n = 3;
  std::vector<float> V(n * D);
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < D; ++d) V[j * D + d] = static_cast<float>(10 * j + d);
  std::vector<uint16_t> Vp(2 * 2 * D, 0xFFFF);
  pack_value_pairs_bf16(V.data(), n, D, Vp.data());
  const std::vector<float> want = {0, 10, 1, 11, 2, 12, 3, 13, 20, 0, 21, 0, 22, 0, 23, 0};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(bf16_to_fp32(Vp[i]), want[i]) << i;
}

INSTANTIATE_TEST_SUITE_P(Kernels, AttnTilesBf16, test::all_paths(), test::path_name);

// The AVX-512 table multiplies BF16 in hardware exactly when the CPU has AVX512_BF16; the others never.
TEST(AttnTilesBf16Front, NativeOnlyWithAvx512Bf16) {
  EXPECT_FALSE(generic_kernels().native_bf16);
  EXPECT_FALSE(avx2_kernels().native_bf16);
  if (test::avx512_available()) {
    EXPECT_EQ(avx512_kernels().native_bf16, cpu_features().avx512bf16);
  }
  EXPECT_EQ(native_bf16(), active_kernels().native_bf16);
}

}  // namespace
}  // namespace kvs::kernels
