#include "vulkan/api.h"

#include <dlfcn.h>

#include <mutex>

#include "core/error.h"

namespace kvs::vulkan {
namespace {

Api g_api;
std::once_flag g_loader_once;
std::string g_loader_error;  // set when the loader could not be opened

void open_loader() {
  // libvulkan.so.1 is the loader's soname (Debian: libvulkan1); libvulkan.so only with -dev.
  void* lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    g_loader_error = fmt::format("no Vulkan loader: cannot open libvulkan.so.1 ({}); install the loader (Debian: "
                                 "libvulkan1) and a driver (mesa-vulkan-drivers for lavapipe)",
                                 why ? why : "unknown reason");
    return;
  }
  g_api.vkGetInstanceProcAddr = reinterpret_cast<PFN_vkGetInstanceProcAddr>(dlsym(lib, "vkGetInstanceProcAddr"));
  if (!g_api.vkGetInstanceProcAddr) {
    g_loader_error = "no Vulkan loader: libvulkan.so.1 has no vkGetInstanceProcAddr";
    return;
  }
#define KVS_VK_LOAD(name) g_api.name = reinterpret_cast<PFN_##name>(g_api.vkGetInstanceProcAddr(nullptr, #name));
  KVS_VK_GLOBAL_FUNCTIONS(KVS_VK_LOAD)
#undef KVS_VK_LOAD
  if (!g_api.vkCreateInstance) g_loader_error = "no Vulkan loader: libvulkan.so.1 has no vkCreateInstance";
}

}  // namespace

void load_loader() {
  std::call_once(g_loader_once, open_loader);
  if (!g_loader_error.empty()) throw Error(g_loader_error);
}

const Api& api() {
  load_loader();
  return g_api;
}

void load_instance_functions(VkInstance instance) {
  load_loader();
#define KVS_VK_LOAD(name)                                                                       \
  g_api.name = reinterpret_cast<PFN_##name>(g_api.vkGetInstanceProcAddr(instance, #name));      \
  if (!g_api.name) fail("Vulkan: the loader has no {} (a Vulkan 1.1 instance is needed)", #name);
  KVS_VK_INSTANCE_FUNCTIONS(KVS_VK_LOAD)
#undef KVS_VK_LOAD
}

}  // namespace kvs::vulkan
