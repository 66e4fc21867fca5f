// Helpers shared by the method benchmarks (benches/methods/*_bench.cpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace kvs::bench {

// A comma-separated list of integers from the environment variable `name`, or `def` when unset.
inline std::vector<int> env_ints(const char* name, std::vector<int> def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  std::vector<int> out;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

// A comma-separated list of strings from the environment variable `name`, or `def` when unset.
inline std::vector<std::string> env_strs(const char* name, std::vector<std::string> def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  std::vector<std::string> out;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

// n token ids in [3, n_vocab) (the special ids at the bottom avoided), reproducible by seed.
inline std::vector<int32_t> random_tokens(int n, int n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = 3 + static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab - 3));
  return v;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace kvs::bench
