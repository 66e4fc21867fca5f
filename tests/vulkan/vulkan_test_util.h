// Shared by the Vulkan tests: one Context on the first Vulkan device for the whole test binary,
// and the skip rule. Without a loader or device the tests skip naming the reason, unless
// KVS_REQUIRE_VULKAN=1 (CI, .ci/run) makes that a failure.
#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "vulkan/context.h"
#include "vulkan/memory.h"
#include "vulkan/transfer.h"

namespace kvs::vulkan::test {

struct Shared {
  std::unique_ptr<Context> ctx;
  std::unique_ptr<BlockAllocator> mem;
  std::unique_ptr<Transfer> xfer;
  std::string why;  // the reason there is no context
};

inline Shared& shared() {
  static Shared s = [] {
    Shared r;
    try {
      r.ctx = std::make_unique<Context>("vulkan");
      r.mem = std::make_unique<BlockAllocator>(*r.ctx, MemoryKind::DeviceLocal);
      r.xfer = std::make_unique<Transfer>(*r.ctx);
    } catch (const Error& e) {
      r.why = e.what();
    }
    return r;
  }();
  return s;
}

inline bool vulkan_required() {
  const char* v = std::getenv("KVS_REQUIRE_VULKAN");
  return v && std::strcmp(v, "1") == 0;
}

// Skips (or, with KVS_REQUIRE_VULKAN=1, fails) the test when there is no Vulkan device.
#define KVS_NEED_VULKAN()                                                                          \
  do {                                                                                             \
    if (!::kvs::vulkan::test::shared().ctx) {                                                     \
      if (::kvs::vulkan::test::vulkan_required())                                                  \
        FAIL() << "KVS_REQUIRE_VULKAN=1 but no Vulkan device: " << ::kvs::vulkan::test::shared().why; \
      GTEST_SKIP() << "no Vulkan device: " << ::kvs::vulkan::test::shared().why;                   \
    }                                                                                              \
  } while (0)

inline Context& ctx() { return *shared().ctx; }
inline BlockAllocator& mem() { return *shared().mem; }
inline Transfer& xfer() { return *shared().xfer; }

// A device buffer holding the bytes of v.
template <typename T>
Buffer to_device(const std::vector<T>& v) {
  Buffer b = mem().allocate(v.size() * sizeof(T));
  xfer().upload(b.view(), v.data(), v.size() * sizeof(T));
  return b;
}

template <typename T>
std::vector<T> to_host(const Buffer& b, size_t n) {
  std::vector<T> v(n);
  xfer().download(b.view(), v.data(), n * sizeof(T));
  return v;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace kvs::vulkan::test
