// The process's Vulkan instance (API 1.1 or later, no layers, no window extensions), created on
// first use and kept for the process's life.
#pragma once
#include <vulkan/vulkan.h>

#include <vector>

namespace kvs::vulkan {

// Fails (kvs::Error) naming the loader or vkCreateInstance's result when there is no usable Vulkan.
VkInstance instance();
std::vector<VkPhysicalDevice> physical_devices();

}  // namespace kvs::vulkan
