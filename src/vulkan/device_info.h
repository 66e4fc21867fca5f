// The Vulkan devices of this machine and what each offers kvshrink (`kvshrink devices`, device
// selection). No Vulkan type appears here: the CLI includes this without the Vulkan headers' weight.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvs::vulkan {

struct MemoryHeap {
  uint64_t bytes = 0;
  bool device_local = false;
};

struct DeviceInfo {
  int index = 0;                // N of `vulkan:N` (the order vkEnumeratePhysicalDevices gives)
  std::string name;             // VkPhysicalDeviceProperties::deviceName
  std::string type;             // "discrete GPU", "integrated GPU", "virtual GPU", "CPU", "other"
  std::string api_version;      // "1.3.230"
  std::string driver;           // driver name and info (Vulkan 1.2 devices), else empty
  uint32_t vendor_id = 0, device_id = 0;
  std::vector<MemoryHeap> heaps;
  uint32_t subgroup_size = 0;          // 0 when the device reports none
  bool subgroup_arithmetic = false;    // subgroupAdd & co. in compute shaders
  bool fp16_storage = false;           // storageBuffer16BitAccess
  bool fp16_arithmetic = false;        // shaderFloat16
  bool int8_storage = false;           // storageBuffer8BitAccess
  bool int8_arithmetic = false;        // shaderInt8
  bool coopmat_nv = false;             // VK_NV_cooperative_matrix
  bool coopmat_khr = false;            // VK_KHR_cooperative_matrix
  uint64_t max_storage_buffer_range = 0;         // bytes one storage-buffer binding may span
  uint64_t min_storage_buffer_offset_alignment = 0;
  uint32_t max_workgroup_invocations = 0;
  uint32_t max_shared_memory_bytes = 0;
  bool compute_queue = false;          // a queue family with compute

  // Bytes of the device-local heaps (the largest heap for a device that reports none local).
  uint64_t device_local_bytes() const;
};

// Every Vulkan device. Fails (kvs::Error) naming the reason when there is no loader or the
// instance cannot be created; an instance without devices answers an empty list.
std::vector<DeviceInfo> list_devices();

// The N of a device spec: "vulkan" -> 0, "vulkan:N" -> N. Fails naming the spec otherwise.
int parse_device_index(std::string_view spec);

// The device a spec names, failing with the list of devices present when there is none such
// ("no Vulkan device: ..." when there is none at all).
DeviceInfo select_device(std::string_view spec);

// Indented lines for `kvshrink devices`: type, memory, subgroup, fp16/int8, cooperative matrices.
std::string describe(const DeviceInfo& d);

}  // namespace kvs::vulkan
