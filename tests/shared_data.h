// Test data in ../shared beside the checkout (read-only; CI has it, a fresh clone may not).
// Without ../shared a test that asks for a file there prints the marker below, and ctest reports
// the test as skipped instead of failed (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt), so the
// README's test command passes on a clone alone. When ../shared exists, a missing file is a failure.
#pragma once
#include <cstdio>
#include <filesystem>
#include <string>

namespace kvs::test {

inline std::string shared_dir() {
  static const bool present = std::filesystem::is_directory(KVS_SHARED_DIR);
  if (!present) {
    std::printf("KVS_SHARED_MISSING: %s is not there; this test needs it and is skipped\n", KVS_SHARED_DIR);
    std::fflush(stdout);
  }
  return KVS_SHARED_DIR;
}
inline std::string shared_path(const std::string& rel) { return shared_dir() + "/" + rel; }

}  // namespace kvs::test
