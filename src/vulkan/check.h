// Vulkan results as kvs::Error: every failing call names itself and its VkResult.
#pragma once
#include <vulkan/vulkan.h>

namespace kvs::vulkan {

// "VK_ERROR_OUT_OF_DEVICE_MEMORY", ... ("VkResult(<n>)" for a code this table does not know).
const char* result_name(VkResult r);

// Throws kvs::Error "Vulkan: <call> failed: <VkResult name>" unless r is VK_SUCCESS.
void check(VkResult r, const char* call);

}  // namespace kvs::vulkan

// KVS_VK(vkCreateBuffer(dev, &info, nullptr, &buf)): the call, checked, named by its text.
#define KVS_VK(call) ::kvs::vulkan::check((call), #call)
