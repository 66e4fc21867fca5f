// Deterministic random numbers for the task generators. The standard distributions
// (std::uniform_int_distribution, std::shuffle) are implementation-defined, so a generator that
// used them could give different samples with another standard library; this one is fully
// specified: splitmix64 seeded from a hash of (seed, stream words), unbiased bounded integers by
// rejection, Fisher-Yates shuffles.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string_view>
#include <utility>
#include <vector>

#include "core/hash.h"

namespace kvs::eval {

// FNV-1a of a string, to turn names ("niah", "L1024") into stream words.
inline uint64_t hash_str(std::string_view s) { return fnv1a(s); }

class Rng {
 public:
  // The state is a mix of every word, so Rng({seed, task, index}) streams are independent.
  explicit Rng(std::initializer_list<uint64_t> words) {
    state_ = 0x9E3779B97F4A7C15ull;
    for (uint64_t w : words) {
      state_ ^= w + 0x9E3779B97F4A7C15ull + (state_ << 6) + (state_ >> 2);
      next();
    }
  }
  explicit Rng(uint64_t seed) : Rng({seed}) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0 (rejection sampling: no modulo bias).
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = next();
    while (x >= limit);
    return x % n;
  }
  // Uniform in [lo, hi] (inclusive).
  int64_t range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(below(static_cast<uint64_t>(hi - lo + 1))); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }

  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[below(i)]);
  }
  template <typename T>
  const T& pick(const std::vector<T>& v) {
    return v[below(v.size())];
  }

 private:
  uint64_t state_;
};

}  // namespace kvs::eval
