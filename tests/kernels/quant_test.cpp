// Block formats: layouts (hand-built blocks decoded per ggml's definitions), dequantisation of
// every path against the scalar reference, quantise -> dequantise error bounds, and bit-exact
// activation quantisation on both dispatch paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernel_test_util.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels {
namespace {

using test::Path;

TEST(QuantLayout, BlockSizesMatchDtypeTable) {
  EXPECT_EQ(sizeof(block_q8_0), dtype_info(DType::Q8_0).type_size);
  EXPECT_EQ(sizeof(block_q4_0), dtype_info(DType::Q4_0).type_size);
  EXPECT_EQ(sizeof(block_q4_K), dtype_info(DType::Q4_K).type_size);
  EXPECT_EQ(sizeof(block_q6_K), dtype_info(DType::Q6_K).type_size);
  EXPECT_EQ(sizeof(block_q8_K), dtype_info(DType::Q8_K).type_size);
  EXPECT_EQ(offsetof(block_q4_K, scales), 4u);
  EXPECT_EQ(offsetof(block_q4_K, qs), 16u);
  EXPECT_EQ(offsetof(block_q6_K, qh), 128u);
  EXPECT_EQ(offsetof(block_q6_K, scales), 192u);
  EXPECT_EQ(offsetof(block_q6_K, d), 208u);
  EXPECT_EQ(offsetof(block_q8_K, bsums), 260u);
  // The other GGUF layouts (ggml-common.h): sizes as the dtype table, field offsets.
  EXPECT_EQ(sizeof(block_q4_1), dtype_info(DType::Q4_1).type_size);
  EXPECT_EQ(sizeof(block_q5_0), dtype_info(DType::Q5_0).type_size);
  EXPECT_EQ(sizeof(block_q5_1), dtype_info(DType::Q5_1).type_size);
  EXPECT_EQ(sizeof(block_iq4_nl), dtype_info(DType::IQ4_NL).type_size);
  EXPECT_EQ(sizeof(block_q2_K), dtype_info(DType::Q2_K).type_size);
  EXPECT_EQ(sizeof(block_q3_K), dtype_info(DType::Q3_K).type_size);
  EXPECT_EQ(sizeof(block_q5_K), dtype_info(DType::Q5_K).type_size);
  EXPECT_EQ(sizeof(block_iq4_xs), dtype_info(DType::IQ4_XS).type_size);
  EXPECT_EQ(offsetof(block_q4_1, qs), 4u);
  EXPECT_EQ(offsetof(block_q5_0, qh), 2u);
  EXPECT_EQ(offsetof(block_q5_0, qs), 6u);
  EXPECT_EQ(offsetof(block_q5_1, qh), 4u);
  EXPECT_EQ(offsetof(block_q5_1, qs), 8u);
  EXPECT_EQ(offsetof(block_q2_K, qs), 16u);
  EXPECT_EQ(offsetof(block_q2_K, d), 80u);
  EXPECT_EQ(offsetof(block_q3_K, qs), 32u);
  EXPECT_EQ(offsetof(block_q3_K, scales), 96u);
  EXPECT_EQ(offsetof(block_q3_K, d), 108u);
  EXPECT_EQ(offsetof(block_q5_K, qh), 16u);
  EXPECT_EQ(offsetof(block_q5_K, qs), 48u);
  EXPECT_EQ(offsetof(block_iq4_xs, scales_l), 4u);
  EXPECT_EQ(offsetof(block_iq4_xs, qs), 8u);
}

TEST(QuantLayout, Q3_KAndIQ4_XSScaleUnpacking) {
  // Q3_K: 16 6-bit scales v[j]: low nibbles in bytes 0-7 (j < 8 low nibble of byte j, j >= 8 high
  // nibble of byte j - 8), 2 high bits in bytes 8-11 (bits 2 (j / 4) of byte 8 + j % 4).
  int v[16];
  uint8_t s[12] = {};
  for (int j = 0; j < 16; ++j) {
    v[j] = (j * 23 + 5) % 64;
    s[j % 8] |= static_cast<uint8_t>((v[j] & 15) << (j < 8 ? 0 : 4));
    s[8 + j % 4] |= static_cast<uint8_t>((v[j] >> 4) << (2 * (j / 4)));
  }
  for (int j = 0; j < 16; ++j) EXPECT_EQ(q3_K_scale(j, s), v[j]) << j;
  // IQ4_XS: 8 6-bit scales, low nibbles in scales_l (sub-block 2i low, 2i+1 high nibble of byte
  // i), high 2 bits at bits 2k, 2k+1 of scales_h.
  block_iq4_xs b{};
  int ls[8];
  for (int k = 0; k < 8; ++k) {
    ls[k] = (k * 29 + 3) % 64;
    b.scales_l[k / 2] |= static_cast<uint8_t>((ls[k] & 15) << (4 * (k % 2)));
    b.scales_h |= static_cast<uint16_t>((ls[k] >> 4) << (2 * k));
  }
  for (int k = 0; k < 8; ++k) EXPECT_EQ(iq4_xs_scale(k, b), ls[k]) << k;
}

TEST(QuantLayout, Q4_0NibbleOrder) {
  block_q4_0 b{};
  b.d = fp32_to_fp16(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  ref::dequantize_row(DType::Q4_0, &b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * (j - 8)) << j;             // low nibbles: elements 0..15
    EXPECT_EQ(y[j + 16], 0.5f * (15 - j - 8)) << j;   // high nibbles: elements 16..31
  }
}

TEST(QuantLayout, Q4_KScalesMinsAndNibbles) {
  // 6-bit scales sc[s] = s + 1 + 40 * (s >= 4), mins m[s] = 2s + 17 * (s & 1), packed as in ggml:
  // bytes 0-3: sc[0..3] | (sc[4..7] >> 4) << 6; bytes 4-7: m[0..3] | (m[4..7] >> 4) << 6;
  // bytes 8-11: (sc[4..7] & 15) | (m[4..7] & 15) << 4.
  int sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = s + 1 + 40 * (s >= 4);
    m[s] = 2 * s + 17 * (s & 1);
  }
  block_q4_K b{};
  b.d = fp32_to_fp16(0.25f);
  b.dmin = fp32_to_fp16(0.125f);
  for (int i = 0; i < 4; ++i) {
    b.scales[i] = static_cast<uint8_t>(sc[i] | ((sc[i + 4] >> 4) << 6));
    b.scales[i + 4] = static_cast<uint8_t>(m[i] | ((m[i + 4] >> 4) << 6));
    b.scales[i + 8] = static_cast<uint8_t>((sc[i + 4] & 15) | ((m[i + 4] & 15) << 4));
  }
  // Element 64g + l (l < 32) is the low nibble of qs[32g + l], element 64g + 32 + l the high one.
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i % 16) | (((i + 3) % 16) << 4));
  float y[256];
  ref::dequantize_row(DType::Q4_K, &b, y, 256);
  for (int j = 0; j < 256; ++j) {
    const int s = j / 32, g = j / 64, l = j % 32;
    const int q = (s % 2 == 0) ? (32 * g + l) % 16 : (32 * g + l + 3) % 16;
    EXPECT_FLOAT_EQ(y[j], 0.25f * sc[s] * q - 0.125f * m[s]) << j;
  }
}

TEST(QuantLayout, Q6_KBitPlanes) {
  // Element 128h + 32k + l: low 4 bits from ql[64h + l + 32(k&1)] (low nibble for k < 2, high for
  // k >= 2), high 2 bits from qh[32h + l] bits 2k..2k+1; value d * scales[j/16] * (q - 32).
  block_q6_K b{};
  b.d = fp32_to_fp16(0.5f);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s * 9 - 70);
  std::vector<int> q(256);
  for (int j = 0; j < 256; ++j) q[j] = (j * 37 + 11) % 64;
  for (int j = 0; j < 256; ++j) {
    const int h = j / 128, k = (j % 128) / 32, l = j % 32;
    uint8_t& lo = b.ql[64 * h + l + 32 * (k & 1)];
    lo |= static_cast<uint8_t>((q[j] & 15) << (k >= 2 ? 4 : 0));
    b.qh[32 * h + l] |= static_cast<uint8_t>((q[j] >> 4) << (2 * k));
  }
  float y[256];
  ref::dequantize_row(DType::Q6_K, &b, y, 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], 0.5f * b.scales[j / 16] * (q[j] - 32)) << j;
}

TEST(QuantLayout, Q8_KBsumsAreGroupSums) {
  auto x = test::randn(512, 7);
  std::vector<block_q8_K> a(2);
  quantize_act_q8_K(x.data(), a.data(), 512);
  for (const auto& b : a)
    for (int k = 0; k < 16; ++k) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += b.qs[16 * k + j];
      EXPECT_EQ(b.bsums[k], s);
    }
}

// ---- both dispatch paths -----------------------------------------------------------------------

class QuantPaths : public test::TablePaths {};

TEST_P(QuantPaths, DequantMatchesReferenceExactly) {
  for (DType t : test::kAllTypes) {
    if (t == DType::F32) continue;
    for (int64_t n : test::test_lengths(t)) {
      const auto row = test::random_row(t, n, static_cast<uint32_t>(n) * 31 + static_cast<uint32_t>(t));
      std::vector<float> want(n), got(n, -1.0f);
      ref::dequantize_row(t, row.data(), want.data(), n);
      dequant_fn(k(), t)(row.data(), got.data(), n);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(fp32_to_bits(got[i]), fp32_to_bits(want[i])) << dtype_name(t) << " n=" << n << " i=" << i;
    }
  }
}

// Inputs that stress rounding: exact .5 ties after scaling, zeros, tiny and huge blocks.
std::vector<float> tricky_activation(int64_t n, uint32_t seed) {
  auto x = test::randn(n, seed, 3.0f);
  for (int64_t i = 0; i < n; i += 32) {
    const int64_t blk = i / 32;
    if (blk % 5 == 1) std::fill(x.begin() + i, x.begin() + std::min(n, i + 32), 0.0f);  // all zero
    if (blk % 5 == 2) {  // ties: amax 127 -> d = 1, values k + 0.5
      x[i] = 127.0f;
      for (int j = 1; j < 32 && i + j < n; ++j) x[i + j] = static_cast<float>(j - 16) + 0.5f;
    }
    if (blk % 5 == 3)
      for (int j = 0; j < 32 && i + j < n; ++j) x[i + j] *= 1e-30f;
    if (blk % 5 == 4)
      for (int j = 0; j < 32 && i + j < n; ++j) x[i + j] *= 1e4f;
  }
  return x;
}

TEST_P(QuantPaths, ActivationQ8_0IsBitExact) {
  for (int64_t n : {32, 64, 576, 1536, 4096}) {
    const auto x = tricky_activation(n, static_cast<uint32_t>(n));
    std::vector<uint8_t> want(act_q8_0_bytes(n), 0xAA), got(act_q8_0_bytes(n), 0x55);
    prepare_act_q8_0(x.data(), want.data(), n);
    k().quant_act_q8_0(x.data(), got.data(), n);
    ASSERT_EQ(want, got) << n;  // blocks, padding and the float scale trailer
    const auto* blocks = reinterpret_cast<const block_q8_0*>(got.data());
    for (int64_t b = 0; b < n / 32; ++b) ASSERT_EQ(act_q8_0_scales(got.data(), n)[b], fp16_to_fp32(blocks[b].d));
  }
}

TEST_P(QuantPaths, ActivationQ8_KIsBitExact) {
  for (int64_t n : {256, 512, 1536, 4096}) {
    auto x = tricky_activation(n, static_cast<uint32_t>(n) + 1);
    if (n == 512) std::fill(x.begin() + 256, x.end(), 0.0f);  // an all-zero super-block
    std::vector<block_q8_K> want(n / 256), got(n / 256);
    quantize_act_q8_K(x.data(), want.data(), n);
    k().quant_act_q8_K(x.data(), got.data(), n);
    ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(block_q8_K)), 0) << n;
    for (const auto& b : got)
      for (int j = 0; j < 256; ++j) ASSERT_GE(b.qs[j], -127);
  }
}

// Hand-computed blocks (issue 29 item 1): the activation quantisers of every path against values
// worked out here, not against the scalar quantisers they are otherwise compared with. Block
// amax 63.5 -> d = 63.5 / 127 = 0.5 exactly (fp16 0x3800), 1 / d = 2: x * 2 rounded; activations
// round ties to EVEN (vcvtps2dq), the weight quantiser quantize_row_q8_0 ties AWAY from zero
// (ggml's roundf).
TEST_P(QuantPaths, ActivationQ8_0HandComputed) {
  std::vector<float> x(64, 0.0f);
  const float in[] = {63.5f, 0.25f, 0.75f, -0.25f, 1.25f, -63.5f, 10.1f, -0.75f};
  std::copy(std::begin(in), std::end(in), x.begin());
  // second block: all zero -> d = 0, every q 0
  std::vector<uint8_t> act(act_q8_0_bytes(64), 0xAA);
  k().quant_act_q8_0(x.data(), act.data(), 64);
  const auto* b = reinterpret_cast<const block_q8_0*>(act.data());
  EXPECT_EQ(b[0].d, 0x3800);  // 0.5
  const int want[] = {127, 0, 2, 0, 2, -127, 20, -2};  // 0.5 -> 0, 1.5 -> 2, -0.5 -> 0, 2.5 -> 2, 20.2 -> 20
  for (int j = 0; j < 8; ++j) EXPECT_EQ(b[0].qs[j], want[j]) << j;
  for (int j = 8; j < 32; ++j) EXPECT_EQ(b[0].qs[j], 0) << j;
  EXPECT_EQ(b[1].d, 0);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(b[1].qs[j], 0) << j;
  EXPECT_EQ(act_q8_0_scales(act.data(), 64)[0], 0.5f);
  EXPECT_EQ(act_q8_0_scales(act.data(), 64)[1], 0.0f);
  // The weight quantiser: ties away from zero.
  block_q8_0 w[2];
  quantize_row_q8_0(x.data(), w, 64);
  EXPECT_EQ(w[0].d, 0x3800);
  const int want_w[] = {127, 1, 2, -1, 3, -127, 20, -2};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(w[0].qs[j], want_w[j]) << j;
}

// Q8_K: amax 127 -> scale 127 / 127 = 1, d = 1 (a float), ties to even, bsums the sums of each
// 16-element group (worked out here); an all-zero super-block is all zeros.
TEST_P(QuantPaths, ActivationQ8_KHandComputed) {
  std::vector<float> x(512, 0.0f);
  x[0] = 127.0f;
  x[1] = 2.5f;    // -> 2
  x[2] = 3.5f;    // -> 4
  x[3] = -2.5f;   // -> -2
  x[4] = -0.4f;   // -> 0
  x[16] = -127.0f;
  x[17] = 0.6f;   // -> 1
  x[255] = 5.5f;  // -> 6 (the last group)
  std::vector<block_q8_K> a(2);
  k().quant_act_q8_K(x.data(), a.data(), 512);
  EXPECT_EQ(a[0].d, 1.0f);
  const int want[] = {127, 2, 4, -2, 0};
  for (int j = 0; j < 5; ++j) EXPECT_EQ(a[0].qs[j], want[j]) << j;
  EXPECT_EQ(a[0].qs[16], -127);
  EXPECT_EQ(a[0].qs[17], 1);
  EXPECT_EQ(a[0].qs[255], 6);
  EXPECT_EQ(a[0].bsums[0], 127 + 2 + 4 - 2);
  EXPECT_EQ(a[0].bsums[1], -127 + 1);
  for (int g = 2; g < 15; ++g) EXPECT_EQ(a[0].bsums[g], 0) << g;
  EXPECT_EQ(a[0].bsums[15], 6);
  EXPECT_EQ(a[1].d, 0.0f);
  for (int j = 0; j < 256; ++j) ASSERT_EQ(a[1].qs[j], 0);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(a[1].bsums[g], 0);
  // A non-trivial scale: amax 254 -> d = 2, x = 5 -> 2.5 -> 2 (even), x = 7 -> 3.5 -> 4.
  std::vector<float> y(256, 0.0f);
  y[0] = -254.0f;
  y[1] = 5.0f;
  y[2] = 7.0f;
  block_q8_K c;
  k().quant_act_q8_K(y.data(), &c, 256);
  EXPECT_EQ(c.d, 2.0f);
  EXPECT_EQ(c.qs[0], -127);
  EXPECT_EQ(c.qs[1], 2);
  EXPECT_EQ(c.qs[2], 4);
  EXPECT_EQ(c.bsums[0], -127 + 2 + 4);
}

TEST_P(QuantPaths, F16ConversionsMatchScalar) {
  auto x = test::randn(1001, 5, 100.0f);
  x[3] = 65520.0f;   // rounds to inf
  x[4] = 1e-6f;      // subnormal half
  x[5] = -0.0f;
  x[6] = 6.103515625e-05f;
  std::vector<uint16_t> h(x.size());
  k().f32_to_f16(x.data(), h.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(h[i], fp32_to_fp16(x[i])) << i;
  std::vector<float> back(x.size());
  k().dequant_f16(h.data(), back.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(fp32_to_bits(back[i]), fp32_to_bits(fp16_to_fp32(h[i])));
}

INSTANTIATE_TEST_SUITE_P(Kernels, QuantPaths, test::all_paths(), test::path_name);

// ---- quantise -> dequantise error ---------------------------------------------------------------

struct RoundTrip {
  double max_abs_err_over_block_amax = 0;  // max over blocks of max|err| / max|x|
  double rel_rmse = 0;                     // ||err|| / ||x||
};

RoundTrip round_trip(DType t, const std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(x.size()), bs = std::max<int64_t>(32, dtype_info(t).block_size);
  std::vector<uint8_t> q(dtype_row_bytes(t, n));
  std::vector<float> y(n);
  quantize_row(t, x.data(), q.data(), n);
  dequantize_row(t, q.data(), y.data(), n);
  RoundTrip r;
  double se = 0, sx = 0;
  for (int64_t b = 0; b < n; b += bs) {
    double amax = 0, emax = 0;
    for (int64_t i = b; i < b + bs; ++i) {
      EXPECT_TRUE(std::isfinite(y[i])) << dtype_name(t) << " i=" << i;
      amax = std::max(amax, double(std::fabs(x[i])));
      emax = std::max(emax, double(std::fabs(y[i] - x[i])));
      se += double(y[i] - x[i]) * (y[i] - x[i]);
      sx += double(x[i]) * x[i];
    }
    if (amax > 0) r.max_abs_err_over_block_amax = std::max(r.max_abs_err_over_block_amax, emax / amax);
  }
  r.rel_rmse = sx > 0 ? std::sqrt(se / sx) : std::sqrt(se);
  return r;
}

TEST(QuantRoundTrip, ErrorBoundsPerType) {
  const auto x = test::randn(256 * 64, 99);
  struct Bound {
    DType t;
    double max_over_amax;  // hard bound from the format
    double rel_rmse;       // statistical bound on Gaussian data
  };
  // Q8_0: |err| <= d/2 + 127 |d - fp16(d)| <= 0.5/127 * (1 + 2^-10 * 127) of amax.
  // Q4_0: d = amax/8, the far end clamps at 7d: |err| <= d (+ fp16 rounding).
  // K-quants: no tight per-element bound (6/8-bit sub-block scales), measured RMSE with margin.
  const Bound bounds[] = {{DType::F16, 1.0 / 2048, 3e-4},  {DType::BF16, 1.0 / 256, 3e-3},
                          {DType::Q8_0, 0.0045, 0.01},     {DType::Q4_0, 0.126, 0.13},
                          {DType::Q4_K, 0.12, 0.095},      {DType::Q6_K, 0.03, 0.022}};
  for (const auto& b : bounds) {
    const RoundTrip r = round_trip(b.t, x);
    EXPECT_LE(r.max_abs_err_over_block_amax, b.max_over_amax) << dtype_name(b.t);
    EXPECT_LE(r.rel_rmse, b.rel_rmse) << dtype_name(b.t);
    RecordProperty(std::string(dtype_name(b.t)) + "_rel_rmse", std::to_string(r.rel_rmse));
  }
}

TEST(QuantRoundTrip, DegenerateBlocks) {
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    std::vector<float> zero(512, 0.0f);
    const RoundTrip rz = round_trip(t, zero);
    EXPECT_EQ(rz.rel_rmse, 0.0) << dtype_name(t);
    std::vector<float> pos(512, 3.0f), neg(512, -2.0f), spike(512, 0.0f), ramp(512);
    spike[77] = 1000.0f;
    for (int i = 0; i < 512; ++i) ramp[i] = static_cast<float>(i) - 100.0f;
    for (const auto* v : {&pos, &neg, &spike, &ramp}) {
      const RoundTrip r = round_trip(t, *v);
      EXPECT_LE(r.rel_rmse, 0.1) << dtype_name(t);
    }
  }
}

TEST(QuantRoundTrip, Q4_KAndQ6_KShiftedData) {
  // All-positive data exercises the Q4_K min; wide dynamic range across sub-blocks the 6-bit scales.
  auto x = test::randu(256 * 16, 3, 0.5f, 1.5f);
  EXPECT_LE(round_trip(DType::Q4_K, x).rel_rmse, 0.03);
  EXPECT_LE(round_trip(DType::Q6_K, x).rel_rmse, 0.03);
  auto w = test::randn(256 * 16, 4);
  for (size_t i = 0; i < w.size(); ++i) w[i] *= (i / 32 % 8 == 0) ? 20.0f : 0.5f;
  EXPECT_LE(round_trip(DType::Q4_K, w).rel_rmse, 0.1);
  EXPECT_LE(round_trip(DType::Q6_K, w).rel_rmse, 0.03);
}

TEST(QuantApi, UnsupportedTypesFailWithTypeName) {
  float x[32] = {};
  uint8_t buf[64] = {};
  try {
    dequantize_row(DType::IQ2_XS, buf, x, 256);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("iq2_xs"), std::string::npos) << e.what();
  }
  EXPECT_THROW(quantize_row(DType::IQ3_XXS, x, buf, 256), Error);
  EXPECT_THROW(quantize_row(DType::Q8_0, x, buf, 31), Error);
  EXPECT_THROW(dequantize_row(DType::Q5_0, buf, x, 31), Error);
  for (DType t : {DType::IQ1_S, DType::IQ1_M, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS,
                  DType::IQ3_S, DType::Q8_K, DType::I8, DType::F64})
    EXPECT_FALSE(dtype_computable(t)) << dtype_name(t);
  for (DType t : test::kAllTypes) EXPECT_TRUE(dtype_computable(t)) << dtype_name(t);
}

TEST(QuantApi, ImportanceMatrixTypesAreRefusedByName) {
  // The i-quants that need an importance matrix: the message names the type, says why and lists
  // every type that works.
  for (DType t : {DType::IQ1_S, DType::IQ1_M, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS,
                  DType::IQ3_S}) {
    const std::string msg = cannot_compute_message(t);
    EXPECT_NE(msg.find(std::string(dtype_name(t))), std::string::npos) << msg;
    EXPECT_NE(msg.find("importance-matrix"), std::string::npos) << msg;
    for (DType ok : test::kAllTypes) EXPECT_NE(msg.find(std::string(dtype_name(ok))), std::string::npos) << msg;
  }
  EXPECT_EQ(cannot_compute_message(DType::I32).find("importance"), std::string::npos);
}

}  // namespace
}  // namespace kvs::kernels
