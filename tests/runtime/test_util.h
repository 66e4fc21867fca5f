// Helpers shared by runtime tests: the stories260K reference and temporary directories.
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include <unistd.h>

#include "test_data.h"

namespace kvs::test {

inline std::string stories_gguf() { return test_data("models/stories260K/stories260K.gguf"); }

struct RefCase {
  std::string prompt;
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;  // [n_tokens][512]
  std::vector<int32_t> greedy;
};

inline std::vector<RefCase> load_stories_reference() {
  std::vector<RefCase> out;
  std::ifstream f(test_data("models/stories260K/reference.jsonl"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    RefCase c;
    c.prompt = j["prompt"].get<std::string>();
    c.tokens = j["tokens"].get<std::vector<int32_t>>();
    c.logits = j["logits"].get<std::vector<std::vector<float>>>();
    c.greedy = j["greedy"].get<std::vector<int32_t>>();
    out.push_back(std::move(c));
  }
  return out;
}

// A fresh directory under the build tree, removed when the object dies.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name) {
    path = std::filesystem::path(KVS_BINARY_DIR) / "test_tmp" / (name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
  std::string str() const { return path.string(); }
};

}  // namespace kvs::test
