// Opening a device's backend: dispatch by device kind first; the CPU backend then takes the
// machine's kernel table (ISA dispatch, kernels/cpu/kernel_table.h: active_kernels()).
#include "backend/backend.h"

#include <fmt/format.h>

#include "backend/cpu_backend.h"
#include "core/error.h"

namespace kvs::backend {

std::string device_name(const Device& d) {
  switch (d.kind) {
    case DeviceKind::Cpu: return "cpu";
  }
  return fmt::format("device kind #{}", static_cast<int>(d.kind));
}

std::unique_ptr<Backend> open_backend(const Device& d, ThreadPool& pool) {
  switch (d.kind) {
    case DeviceKind::Cpu:
      if (d.index != 0) fail("device cpu:{} does not exist (the CPU is device cpu)", d.index);
      return std::make_unique<CpuBackend>(kernels::active_kernels(), pool);
  }
  fail("device {} is not supported by this build (supported: cpu)", device_name(d));
}

}  // namespace kvs::backend
