// The weight quantisers kvshrink writes GGUF files with (kernels/quant.h):
//  - byte-identical with llama.cpp's own quantisers on a fixture made by linking llama.cpp's
//    ggml-quants.c (data/make_ggml_quant_reference.sh), for all 12 block types;
//  - hand-built known answers: blocks whose values are exactly representable come back exactly,
//    with the scales, nibbles and bit planes worked out by hand;
//  - quantise -> decode error bounds at weight-like distributions, and the size/quality order of
//    the types;
//  - the test decoder (quant_decode.h) agrees with the library's reference dequantiser for every
//    type the library can dequantise.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "kernels/ref/ref.h"
#include "quant_decode.h"
#include "quant_fixture_input.h"

namespace kvs::kernels {
namespace {

using test::decode_row;

constexpr DType kBlockTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K,
                                 DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS};

std::vector<uint8_t> quantize(DType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(dtype_row_bytes(t, static_cast<int64_t>(x.size())), 0xCD);
  quantize_weights(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  return q;
}

std::vector<float> decode(DType t, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  decode_row(t, q.data(), y.data(), n);
  return y;
}

std::vector<uint8_t> from_hex(const std::string& h) {
  std::vector<uint8_t> out(h.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoi(h.substr(2 * i, 2), nullptr, 16));
  return out;
}

TEST(QuantWeights, BlockLayoutsMatchTheDtypeTable) {
  EXPECT_EQ(sizeof(block_q4_1), dtype_info(DType::Q4_1).type_size);
  EXPECT_EQ(sizeof(block_q5_0), dtype_info(DType::Q5_0).type_size);
  EXPECT_EQ(sizeof(block_q5_1), dtype_info(DType::Q5_1).type_size);
  EXPECT_EQ(sizeof(block_iq4_nl), dtype_info(DType::IQ4_NL).type_size);
  EXPECT_EQ(sizeof(block_q2_K), dtype_info(DType::Q2_K).type_size);
  EXPECT_EQ(sizeof(block_q3_K), dtype_info(DType::Q3_K).type_size);
  EXPECT_EQ(sizeof(block_q5_K), dtype_info(DType::Q5_K).type_size);
  EXPECT_EQ(sizeof(block_iq4_xs), dtype_info(DType::IQ4_XS).type_size);
  // Field offsets of ggml-common.h.
  EXPECT_EQ(offsetof(block_q5_0, qs), 6u);
  EXPECT_EQ(offsetof(block_q5_1, qh), 4u);
  EXPECT_EQ(offsetof(block_q2_K, d), 80u);
  EXPECT_EQ(offsetof(block_q3_K, scales), 96u);
  EXPECT_EQ(offsetof(block_q3_K, d), 108u);
  EXPECT_EQ(offsetof(block_q5_K, qh), 16u);
  EXPECT_EQ(offsetof(block_q5_K, qs), 48u);
  EXPECT_EQ(offsetof(block_iq4_xs, scales_l), 4u);
  EXPECT_EQ(offsetof(block_iq4_xs, qs), 8u);
}

// ---- llama.cpp's bytes ---------------------------------------------------------------------------

struct Reference {
  const char* type;
  const char* hex;
};
const Reference kGgml[] = {
#include "data/ggml_quant_reference.inc"
};

TEST(QuantWeights, ByteIdenticalWithLlamaCppQuantisers) {
  const std::vector<float> x = test::fixture_input();
  ASSERT_EQ(std::size(kGgml), std::size(kBlockTypes));
  for (const Reference& r : kGgml) {
    DType t;
    ASSERT_TRUE(dtype_from_name(r.type, &t)) << r.type;
    const std::vector<uint8_t> want = from_hex(r.hex), got = quantize(t, x);
    ASSERT_EQ(got.size(), want.size()) << r.type;
    const size_t bytes = static_cast<size_t>(dtype_info(t).type_size);
    int differing = 0;
    for (size_t b = 0; b < want.size() / bytes; ++b)
      if (std::memcmp(want.data() + b * bytes, got.data() + b * bytes, bytes) != 0) {
        if (differing++ == 0) ADD_FAILURE() << r.type << ": block " << b << " differs from llama.cpp's";
      }
    EXPECT_EQ(differing, 0) << r.type << " (" << want.size() / bytes << " blocks)";
  }
}

// ---- known answers: exactly representable blocks -----------------------------------------------

// 32 quants covering the whole range with both ends present.
std::vector<int> ramp(int lo, int hi) {
  std::vector<int> q(32);
  for (int j = 0; j < 32; ++j) q[j] = lo + (j * 7) % (hi - lo + 1);
  q[3] = lo;
  q[20] = hi;
  return q;
}

TEST(QuantWeights, KnownAnswer32ElementBlocks) {
  {  // Q8_0: amax 127 -> d = 1, q = x; ties go away from zero (llama.cpp's roundf).
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = static_cast<float>((j * 37) % 255 - 127);
    x[5] = 127.0f;
    auto q = quantize(DType::Q8_0, x);
    const auto& b = *reinterpret_cast<const block_q8_0*>(q.data());
    EXPECT_EQ(b.d, 0x3C00);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], static_cast<int>(x[j])) << j;
    x[7] = 2.5f;
    x[8] = -2.5f;
    x[9] = 3.5f;
    q = quantize(DType::Q8_0, x);
    const auto& t = *reinterpret_cast<const block_q8_0*>(q.data());
    EXPECT_EQ(t.qs[7], 3);
    EXPECT_EQ(t.qs[8], -3);
    EXPECT_EQ(t.qs[9], 4);
  }
  {  // Q4_0: x = 0.5 (q - 8), q = 0 the largest magnitude -> d = -4 / -8 = 0.5 (fp16 0x3800).
    const auto qv = ramp(0, 15);
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = 0.5f * (qv[j] - 8);
    const auto q = quantize(DType::Q4_0, x);
    const auto& b = *reinterpret_cast<const block_q4_0*>(q.data());
    EXPECT_EQ(b.d, 0x3800);
    for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], qv[j] | (qv[j + 16] << 4)) << j;
  }
  {  // Q4_1: x = -1 + 0.25 q -> d = 3.75 / 15 = 0.25 (0x3400), m = -1 (0xBC00).
    const auto qv = ramp(0, 15);
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = -1.0f + 0.25f * qv[j];
    const auto q = quantize(DType::Q4_1, x);
    const auto& b = *reinterpret_cast<const block_q4_1*>(q.data());
    EXPECT_EQ(b.d, 0x3400);
    EXPECT_EQ(b.m, 0xBC00);
    for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], qv[j] | (qv[j + 16] << 4)) << j;
  }
  {  // Q5_0: x = 0.25 (q - 16), q = 0 present -> d = -4 / -16 = 0.25; fifth bits in qh bit j.
    const auto qv = ramp(0, 31);
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = 0.25f * (qv[j] - 16);
    const auto q = quantize(DType::Q5_0, x);
    const auto& b = *reinterpret_cast<const block_q5_0*>(q.data());
    EXPECT_EQ(b.d, 0x3400);
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>(qv[j] >> 4) << j;
    for (int k = 0; k < 4; ++k) EXPECT_EQ(b.qh[k], (qh >> (8 * k)) & 0xFF) << k;
    for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], (qv[j] & 15) | ((qv[j + 16] & 15) << 4)) << j;
  }
  {  // Q5_1: x = -2 + 0.125 q -> d = 3.875 / 31 = 0.125 (0x3000), m = -2 (0xC000).
    const auto qv = ramp(0, 31);
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = -2.0f + 0.125f * qv[j];
    const auto q = quantize(DType::Q5_1, x);
    const auto& b = *reinterpret_cast<const block_q5_1*>(q.data());
    EXPECT_EQ(b.d, 0x3000);
    EXPECT_EQ(b.m, 0xC000);
    uint32_t qh = 0;
    for (int j = 0; j < 32; ++j) qh |= static_cast<uint32_t>(qv[j] >> 4) << j;
    for (int k = 0; k < 4; ++k) EXPECT_EQ(b.qh[k], (qh >> (8 * k)) & 0xFF) << k;
    for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], (qv[j] & 15) | ((qv[j + 16] & 15) << 4)) << j;
  }
  {  // IQ4_NL: x = 2^-7 * level[idx] with level -127 present: d = 2^-7 (fp16 0x2000), idx back.
    const auto idx = ramp(0, 15);
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[j] = 0.0078125f * kIQ4NLValues[idx[j]];
    const auto q = quantize(DType::IQ4_NL, x);
    const auto& b = *reinterpret_cast<const block_iq4_nl*>(q.data());
    EXPECT_EQ(b.d, 0x2000);
    for (int j = 0; j < 16; ++j) EXPECT_EQ(b.qs[j], idx[j] | (idx[j + 16] << 4)) << j;
  }
}

// 256 values x = s[sub-block] * q with q over [lo, hi] (both ends in every sub-block).
std::vector<float> graded_superblock(int sub, const std::vector<float>& s, int lo, int hi) {
  std::vector<float> x(256);
  for (int j = 0; j < 256; ++j) {
    const int k = j / sub, i = j % sub;
    const int q = i == 1 ? lo : i == 2 ? hi : lo + (j * 5 + k) % (hi - lo + 1);
    x[j] = s[k] * static_cast<float>(q);
  }
  return x;
}

void expect_exact(DType t, const std::vector<float>& x) {
  const auto y = decode(t, quantize(t, x), static_cast<int64_t>(x.size()));
  for (size_t j = 0; j < x.size(); ++j) ASSERT_EQ(y[j], x[j]) << dtype_name(t) << " element " << j;
}

TEST(QuantWeights, KnownAnswerSuperBlocks) {
  const float u = 1.0f / 1024;  // super-block unit: fp16-exact
  {  // Q4_K / Q5_K: sub-block scales m_k * u (6-bit m_k, 63 the largest), min 0: d = u, sc = m_k.
    const std::vector<float> m = {63, 40, 17, 1, 63, 32, 5, 50};
    std::vector<float> s(8);
    for (int k = 0; k < 8; ++k) s[k] = m[k] * u;
    for (auto [t, nmax] : {std::pair{DType::Q4_K, 15}, std::pair{DType::Q5_K, 31}}) {
      const auto x = graded_superblock(32, s, 0, nmax);
      expect_exact(t, x);
      const auto q = quantize(t, x);
      const uint16_t d = t == DType::Q4_K ? reinterpret_cast<const block_q4_K*>(q.data())->d
                                          : reinterpret_cast<const block_q5_K*>(q.data())->d;
      const uint8_t* sc = t == DType::Q4_K ? reinterpret_cast<const block_q4_K*>(q.data())->scales
                                           : reinterpret_cast<const block_q5_K*>(q.data())->scales;
      EXPECT_EQ(d, fp32_to_fp16(u)) << dtype_name(t);
      for (int k = 0; k < 8; ++k) {
        uint8_t scale, min;
        q4_K_scale_min(k, sc, &scale, &min);
        EXPECT_EQ(scale, m[k]) << dtype_name(t) << " sub-block " << k;
        EXPECT_EQ(min, 0) << dtype_name(t) << " sub-block " << k;
      }
    }
  }
  {  // Q2_K: 4-bit scales m_k (15 the largest) against d = 2^-8, q in [0, 3], min 0.
    const std::vector<float> m = {15, 3, 9, 1, 15, 7, 12, 2, 4, 15, 6, 10, 8, 5, 11, 14};
    std::vector<float> s(16);
    for (int k = 0; k < 16; ++k) s[k] = m[k] / 256.0f;
    const auto x = graded_superblock(16, s, 0, 3);
    expect_exact(DType::Q2_K, x);
    const auto q = quantize(DType::Q2_K, x);
    const auto& b = *reinterpret_cast<const block_q2_K*>(q.data());
    EXPECT_EQ(b.d, fp32_to_fp16(1.0f / 256));
    for (int k = 0; k < 16; ++k) EXPECT_EQ(b.scales[k], m[k]) << k;  // high nibble (min) 0
  }
  {  // Q3_K: q in [-4, 3], scales m_k * 2^-11; the largest (32) gives d = -(1/64) / 32 = -2^-11 and
     // 6-bit scale -32 (stored 0), the others -m_k (stored 32 - m_k).
    const std::vector<float> m = {32, 16, 8, 4, 2, 1, 32, 24, 12, 6, 3, 32, 20, 10, 5, 30};
    std::vector<float> s(16);
    for (int k = 0; k < 16; ++k) s[k] = m[k] / 2048.0f;
    const auto x = graded_superblock(16, s, -4, 3);
    expect_exact(DType::Q3_K, x);
    const auto q = quantize(DType::Q3_K, x);
    const auto& b = *reinterpret_cast<const block_q3_K*>(q.data());
    EXPECT_EQ(b.d, fp32_to_fp16(-1.0f / 2048));
    for (int k = 0; k < 16; ++k) EXPECT_EQ(q3_K_scale(k, b.scales), 32 - m[k]) << k;
  }
  {  // Q6_K: q in [-32, 31], one scale 2^-6 everywhere: d = -2^-13, every int8 scale -128.
    const auto x = graded_superblock(16, std::vector<float>(16, 1.0f / 64), -32, 31);
    expect_exact(DType::Q6_K, x);
    const auto q = quantize(DType::Q6_K, x);
    const auto& b = *reinterpret_cast<const block_q6_K*>(q.data());
    EXPECT_EQ(b.d, fp32_to_fp16(-1.0f / 8192));
    for (int k = 0; k < 16; ++k) EXPECT_EQ(b.scales[k], -128) << k;
  }
  {  // IQ4_XS: sub-block scales (l_k - 32) * 2^-12 with l_k - 32 = -32 the largest: d = 2^-12.
    const std::vector<int> l = {-32, -20, -7, -1, -32, -16, -3, -25};
    std::vector<float> x(256);
    for (int j = 0; j < 256; ++j) {
      const int k = j / 32, i = j % 32;
      const int idx = i == 0 ? 0 : (j * 7 + k) % 16;  // level -127 present: it sets the sign
      x[j] = static_cast<float>(l[k]) / 4096.0f * kIQ4NLValues[idx];
    }
    expect_exact(DType::IQ4_XS, x);
    const auto q = quantize(DType::IQ4_XS, x);
    const auto& b = *reinterpret_cast<const block_iq4_xs*>(q.data());
    EXPECT_EQ(b.d, fp32_to_fp16(1.0f / 4096));
    for (int k = 0; k < 8; ++k) EXPECT_EQ(iq4_xs_scale(k, b) - 32, l[k]) << k;
  }
}

TEST(QuantWeights, AllZeroBlocksDecodeToZero) {
  const std::vector<float> zero(512, 0.0f);
  for (DType t : kBlockTypes) {
    const auto y = decode(t, quantize(t, zero), 512);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

// ---- error bounds ----------------------------------------------------------------------------------

// Weight-like rows: Gaussian (sigma 0.02), Student-t with 3 degrees of freedom (heavy tails) and
// uniform (make-model's random weights); 64 super-blocks each.
std::vector<std::vector<float>> weight_rows() {
  std::mt19937 rng(11);
  std::normal_distribution<float> gauss(0.0f, 0.02f);
  std::student_t_distribution<float> student(3.0f);
  std::uniform_real_distribution<float> uni(-0.035f, 0.035f);
  std::vector<std::vector<float>> rows(3, std::vector<float>(256 * 64));
  for (auto& v : rows[0]) v = gauss(rng);
  for (auto& v : rows[1]) v = 0.01f * student(rng);
  for (auto& v : rows[2]) v = uni(rng);
  return rows;
}

double rel_rmse(DType t, const std::vector<float>& x) {
  const auto y = decode(t, quantize(t, x), static_cast<int64_t>(x.size()));
  double se = 0, sx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    se += double(y[i] - x[i]) * (y[i] - x[i]);
    sx += double(x[i]) * x[i];
  }
  return std::sqrt(se / sx);
}

TEST(QuantWeights, ErrorBoundsAtWeightLikeDistributions) {
  // Relative RMSE ceilings per type (Gaussian, Student-t3, uniform), 10% above what these rows
  // measure (Q8_0 on the Gaussian: 0.0053, the step amax/127 of ~2.1 sigma over sqrt(12)); the
  // order of the types is checked on the Gaussian row.
  const std::map<DType, std::array<double, 3>> ceiling = {
      {DType::Q2_K, {0.33, 0.39, 0.26}},    {DType::Q3_K, {0.166, 0.212, 0.138}},  {DType::Q4_0, {0.095, 0.141, 0.072}},
      {DType::Q4_1, {0.087, 0.110, 0.068}}, {DType::IQ4_NL, {0.084, 0.112, 0.071}}, {DType::IQ4_XS, {0.084, 0.113, 0.072}},
      {DType::Q4_K, {0.079, 0.102, 0.061}}, {DType::Q5_0, {0.047, 0.072, 0.035}},  {DType::Q5_1, {0.042, 0.053, 0.033}},
      {DType::Q5_K, {0.040, 0.052, 0.031}}, {DType::Q6_K, {0.020, 0.028, 0.015}},  {DType::Q8_0, {0.0059, 0.0090, 0.0042}}};
  const auto rows = weight_rows();
  std::map<DType, double> gauss;
  for (const auto& [t, c] : ceiling)
    for (size_t r = 0; r < rows.size(); ++r) {
      const double e = rel_rmse(t, rows[r]);
      EXPECT_LE(e, c[r]) << dtype_name(t) << " row " << r;
      if (r == 0) gauss[t] = e;
      RecordProperty(std::string(dtype_name(t)) + "_row" + std::to_string(r), std::to_string(e));
    }
  // More bits, less error; within one size the better fits win.
  const DType order[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q8_0};
  for (size_t i = 1; i < std::size(order); ++i) EXPECT_LT(gauss[order[i]], gauss[order[i - 1]]) << dtype_name(order[i]);
  EXPECT_LT(gauss[DType::Q5_0], gauss[DType::Q4_0]);
  EXPECT_LT(gauss[DType::Q5_1], gauss[DType::Q4_1]);
  EXPECT_LT(gauss[DType::IQ4_NL], gauss[DType::Q4_0]);  // non-linear levels fit a bell curve better
  EXPECT_LT(gauss[DType::Q4_K], gauss[DType::Q4_0]);
}

TEST(QuantWeights, PerElementBoundsOf32ElementTypes) {
  // Round to nearest on a uniform grid: |err| <= step / 2, plus the fp16 rounding of d (relative
  // 2^-11, times up to 127 / 15 / 31 steps) and of m; Q4_0/Q5_0 clamp the far end at 7d / 15d, so
  // their bound is one step.
  const auto x = weight_rows()[1];  // heavy tails: large ranges
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q5_0, DType::Q4_1, DType::Q5_1}) {
    const auto y = decode(t, quantize(t, x), static_cast<int64_t>(x.size()));
    for (size_t b = 0; b < x.size(); b += 32) {
      float lo = x[b], hi = x[b], amax = 0;
      for (size_t i = b; i < b + 32; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
        amax = std::max(amax, std::fabs(x[i]));
      }
      const double bound = t == DType::Q8_0   ? amax / 127.0 * (0.5 + 127.0 / 2048)
                           : t == DType::Q4_0 ? amax / 8.0 * (1 + 8.0 / 2048)
                           : t == DType::Q5_0 ? amax / 16.0 * (1 + 16.0 / 2048)
                           : t == DType::Q4_1 ? (hi - lo) / 15.0 * (0.5 + 15.0 / 2048) + std::fabs(lo) / 2048
                                              : (hi - lo) / 31.0 * (0.5 + 31.0 / 2048) + std::fabs(lo) / 2048;
      for (size_t i = b; i < b + 32; ++i) ASSERT_LE(std::fabs(y[i] - x[i]), bound) << dtype_name(t) << " i=" << i;
    }
  }
}

// ---- the library's dequantiser ----------------------------------------------------------------

TEST(QuantWeights, TestDecoderAgreesWithReferenceDequantiser) {
  const auto x = weight_rows()[0];
  const int64_t n = static_cast<int64_t>(x.size());
  int checked = 0;
  for (DType t : kBlockTypes) {
    if (!dtype_computable(t)) continue;  // the library cannot dequantise it yet
    const auto q = quantize(t, x);
    const auto want = decode(t, q, n);
    std::vector<float> got(static_cast<size_t>(n));
    ref::dequantize_row(t, q.data(), got.data(), n);
    for (int64_t i = 0; i < n; ++i)  // same products, possibly in another order: a few ulps
      ASSERT_NEAR(got[i], want[i], 1e-6f * std::fabs(want[i]) + 1e-12f) << dtype_name(t) << " i=" << i;
    ++checked;
  }
  EXPECT_GE(checked, 4);  // Q4_0, Q8_0, Q4_K, Q6_K at least
  RecordProperty("types_checked", checked);
}

TEST(QuantWeights, BadLengthsAndTypesFailWithTheirNames) {
  std::vector<float> x(300, 0.1f);
  std::vector<uint8_t> y(4096);
  try {
    quantize_weights(DType::Q4_K, x.data(), y.data(), 300);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("q4_k"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("300"), std::string::npos) << e.what();
  }
  try {
    quantize_weights(DType::IQ2_XS, x.data(), y.data(), 256);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("iq2_xs"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(weights_writable(DType::IQ3_S));
  for (DType t : kBlockTypes) EXPECT_TRUE(weights_writable(t)) << dtype_name(t);
}

}  // namespace
}  // namespace kvs::kernels
