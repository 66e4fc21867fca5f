// The block sub-allocator, staging transfers and the pipeline cache.
#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "core/error.h"
#include "vulkan/pipeline_cache.h"
#include "vulkan_test_util.h"

namespace kvs::vulkan::test {
namespace {

TEST(VulkanMemory, RangesShareBlocksAlignedAndMerge) {
  KVS_NEED_VULKAN();
  BlockAllocator a(ctx(), MemoryKind::DeviceLocal, 1 << 20);
  const VkDeviceSize al = a.alignment();
  EXPECT_GE(al, 256u);
  EXPECT_EQ(al % ctx().info().min_storage_buffer_offset_alignment, 0u);
  Buffer x = a.allocate(1000), y = a.allocate(3000), z = a.allocate(10);
  EXPECT_EQ(a.blocks(), 1u);
  EXPECT_EQ(a.bytes_held(), VkDeviceSize{1} << 20);
  EXPECT_EQ(x.view().buffer, y.view().buffer);
  for (const Buffer* b : {&x, &y, &z}) EXPECT_EQ(b->view().offset % al, 0u);
  EXPECT_EQ(x.size(), 1000u);
  EXPECT_GE(y.view().offset, x.view().offset + 1000);
  EXPECT_GE(z.view().offset, y.view().offset + 3000);
  const VkDeviceSize y_off = y.view().offset;
  y.reset();
  Buffer w = a.allocate(2000);  // first fit: y's hole
  EXPECT_EQ(w.view().offset, y_off);
  Buffer big = a.allocate(3 << 20);  // larger than a block: a block of its own
  EXPECT_EQ(a.blocks(), 2u);
  EXPECT_EQ(big.view().offset, 0u);
  EXPECT_EQ(a.bytes_held(), (VkDeviceSize{1} << 20) + (VkDeviceSize{3} << 20));
  x.reset();
  w.reset();
  z.reset();
  big.reset();
  EXPECT_EQ(a.bytes_in_use(), 0u);
  Buffer whole = a.allocate(1 << 20);  // the freed ranges merged back into one
  EXPECT_EQ(whole.view().offset, 0u);
  EXPECT_EQ(a.blocks(), 2u);
  EXPECT_THROW(a.allocate(0), Error);
}

TEST(VulkanMemory, UploadDownloadInChunksAndAtOffsets) {
  KVS_NEED_VULKAN();
  Transfer small(ctx(), 1 << 16);  // 64 KiB of staging: a 1 MiB copy takes 16 chunks
  std::vector<uint32_t> v(1 << 18);
  std::iota(v.begin(), v.end(), 7u);
  Buffer b = mem().allocate(v.size() * 4 + 100);
  small.upload(b.view(), v.data(), v.size() * 4, 100);
  std::vector<uint32_t> back(v.size());
  small.download(b.view(), back.data(), back.size() * 4, 100);
  EXPECT_EQ(back, v);
  std::vector<uint32_t> mid(5);
  small.download(b.view(), mid.data(), 20, 100 + 4 * 1000);
  EXPECT_EQ(mid[0], 1007u);
  EXPECT_EQ(mid[4], 1011u);
  EXPECT_THROW(small.upload(b.view(), v.data(), v.size() * 4, 101), Error);
  EXPECT_THROW(small.download(b.view(), back.data(), back.size() * 4 + 101, 0), Error);
}

TEST(VulkanPipelines, KeyedByShaderAndSpecialisation) {
  KVS_NEED_VULKAN();
  PipelineCache cache(ctx());
  const Pipeline& a = cache.get("add", 2, 4, {64});
  const Pipeline& b = cache.get("add", 2, 4, {64});
  EXPECT_EQ(&a, &b);
  EXPECT_EQ(cache.size(), 1u);
  const Pipeline& c = cache.get("add", 2, 4, {128});
  EXPECT_NE(a.pipeline, c.pipeline);
  cache.get("silu_mul", 2, 4, {64});
  EXPECT_EQ(cache.size(), 3u);
  try {
    cache.get("no_such_shader", 1, 0, {});
    ADD_FAILURE();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no shader 'no_such_shader'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mul_mat_vec_q4_0"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kvs::vulkan::test
