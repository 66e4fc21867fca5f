#include "vulkan/context.h"

#include <fmt/format.h>

#include <vector>

#include "core/error.h"
#include "vulkan/api.h"
#include "vulkan/check.h"
#include "vulkan/instance.h"

namespace kvs::vulkan {
namespace {

// Sets (and storage-buffer descriptors, 4 a set) of one submission before it is flushed.
constexpr uint32_t kSetsPerSubmission = 1024;
constexpr uint32_t kBuffersPerSet = 4;

}  // namespace

Context::Context(std::string_view spec) {
  info_ = select_device(spec);
  const Api& vk = api();
  physical_ = physical_devices().at(info_.index);

  uint32_t nq = 0;
  vk.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> fams(nq);
  vk.vkGetPhysicalDeviceQueueFamilyProperties(physical_, &nq, fams.data());
  // A compute family without graphics first (a GPU's async compute queue), else any with compute.
  int fam = -1;
  for (uint32_t i = 0; i < nq && fam < 0; ++i)
    if ((fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(fams[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) fam = int(i);
  for (uint32_t i = 0; i < nq && fam < 0; ++i)
    if (fams[i].queueFlags & VK_QUEUE_COMPUTE_BIT) fam = int(i);
  if (fam < 0) fail("device '{}' ({}): has no compute queue", spec, info_.name);
  queue_family_ = uint32_t(fam);

  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qinfo{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qinfo.queueFamilyIndex = queue_family_;
  qinfo.queueCount = 1;
  qinfo.pQueuePriorities = &priority;
  VkDeviceCreateInfo dinfo{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dinfo.queueCreateInfoCount = 1;
  dinfo.pQueueCreateInfos = &qinfo;
  KVS_VK(vk.vkCreateDevice(physical_, &dinfo, nullptr, &device_));
  vk.vkGetDeviceQueue(device_, queue_family_, 0, &queue_);

  try {
    VkCommandPoolCreateInfo pinfo{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pinfo.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pinfo.queueFamilyIndex = queue_family_;
    KVS_VK(vk.vkCreateCommandPool(device_, &pinfo, nullptr, &cmd_pool_));
    VkCommandBufferAllocateInfo cinfo{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    cinfo.commandPool = cmd_pool_;
    cinfo.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cinfo.commandBufferCount = 1;
    KVS_VK(vk.vkAllocateCommandBuffers(device_, &cinfo, &cmd_));
    VkFenceCreateInfo finfo{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    KVS_VK(vk.vkCreateFence(device_, &finfo, nullptr, &fence_));
    VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerSubmission * kBuffersPerSet};
    VkDescriptorPoolCreateInfo dpinfo{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    dpinfo.maxSets = kSetsPerSubmission;
    dpinfo.poolSizeCount = 1;
    dpinfo.pPoolSizes = &size;
    KVS_VK(vk.vkCreateDescriptorPool(device_, &dpinfo, nullptr, &desc_pool_));
    sets_left_ = kSetsPerSubmission;
  } catch (...) {
    release();
    throw;
  }
}

Context::~Context() { release(); }

void Context::release() {
  if (!device_) return;
  const Api& vk = api();
  vk.vkDeviceWaitIdle(device_);
  if (desc_pool_) vk.vkDestroyDescriptorPool(device_, desc_pool_, nullptr);
  if (fence_) vk.vkDestroyFence(device_, fence_, nullptr);
  if (cmd_pool_) vk.vkDestroyCommandPool(device_, cmd_pool_, nullptr);
  vk.vkDestroyDevice(device_, nullptr);
  device_ = VK_NULL_HANDLE;
}

uint32_t Context::memory_type(uint32_t type_bits, VkMemoryPropertyFlags need, VkMemoryPropertyFlags prefer) const {
  VkPhysicalDeviceMemoryProperties mem{};
  api().vkGetPhysicalDeviceMemoryProperties(physical_, &mem);
  int fallback = -1;
  for (uint32_t i = 0; i < mem.memoryTypeCount; ++i) {
    if (!(type_bits & (1u << i))) continue;
    const VkMemoryPropertyFlags f = mem.memoryTypes[i].propertyFlags;
    if ((f & need) != need) continue;
    if ((f & prefer) == prefer) return i;
    if (fallback < 0) fallback = int(i);
  }
  if (fallback < 0)
    fail("Vulkan device {}: no memory type with property flags 0x{:x} for this buffer", info_.name, uint32_t(need));
  return uint32_t(fallback);
}

VkCommandBuffer Context::cmd() {
  if (!recording_) {
    VkCommandBufferBeginInfo b{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    b.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    KVS_VK(api().vkBeginCommandBuffer(cmd_, &b));
    recording_ = true;
  }
  return cmd_;
}

VkDescriptorSet Context::descriptor_set(VkDescriptorSetLayout layout) {
  if (sets_left_ == 0) submit_and_wait();
  VkDescriptorSetAllocateInfo a{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  a.descriptorPool = desc_pool_;
  a.descriptorSetCount = 1;
  a.pSetLayouts = &layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  KVS_VK(api().vkAllocateDescriptorSets(device_, &a, &set));
  --sets_left_;
  return set;
}

void Context::barrier() {
  VkMemoryBarrier m{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  m.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  m.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                    VK_ACCESS_TRANSFER_WRITE_BIT;
  const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  api().vkCmdPipelineBarrier(cmd(), stages, stages, 0, 1, &m, 0, nullptr, 0, nullptr);
}

void Context::submit_and_wait() {
  const Api& vk = api();
  if (recording_) {
    recording_ = false;
    KVS_VK(vk.vkEndCommandBuffer(cmd_));
    VkSubmitInfo s{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    s.commandBufferCount = 1;
    s.pCommandBuffers = &cmd_;
    KVS_VK(vk.vkQueueSubmit(queue_, 1, &s, fence_));
    KVS_VK(vk.vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX));
    KVS_VK(vk.vkResetFences(device_, 1, &fence_));
    KVS_VK(vk.vkResetCommandBuffer(cmd_, 0));
  }
  if (sets_left_ != kSetsPerSubmission) {
    KVS_VK(vk.vkResetDescriptorPool(device_, desc_pool_, 0));
    sets_left_ = kSetsPerSubmission;
  }
}

}  // namespace kvs::vulkan
