// One opened Vulkan device: the logical device, its compute queue, one command buffer recorded
// into until submit_and_wait() hands it to the queue and waits on a fence, and the descriptor pool
// of that submission. Not thread-safe: one Context per thread of work.
#pragma once
#include <vulkan/vulkan.h>

#include <cstdint>
#include <string_view>

#include "vulkan/device_info.h"

namespace kvs::vulkan {

class Context {
 public:
  // spec: "vulkan" or "vulkan:N". Fails naming the loader, the device or the failing call.
  explicit Context(std::string_view spec = "vulkan");
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceInfo& info() const { return info_; }
  VkDevice device() const { return device_; }
  VkPhysicalDevice physical_device() const { return physical_; }

  // A memory type among type_bits with every flag of `need`, preferring one with `prefer` too;
  // fails naming the flags when the device has none.
  uint32_t memory_type(uint32_t type_bits, VkMemoryPropertyFlags need, VkMemoryPropertyFlags prefer) const;

  // The open command buffer (begun on first use after a submission).
  VkCommandBuffer cmd();
  // A descriptor set of `layout` for the commands recorded next. When this submission's pool is
  // spent, the work recorded so far is submitted and waited for first (call it before cmd()).
  VkDescriptorSet descriptor_set(VkDescriptorSetLayout layout);
  // Makes every earlier shader / transfer write visible to later shader and transfer access.
  void barrier();
  // Ends, submits and waits for the open command buffer (nothing when none is open), then
  // recycles its descriptor sets.
  void submit_and_wait();

 private:
  void release();  // destroys what was created (the destructor, and a constructor that failed midway)

  DeviceInfo info_;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0;
  VkCommandPool cmd_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkDescriptorPool desc_pool_ = VK_NULL_HANDLE;
  uint32_t sets_left_ = 0;
  bool recording_ = false;
};

}  // namespace kvs::vulkan
