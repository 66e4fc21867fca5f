// Known-answer blocks for the scalar reference dequantisers of Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K,
// Q3_K, Q5_K and IQ4_XS: each block is built by hand, element by element, from the GGML layout
// (ggml-common.h / ggml-quants.c, restated in each test), then decoded by ref::dequantize_row and
// compared with the value formula and with a few values worked out by hand (literals). This checks
// the references themselves; every fast kernel is then checked against them (dot_test, quant_test,
// matmul_test).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/fp16.h"
#include "kernels/quant.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels {
namespace {

// The IQ4_NL grid, as printed in ggml-common.h (kvalues_iq4nl).
constexpr int kGrid[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Sets element j's 4-bit value in a 32-element block's 16 nibble bytes: elements 0..15 are the low
// nibbles of bytes 0..15, elements 16..31 the high nibbles.
void set_nib32(uint8_t* qs, int j, int v) {
  if (j < 16)
    qs[j] = static_cast<uint8_t>((qs[j] & 0xF0) | v);
  else
    qs[j - 16] = static_cast<uint8_t>((qs[j - 16] & 0x0F) | (v << 4));
}

template <class Block>
std::vector<float> decode(DType t, const Block& b, int n) {
  std::vector<float> y(n);
  ref::dequantize_row(t, &b, y.data(), n);
  return y;
}

TEST(KnownBlocks, Q4_1) {
  // value = d * q + m, q the element's nibble.
  block_q4_1 b{};
  b.d = fp32_to_fp16(0.5f);
  b.m = fp32_to_fp16(-1.0f);
  int q[32];
  for (int j = 0; j < 32; ++j) set_nib32(b.qs, j, q[j] = (j * 7 + 3) % 16);
  const auto y = decode(DType::Q4_1, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * q[j] - 1.0f) << j;
  EXPECT_EQ(y[0], 0.5f);    // q = 3
  EXPECT_EQ(y[1], 4.0f);    // q = 10
  EXPECT_EQ(y[16], 0.5f);   // q = (112 + 3) % 16 = 3
  EXPECT_EQ(y[17], 4.0f);   // q = 122 % 16 = 10
  EXPECT_EQ(b.qs[0], 0x33);  // element 0 low nibble 3, element 16 high nibble 3
  EXPECT_EQ(b.qs[1], 0xAA);  // elements 1 and 17: 10, 10
}

TEST(KnownBlocks, Q5_0) {
  // value = d * (q - 16), q = nibble | (bit j of qh as a little-endian uint32) << 4.
  block_q5_0 b{};
  b.d = fp32_to_fp16(0.25f);
  int q[32];
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) {
    q[j] = (j * 11 + 5) % 32;
    set_nib32(b.qs, j, q[j] & 15);
    qh |= static_cast<uint32_t>(q[j] >> 4) << j;
  }
  std::memcpy(b.qh, &qh, 4);
  const auto y = decode(DType::Q5_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.25f * (q[j] - 16)) << j;
  EXPECT_EQ(y[0], -2.75f);  // q = 5
  EXPECT_EQ(y[1], 0.0f);    // q = 16: nibble 0, high bit 1
  EXPECT_EQ(y[31], 0.25f * (((31 * 11 + 5) % 32) - 16));
  // A hand-set block: every high bit on, nibble 15 everywhere -> q = 31 -> 15 d.
  block_q5_0 c{};
  c.d = fp32_to_fp16(2.0f);
  std::memset(c.qh, 0xFF, 4);
  std::memset(c.qs, 0xFF, 16);
  for (float v : decode(DType::Q5_0, c, 32)) EXPECT_EQ(v, 30.0f);
}

TEST(KnownBlocks, Q5_1) {
  // value = d * q + m, q as Q5_0 (no -16).
  block_q5_1 b{};
  b.d = fp32_to_fp16(0.125f);
  b.m = fp32_to_fp16(2.0f);
  int q[32];
  uint32_t qh = 0;
  for (int j = 0; j < 32; ++j) {
    q[j] = (j * 13 + 1) % 32;
    set_nib32(b.qs, j, q[j] & 15);
    qh |= static_cast<uint32_t>(q[j] >> 4) << j;
  }
  std::memcpy(b.qh, &qh, 4);
  const auto y = decode(DType::Q5_1, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.125f * q[j] + 2.0f) << j;
  EXPECT_EQ(y[0], 2.125f);  // q = 1
  EXPECT_EQ(y[2], 5.375f);  // q = 27: nibble 11, high bit 1
}

TEST(KnownBlocks, IQ4_NL) {
  // value = d * grid[nibble].
  block_iq4_nl b{};
  b.d = fp32_to_fp16(0.5f);
  for (int j = 0; j < 32; ++j) set_nib32(b.qs, j, j % 16);
  const auto y = decode(DType::IQ4_NL, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], 0.5f * kGrid[j % 16]) << j;
  EXPECT_EQ(y[0], -63.5f);
  EXPECT_EQ(y[15], 56.5f);
  EXPECT_EQ(y[24], 0.5f);  // grid[8] = 1
}

TEST(KnownBlocks, Q2_K) {
  // value = d * (scales[j / 16] & 15) * q - dmin * (scales[j / 16] >> 4); q = bits 2k..2k+1 of
  // qs[32 h + l] for element 128 h + 32 k + l.
  block_q2_K b{};
  b.d = fp32_to_fp16(0.5f);
  b.dmin = fp32_to_fp16(0.25f);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<uint8_t>(((s + 1) % 16) | ((15 - s) << 4));
  int q[256];
  for (int j = 0; j < 256; ++j) {
    q[j] = (j * 5 + j / 64) % 4;
    const int h = j / 128, k = (j % 128) / 32, l = j % 32;
    b.qs[32 * h + l] |= static_cast<uint8_t>(q[j] << (2 * k));
  }
  const auto y = decode(DType::Q2_K, b, 256);
  for (int j = 0; j < 256; ++j) {
    const int s = j / 16;
    EXPECT_EQ(y[j], 0.5f * ((s + 1) % 16) * q[j] - 0.25f * (15 - s)) << j;
  }
  EXPECT_EQ(y[0], -3.75f);         // q 0, scale 1, min 15
  EXPECT_EQ(y[1], -3.25f);  // q 1: 0.5 - 3.75
  EXPECT_EQ(y[255], 0.0f);         // sub-block 15: scale 16 % 16 = 0, min 0
}

TEST(KnownBlocks, Q3_K) {
  // value = d * (sc - 32) * (q2 - 4 * (1 - hbit)), sc the 6-bit scale of sub-block j / 16 (low
  // 4 bits: byte j' % 8, low nibble for j' < 8; high 2 bits: byte 8 + j' % 4, bits 2 (j' / 4)),
  // q2 as Q2_K, hbit = bit j / 32 of hmask[j % 32].
  block_q3_K b{};
  b.d = fp32_to_fp16(0.5f);
  int sc[16];
  for (int s = 0; s < 16; ++s) {
    sc[s] = (s * 9 + 2) % 64;
    b.scales[s % 8] |= static_cast<uint8_t>((sc[s] & 15) << (s < 8 ? 0 : 4));
    b.scales[8 + s % 4] |= static_cast<uint8_t>((sc[s] >> 4) << (2 * (s / 4)));
  }
  int q[256];  // in [-4, 3]
  for (int j = 0; j < 256; ++j) {
    q[j] = (j * 3 + j / 32) % 8 - 4;
    const int low2 = (q[j] + 4) & 3, hbit = (q[j] + 4) >> 2;
    const int h = j / 128, k = (j % 128) / 32, l = j % 32;
    b.qs[32 * h + l] |= static_cast<uint8_t>(low2 << (2 * k));
    b.hmask[l] |= static_cast<uint8_t>(hbit << (j / 32));
  }
  const auto y = decode(DType::Q3_K, b, 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], 0.5f * (sc[j / 16] - 32) * q[j]) << j;
  EXPECT_EQ(y[0], 60.0f);   // scale 2, q -4 (low bits 0, hbit 0): 0.5 * -30 * -4
  EXPECT_EQ(y[32], 18.0f);   // sub-block 2: scale 20, q = 97 % 8 - 4 = -3: 0.5 * -12 * -3
}

TEST(KnownBlocks, Q5_K) {
  // value = d * sc[s] * q - dmin * m[s], s = j / 32; sc/m packed as Q4_K; q = low 4 bits from
  // qs[32 (s / 2) + j % 32] (low nibble for s even) | bit s of qh[j % 32] << 4.
  int sc[8], m[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = (s * 13 + 7) % 64;
    m[s] = (s * 29 + 1) % 64;
  }
  block_q5_K b{};
  b.d = fp32_to_fp16(0.125f);
  b.dmin = fp32_to_fp16(0.5f);
  for (int i = 0; i < 4; ++i) {
    b.scales[i] = static_cast<uint8_t>(sc[i] | ((sc[i + 4] >> 4) << 6));
    b.scales[i + 4] = static_cast<uint8_t>(m[i] | ((m[i + 4] >> 4) << 6));
    b.scales[i + 8] = static_cast<uint8_t>((sc[i + 4] & 15) | ((m[i + 4] & 15) << 4));
  }
  int q[256];
  for (int j = 0; j < 256; ++j) {
    q[j] = (j * 7 + j / 32) % 32;
    const int s = j / 32, l = j % 32;
    b.qs[32 * (s / 2) + l] |= static_cast<uint8_t>((q[j] & 15) << (s % 2 == 0 ? 0 : 4));
    b.qh[l] |= static_cast<uint8_t>((q[j] >> 4) << s);
  }
  const auto y = decode(DType::Q5_K, b, 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], 0.125f * sc[j / 32] * q[j] - 0.5f * m[j / 32]) << j;
  EXPECT_EQ(y[0], -0.5f);                        // sc 7, q 0, m 1
  EXPECT_EQ(y[5], 2.125f);   // q = 35 % 32 = 3: 0.125 * 7 * 3 - 0.5
  EXPECT_EQ(y[36], 57.5f);   // s = 1: sc 20, m 30, q = 253 % 32 = 29 (nibble 13, high bit 1)
}

TEST(KnownBlocks, IQ4_XS) {
  // value = d * (ls - 32) * grid[nibble]; sub-block s (32 elements) owns qs[16 s .. 16 s + 15] in
  // the 32-element nibble order; ls = scales_l[s / 2] nibble s % 2 | (scales_h bits 2s, 2s+1) << 4.
  block_iq4_xs b{};
  b.d = fp32_to_fp16(0.25f);
  int ls[8];
  for (int s = 0; s < 8; ++s) {
    ls[s] = (s * 19 + 11) % 64;
    b.scales_l[s / 2] |= static_cast<uint8_t>((ls[s] & 15) << (4 * (s % 2)));
    b.scales_h |= static_cast<uint16_t>((ls[s] >> 4) << (2 * s));
  }
  int idx[256];
  for (int j = 0; j < 256; ++j) set_nib32(b.qs + 16 * (j / 32), j % 32, idx[j] = (j * 5 + 3) % 16);
  const auto y = decode(DType::IQ4_XS, b, 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[j], 0.25f * (ls[j / 32] - 32) * kGrid[idx[j]]) << j;
  EXPECT_EQ(y[0], 341.25f);  // ls 11, index 3: 0.25 * -21 * -65
  EXPECT_EQ(y[32], 32.5f);   // sub-block 1: ls 30, index 163 % 16 = 3: 0.25 * -2 * -65
  EXPECT_EQ(y[33], -0.5f);   // index 168 % 16 = 8: grid 1
}

}  // namespace
}  // namespace kvs::kernels
