// Where a tensor lives and an op runs: a kind of device and its index among those of that kind.
// Only the CPU exists today; a Vulkan device (docs/backend.md) adds a kind, not a new seam.
#pragma once
#include <string>

namespace kvs::backend {

enum class DeviceKind { Cpu };

struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  int index = 0;  // among the devices of this kind (the CPU is always 0)

  static Device cpu() { return {}; }
  bool operator==(const Device&) const = default;
};

// "cpu", later "vulkan:1": the spelling of --device.
std::string device_name(const Device& d);

}  // namespace kvs::backend
