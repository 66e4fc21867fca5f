// The KV cache's row quantisers (KernelTable::quant_kv_q8_0 / quant_kv_q4_0, what every appended
// K / V row of a Q8_0 or Q4_0 cache goes through): every table bit-exact with the scalar
// quantize_row_q8_0 / quantize_row_q4_0 on rows built to hit their edge cases, and both against
// blocks worked out by hand here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/quant.h"

namespace kvs::kernels {
namespace {

using test::Path;

class KvQuant : public test::TablePaths {};

// Rows of n values whose 32-value blocks each exercise one case (block index mod 12).
std::vector<float> edge_rows(int64_t n, uint32_t seed) {
  auto x = test::randn(n, seed, 2.0f);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    float* b = x.data() + i;
    switch ((i / 32) % 12) {
      case 1: std::fill(b, b + 32, 0.0f); break;                               // all zero
      case 2: std::fill(b, b + 32, -0.0f); break;                              // all -0
      case 3:                                                                  // exact ties, Q8_0: d = 1
        b[0] = 127.0f;
        for (int j = 1; j < 32; ++j) b[j] = static_cast<float>(j - 16) + 0.5f;
        break;
      case 4:                                                                  // just below a tie
        b[0] = 127.0f;
        for (int j = 1; j < 32; ++j) b[j] = std::nextafter(static_cast<float>(j - 16) + 0.5f, 0.0f);
        break;
      case 5:                                                                  // +a and -a: the first wins (Q4_0)
        b[3] = -9.0f;
        b[20] = 9.0f;
        break;
      case 6:                                                                  // the max at the last element
        b[31] = -50.0f;
        break;
      case 7: for (int j = 0; j < 32; ++j) b[j] *= 1e-30f; break;              // tiny (fp16 d underflows)
      case 8: for (int j = 0; j < 32; ++j) b[j] *= 1e5f; break;                // d beyond fp16's range
      case 9: b[7] = nan; break;                                               // NaN skipped by amax
      case 10: b[11] = inf; b[12] = -inf; break;                               // infinities
      case 11: std::fill(b, b + 32, nan); break;                               // all NaN
      default: break;
    }
  }
  return x;
}

TEST_P(KvQuant, Q8_0RowsAreBitExactWithTheScalarQuantiser) {
  for (int64_t n : {32, 64, 128, 384, 4096}) {
    const auto x = edge_rows(n, static_cast<uint32_t>(n));
    std::vector<block_q8_0> want(n / 32), got(n / 32);
    std::memset(got.data(), 0x55, got.size() * sizeof(block_q8_0));
    quantize_row_q8_0(x.data(), want.data(), n);
    k().quant_kv_q8_0(x.data(), got.data(), n);
    for (int64_t b = 0; b < n / 32; ++b)
      ASSERT_EQ(std::memcmp(&want[b], &got[b], sizeof(block_q8_0)), 0) << "n " << n << " block " << b;
  }
}

TEST_P(KvQuant, Q4_0RowsAreBitExactWithTheScalarQuantiser) {
  for (int64_t n : {32, 64, 128, 384, 4096}) {
    const auto x = edge_rows(n, static_cast<uint32_t>(n) + 7);
    std::vector<block_q4_0> want(n / 32), got(n / 32);
    std::memset(got.data(), 0x55, got.size() * sizeof(block_q4_0));
    quantize_row_q4_0(x.data(), want.data(), n);
    k().quant_kv_q4_0(x.data(), got.data(), n);
    for (int64_t b = 0; b < n / 32; ++b)
      ASSERT_EQ(std::memcmp(&want[b], &got[b], sizeof(block_q4_0)), 0) << "n " << n << " block " << b;
  }
}

// Q8_0 by hand: amax 127 -> d = 1 (fp16 0x3C00), q = round(x), ties away from zero.
TEST_P(KvQuant, Q8_0HandComputed) {
  std::vector<float> x(64, 0.0f);
  const float in[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.49999988f, -126.5f, 0.49999997f};
  std::copy(std::begin(in), std::end(in), x.begin());
  block_q8_0 y[2];
  k().quant_kv_q8_0(x.data(), y, 64);
  EXPECT_EQ(y[0].d, 0x3C00);
  const int want[] = {127, 3, -3, 1, -1, 1, -127, 0};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(y[0].qs[j], want[j]) << j;
  for (int j = 8; j < 32; ++j) EXPECT_EQ(y[0].qs[j], 0) << j;
  EXPECT_EQ(y[1].d, 0);  // an all-zero block
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[1].qs[j], 0) << j;
}

// Q4_0 by hand: the largest magnitude is -8 (the first of -8 / +8), d = -8 / -8 = 1, so
// q = min(15, trunc(x + 8.5)); byte j holds q[j] in its low nibble and q[j + 16] in its high one.
TEST_P(KvQuant, Q4_0HandComputed) {
  std::vector<float> x(32, 0.0f);  // q 8 everywhere else
  x[0] = -8.0f;   // 0
  x[1] = 7.0f;    // 15
  x[2] = 0.4f;    // 8
  x[3] = 0.5f;    // 9
  x[4] = -0.6f;   // 7
  x[16] = 8.0f;   // 16 -> 15
  x[17] = -7.9f;  // 0.6 -> 0
  x[18] = 3.2f;   // 11.7 -> 11
  block_q4_0 y;
  k().quant_kv_q4_0(x.data(), &y, 32);
  EXPECT_EQ(y.d, 0x3C00);  // 1
  const int lo[16] = {0, 15, 8, 9, 7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
  const int hi[16] = {15, 0, 11, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8};
  for (int j = 0; j < 16; ++j) EXPECT_EQ(y.qs[j], lo[j] | hi[j] << 4) << j;
}

INSTANTIATE_TEST_SUITE_P(Kernels, KvQuant, test::all_paths(), test::path_name);

}  // namespace
}  // namespace kvs::kernels
