#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.h"
#include "core/fp16.h"

namespace kvs {

TEST(DType, BlockLayouts) {
  EXPECT_EQ(dtype_row_bytes(DType::F32, 10), 40u);
  EXPECT_EQ(dtype_row_bytes(DType::Q8_0, 64), 68u);
  EXPECT_EQ(dtype_row_bytes(DType::Q4_K, 512), 288u);
  EXPECT_EQ(dtype_row_bytes(DType::Q6_K, 256), 210u);
  DType t;
  ASSERT_TRUE(dtype_from_name("Q4_K", &t));
  EXPECT_EQ(t, DType::Q4_K);
  EXPECT_FALSE(dtype_from_name("q9_9", &t));
  EXPECT_FALSE(dtype_known(99));
}

TEST(Fp16, RoundTripAllHalves) {
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(fp32_to_fp16(f), h) << h;
  }
  EXPECT_EQ(fp16_to_fp32(0x3c00), 1.0f);
  EXPECT_EQ(fp32_to_fp16(65504.f), 0x7bff);
  EXPECT_EQ(bf16_to_fp32(fp32_to_bf16(1.5f)), 1.5f);
}

}  // namespace kvs
