// FNV-1a (64-bit): the one non-cryptographic hash of the project (model fingerprints, .kvc
// checksums, seeds derived from strings).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace kvs {

constexpr uint64_t kFnv1aInit = 1469598103934665603ull;

// Continues hash `h` over n bytes at p.
inline uint64_t fnv1a(uint64_t h, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}
inline uint64_t fnv1a(std::string_view s, uint64_t h = kFnv1aInit) { return fnv1a(h, s.data(), s.size()); }

}  // namespace kvs
