#include "vulkan/check.h"

#include <fmt/format.h>

#include <string>

#include "core/error.h"

namespace kvs::vulkan {

const char* result_name(VkResult r) {
  switch (r) {
#define KVS_VK_CASE(x) \
  case x: return #x;
    KVS_VK_CASE(VK_SUCCESS)
    KVS_VK_CASE(VK_NOT_READY)
    KVS_VK_CASE(VK_TIMEOUT)
    KVS_VK_CASE(VK_EVENT_SET)
    KVS_VK_CASE(VK_EVENT_RESET)
    KVS_VK_CASE(VK_INCOMPLETE)
    KVS_VK_CASE(VK_ERROR_OUT_OF_HOST_MEMORY)
    KVS_VK_CASE(VK_ERROR_OUT_OF_DEVICE_MEMORY)
    KVS_VK_CASE(VK_ERROR_INITIALIZATION_FAILED)
    KVS_VK_CASE(VK_ERROR_DEVICE_LOST)
    KVS_VK_CASE(VK_ERROR_MEMORY_MAP_FAILED)
    KVS_VK_CASE(VK_ERROR_LAYER_NOT_PRESENT)
    KVS_VK_CASE(VK_ERROR_EXTENSION_NOT_PRESENT)
    KVS_VK_CASE(VK_ERROR_FEATURE_NOT_PRESENT)
    KVS_VK_CASE(VK_ERROR_INCOMPATIBLE_DRIVER)
    KVS_VK_CASE(VK_ERROR_TOO_MANY_OBJECTS)
    KVS_VK_CASE(VK_ERROR_FORMAT_NOT_SUPPORTED)
    KVS_VK_CASE(VK_ERROR_FRAGMENTED_POOL)
    KVS_VK_CASE(VK_ERROR_UNKNOWN)
    KVS_VK_CASE(VK_ERROR_OUT_OF_POOL_MEMORY)
    KVS_VK_CASE(VK_ERROR_INVALID_EXTERNAL_HANDLE)
    KVS_VK_CASE(VK_ERROR_FRAGMENTATION)
    KVS_VK_CASE(VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS)
    KVS_VK_CASE(VK_PIPELINE_COMPILE_REQUIRED)
#undef KVS_VK_CASE
    default: return nullptr;
  }
}

void check(VkResult r, const char* call) {
  if (r == VK_SUCCESS) return;
  const char* name = result_name(r);
  const std::string text = name ? std::string(name) : fmt::format("VkResult({})", static_cast<int>(r));
  fail("Vulkan: {} failed: {}", call, text);
}

}  // namespace kvs::vulkan
