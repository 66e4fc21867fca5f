#include "vulkan/device_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>

#include "core/error.h"
#include "vulkan/api.h"
#include "vulkan/check.h"
#include "vulkan/instance.h"

namespace kvs::vulkan {
namespace {

const char* type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
  }
}

std::string version_text(uint32_t v) {
  return fmt::format("{}.{}.{}", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v));
}

bool has_extension(VkPhysicalDevice pd, const char* name) {
  const Api& vk = api();
  uint32_t n = 0;
  KVS_VK(vk.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr));
  std::vector<VkExtensionProperties> ext(n);
  if (n) KVS_VK(vk.vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, ext.data()));
  for (uint32_t i = 0; i < n; ++i)
    if (std::strcmp(ext[i].extensionName, name) == 0) return true;
  return false;
}

std::string bytes_text(uint64_t b) {
  if (b >= (uint64_t{1} << 30)) return fmt::format("{:.1f} GiB", double(b) / double(uint64_t{1} << 30));
  return fmt::format("{} MiB", b >> 20);
}

DeviceInfo query(int index, VkPhysicalDevice pd) {
  const Api& vk = api();
  DeviceInfo d;
  d.index = index;
  VkPhysicalDeviceProperties props{};
  vk.vkGetPhysicalDeviceProperties(pd, &props);
  d.name = props.deviceName;
  d.type = type_name(props.deviceType);
  d.api_version = version_text(props.apiVersion);
  d.vendor_id = props.vendorID;
  d.device_id = props.deviceID;
  d.max_storage_buffer_range = props.limits.maxStorageBufferRange;
  d.min_storage_buffer_offset_alignment = props.limits.minStorageBufferOffsetAlignment;
  d.max_workgroup_invocations = props.limits.maxComputeWorkGroupInvocations;
  d.max_shared_memory_bytes = props.limits.maxComputeSharedMemorySize;

  const bool v12 = props.apiVersion >= VK_API_VERSION_1_2;
  VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &sub;
  if (v12) sub.pNext = &drv;
  vk.vkGetPhysicalDeviceProperties2(pd, &p2);
  d.subgroup_size = sub.subgroupSize;
  d.subgroup_arithmetic = (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                          (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT);
  if (v12) d.driver = fmt::format("{} ({})", drv.driverName, drv.driverInfo);

  // 16-bit storage is a Vulkan 1.1 feature; shaderFloat16/Int8 and 8-bit storage are 1.2's.
  VkPhysicalDevice16BitStorageFeatures s16{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  f2.pNext = &s16;
  if (v12) s16.pNext = &f12;
  vk.vkGetPhysicalDeviceFeatures2(pd, &f2);
  d.fp16_storage = s16.storageBuffer16BitAccess;
  d.fp16_arithmetic = v12 && f12.shaderFloat16;
  d.int8_storage = v12 && f12.storageBuffer8BitAccess;
  d.int8_arithmetic = v12 && f12.shaderInt8;
  d.coopmat_nv = has_extension(pd, "VK_NV_cooperative_matrix");
  d.coopmat_khr = has_extension(pd, "VK_KHR_cooperative_matrix");

  VkPhysicalDeviceMemoryProperties mem{};
  vk.vkGetPhysicalDeviceMemoryProperties(pd, &mem);
  for (uint32_t i = 0; i < mem.memoryHeapCount; ++i)
    d.heaps.push_back({mem.memoryHeaps[i].size, (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0});

  uint32_t nq = 0;
  vk.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, nullptr);
  std::vector<VkQueueFamilyProperties> q(nq);
  vk.vkGetPhysicalDeviceQueueFamilyProperties(pd, &nq, q.data());
  for (const auto& f : q) d.compute_queue = d.compute_queue || (f.queueFlags & VK_QUEUE_COMPUTE_BIT);
  return d;
}

}  // namespace

uint64_t DeviceInfo::device_local_bytes() const {
  uint64_t local = 0, largest = 0;
  for (const auto& h : heaps) {
    if (h.device_local) local += h.bytes;
    largest = std::max(largest, h.bytes);
  }
  return local ? local : largest;
}

std::vector<DeviceInfo> list_devices() {
  const std::vector<VkPhysicalDevice> pds = physical_devices();
  std::vector<DeviceInfo> out;
  for (size_t i = 0; i < pds.size(); ++i) out.push_back(query(static_cast<int>(i), pds[i]));
  return out;
}

int parse_device_index(std::string_view spec) {
  if (spec == "vulkan") return 0;
  constexpr std::string_view prefix = "vulkan:";
  if (spec.substr(0, prefix.size()) == prefix) {
    const std::string_view num = spec.substr(prefix.size());
    int n = -1;
    const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), n);
    if (ec == std::errc() && end == num.data() + num.size() && !num.empty() && n >= 0) return n;
  }
  fail("device '{}': expected vulkan or vulkan:N (N = a device index of `kvshrink devices`)", spec);
}

DeviceInfo select_device(std::string_view spec) {
  const int n = parse_device_index(spec);
  const std::vector<DeviceInfo> devs = list_devices();
  if (devs.empty())
    fail("device '{}': no Vulkan device: the loader found no driver (install one: mesa-vulkan-drivers for "
         "lavapipe, or the GPU vendor's)",
         spec);
  if (n >= static_cast<int>(devs.size())) {
    std::string present;
    for (const auto& d : devs) present += fmt::format("{}vulkan:{} ({})", present.empty() ? "" : ", ", d.index, d.name);
    fail("device '{}': no such Vulkan device; present: {}", spec, present);
  }
  if (!devs[n].compute_queue) fail("device '{}' ({}): has no compute queue", spec, devs[n].name);
  return devs[n];
}

std::string describe(const DeviceInfo& d) {
  std::string heaps;
  for (const auto& h : d.heaps)
    heaps += fmt::format("{}{}{}", heaps.empty() ? "" : ", ", bytes_text(h.bytes), h.device_local ? " device-local" : "");
  auto yn = [](bool b) { return b ? "yes" : "no"; };
  std::string s;
  s += fmt::format("  type: {}, Vulkan {}{}\n", d.type, d.api_version, d.driver.empty() ? "" : ", driver " + d.driver);
  s += fmt::format("  memory heaps: {}\n", heaps);
  s += fmt::format("  subgroup size: {} (arithmetic: {}), workgroup up to {} invocations, {} KiB shared\n",
                   d.subgroup_size, yn(d.subgroup_arithmetic), d.max_workgroup_invocations,
                   d.max_shared_memory_bytes / 1024);
  s += fmt::format("  fp16: storage {}, arithmetic {}; int8: storage {}, arithmetic {}\n", yn(d.fp16_storage),
                   yn(d.fp16_arithmetic), yn(d.int8_storage), yn(d.int8_arithmetic));
  s += fmt::format("  cooperative matrix: NV {}, KHR {}\n", yn(d.coopmat_nv), yn(d.coopmat_khr));
  s += fmt::format("  max storage buffer range: {} bytes ({})\n", d.max_storage_buffer_range,
                   bytes_text(d.max_storage_buffer_range));
  return s;
}

}  // namespace kvs::vulkan
