#include "vulkan/instance.h"

#include <mutex>
#include <string>

#include "core/error.h"
#include "vulkan/api.h"
#include "vulkan/check.h"

namespace kvs::vulkan {
namespace {

VkInstance g_instance = VK_NULL_HANDLE;
std::once_flag g_once;
std::string g_error;

void create() {
  try {
    const Api& vk = api();
    uint32_t version = VK_API_VERSION_1_0;
    if (vk.vkEnumerateInstanceVersion) KVS_VK(vk.vkEnumerateInstanceVersion(&version));
    if (version < VK_API_VERSION_1_1)
      fail("no usable Vulkan: the loader offers Vulkan {}.{}, kvshrink needs 1.1", VK_API_VERSION_MAJOR(version),
           VK_API_VERSION_MINOR(version));
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "kvshrink";
    app.pEngineName = "kvshrink";
    app.apiVersion = version >= VK_API_VERSION_1_3 ? VK_API_VERSION_1_3 : version;
    VkInstanceCreateInfo info{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    info.pApplicationInfo = &app;
    const VkResult r = vk.vkCreateInstance(&info, nullptr, &g_instance);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER)  // the loader's answer when it finds no driver at all
      fail("no Vulkan device: the Vulkan loader found no driver (vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER); "
           "install one: mesa-vulkan-drivers for lavapipe, or the GPU vendor's");
    check(r, "vkCreateInstance");
    load_instance_functions(g_instance);
  } catch (const Error& e) {
    g_error = e.what();
  }
}

}  // namespace

VkInstance instance() {
  std::call_once(g_once, create);
  if (!g_error.empty()) throw Error(g_error);
  return g_instance;
}

std::vector<VkPhysicalDevice> physical_devices() {
  VkInstance inst = instance();
  uint32_t n = 0;
  KVS_VK(api().vkEnumeratePhysicalDevices(inst, &n, nullptr));
  std::vector<VkPhysicalDevice> devs(n);
  if (n) KVS_VK(api().vkEnumeratePhysicalDevices(inst, &n, devs.data()));
  devs.resize(n);
  return devs;
}

}  // namespace kvs::vulkan
