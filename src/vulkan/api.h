// The Vulkan entry points kvshrink calls, loaded at run time from the loader (libvulkan.so.1) so
// that a binary built with Vulkan starts, and says why, on a machine without it. One table per
// process: the global functions come from the loader, the others from the instance (they work for
// every device of it).
#pragma once
#include <vulkan/vulkan.h>

namespace kvs::vulkan {

#define KVS_VK_GLOBAL_FUNCTIONS(X) \
  X(vkCreateInstance)              \
  X(vkEnumerateInstanceVersion)    \
  X(vkEnumerateInstanceExtensionProperties)

#define KVS_VK_INSTANCE_FUNCTIONS(X)          \
  X(vkDestroyInstance)                        \
  X(vkEnumeratePhysicalDevices)               \
  X(vkGetPhysicalDeviceProperties)            \
  X(vkGetPhysicalDeviceProperties2)           \
  X(vkGetPhysicalDeviceFeatures2)             \
  X(vkGetPhysicalDeviceMemoryProperties)      \
  X(vkGetPhysicalDeviceQueueFamilyProperties) \
  X(vkEnumerateDeviceExtensionProperties)     \
  X(vkCreateDevice)                           \
  X(vkDestroyDevice)                          \
  X(vkGetDeviceQueue)                         \
  X(vkCreateBuffer)                           \
  X(vkDestroyBuffer)                          \
  X(vkGetBufferMemoryRequirements)            \
  X(vkAllocateMemory)                         \
  X(vkFreeMemory)                             \
  X(vkBindBufferMemory)                       \
  X(vkMapMemory)                              \
  X(vkUnmapMemory)                            \
  X(vkFlushMappedMemoryRanges)                \
  X(vkInvalidateMappedMemoryRanges)           \
  X(vkCreateShaderModule)                     \
  X(vkDestroyShaderModule)                    \
  X(vkCreateDescriptorSetLayout)              \
  X(vkDestroyDescriptorSetLayout)             \
  X(vkCreatePipelineLayout)                   \
  X(vkDestroyPipelineLayout)                  \
  X(vkCreateComputePipelines)                 \
  X(vkDestroyPipeline)                        \
  X(vkCreateDescriptorPool)                   \
  X(vkDestroyDescriptorPool)                  \
  X(vkResetDescriptorPool)                    \
  X(vkAllocateDescriptorSets)                 \
  X(vkUpdateDescriptorSets)                   \
  X(vkCreateCommandPool)                      \
  X(vkDestroyCommandPool)                     \
  X(vkAllocateCommandBuffers)                 \
  X(vkResetCommandBuffer)                     \
  X(vkBeginCommandBuffer)                     \
  X(vkEndCommandBuffer)                       \
  X(vkCmdBindPipeline)                        \
  X(vkCmdBindDescriptorSets)                  \
  X(vkCmdPushConstants)                       \
  X(vkCmdDispatch)                            \
  X(vkCmdCopyBuffer)                          \
  X(vkCmdPipelineBarrier)                     \
  X(vkQueueSubmit)                            \
  X(vkCreateFence)                            \
  X(vkDestroyFence)                           \
  X(vkWaitForFences)                          \
  X(vkResetFences)                            \
  X(vkDeviceWaitIdle)

struct Api {
  PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr = nullptr;
#define KVS_VK_MEMBER(name) PFN_##name name = nullptr;
  KVS_VK_GLOBAL_FUNCTIONS(KVS_VK_MEMBER)
  KVS_VK_INSTANCE_FUNCTIONS(KVS_VK_MEMBER)
#undef KVS_VK_MEMBER
};

// The table; the global functions are loaded on first use (fails with kvs::Error naming the
// loader library when it cannot be opened), the instance functions by load_instance_functions.
const Api& api();
// Opens the loader (idempotent). Fails naming libvulkan.so.1 and dlopen's reason.
void load_loader();
void load_instance_functions(VkInstance instance);

}  // namespace kvs::vulkan
