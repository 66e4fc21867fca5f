// The device layer: enumeration, the device info, device specs, and errors that name the call.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "vulkan/check.h"
#include "vulkan/device_info.h"
#include "vulkan_test_util.h"

namespace kvs::vulkan::test {
namespace {

TEST(VulkanDevice, SpecsParse) {
  EXPECT_EQ(parse_device_index("vulkan"), 0);
  EXPECT_EQ(parse_device_index("vulkan:0"), 0);
  EXPECT_EQ(parse_device_index("vulkan:12"), 12);
  for (const char* bad : {"vulkan:", "vulkan:-1", "vulkan:1x", "cuda", "vulkan1", "", "vulkan: 1"}) {
    try {
      parse_device_index(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected vulkan or vulkan:N"), std::string::npos) << e.what();
    }
  }
}

TEST(VulkanDevice, ErrorsNameTheCallAndResult) {
  EXPECT_NO_THROW(check(VK_SUCCESS, "vkFoo"));
  try {
    check(VK_ERROR_OUT_OF_DEVICE_MEMORY, "vkAllocateMemory(dev, &info, nullptr, &mem)");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "Vulkan: vkAllocateMemory(dev, &info, nullptr, &mem) failed: VK_ERROR_OUT_OF_DEVICE_MEMORY");
  }
  try {
    check(static_cast<VkResult>(-123456), "vkBar");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "Vulkan: vkBar failed: VkResult(-123456)");
  }
}

TEST(VulkanDevice, InfoIsFilledIn) {
  KVS_NEED_VULKAN();
  const auto devs = list_devices();
  ASSERT_FALSE(devs.empty());
  for (size_t i = 0; i < devs.size(); ++i) {
    const DeviceInfo& d = devs[i];
    EXPECT_EQ(d.index, int(i));
    EXPECT_FALSE(d.name.empty());
    EXPECT_FALSE(d.type.empty());
    EXPECT_FALSE(d.heaps.empty());
    EXPECT_GT(d.device_local_bytes(), 0u);
    EXPECT_GE(d.max_storage_buffer_range, uint64_t{1} << 27) << "Vulkan guarantees 128 MiB";
    EXPECT_GT(d.min_storage_buffer_offset_alignment, 0u);
    EXPECT_GE(d.max_workgroup_invocations, 128u);
    const std::string text = describe(d);
    for (const char* word : {"memory heaps", "subgroup size", "fp16", "int8", "cooperative matrix", "max storage buffer"})
      EXPECT_NE(text.find(word), std::string::npos) << word << " in:\n" << text;
  }
  EXPECT_EQ(ctx().info().name, devs[0].name);
  EXPECT_GT(ctx().info().subgroup_size, 0u);
}

TEST(VulkanDevice, MissingDeviceNamesThePresentOnes) {
  KVS_NEED_VULKAN();
  try {
    select_device("vulkan:99");
    ADD_FAILURE();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("device 'vulkan:99': no such Vulkan device; present: vulkan:0 ("), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace kvs::vulkan::test
