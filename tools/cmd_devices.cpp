// kvshrink devices: the devices kvshrink can compute on: the CPU (always) and each Vulkan device
// with what it offers (docs/vulkan.md). Without Vulkan (not built in, no loader, no driver) it
// lists the CPU and one line saying why there is no Vulkan device; it never fails for that.
#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "cli_common.h"
#include "core/error.h"
#include "kernels/cpu_features.h"
#if KVS_HAVE_VULKAN
#include "vulkan/device_info.h"
#endif

namespace kvs::cli {
namespace {

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  return "CPU";
}

void print_cpu() {
  const double mem = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGESIZE)) / double(1 << 30);
  const char* table = kernels::use_avx512() ? "avx512" : kernels::use_avx2() ? "avx2" : "generic";
  fmt::print("cpu: {}\n  threads: {}, memory: {:.1f} GiB, kernels: {}\n", cpu_model(),
             std::thread::hardware_concurrency(), mem, table);
}

void print_vulkan() {
#if KVS_HAVE_VULKAN
  try {
    const auto devs = vulkan::list_devices();
    if (devs.empty()) {
      fmt::print("vulkan: no device: the Vulkan loader found no driver (mesa-vulkan-drivers gives lavapipe)\n");
      return;
    }
    for (const auto& d : devs) fmt::print("vulkan:{}: {}\n{}", d.index, d.name, vulkan::describe(d));
  } catch (const Error& e) {
    fmt::print("vulkan: not available: {}\n", e.what());
  }
#else
  fmt::print("vulkan: not available: this kvshrink was built without Vulkan (-DKVS_VULKAN=OFF, or the Vulkan "
             "headers or glslc were missing at build time)\n");
#endif
}

}  // namespace

void register_devices(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("devices", "list the devices kvshrink can compute on (cpu, vulkan:N)");
  cmd->callback([] {
    print_cpu();
    print_vulkan();
  });
}

}  // namespace kvs::cli
