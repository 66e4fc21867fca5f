// Helpers shared by the tokenizer tests: the two shared tokenizers (loaded once), a tiny
// protobuf writer (tokenizer.model fixtures), a GGUF metadata writer and temp directories.
#pragma once
#include <unistd.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/gguf/gguf.h"
#include "model/tokenizer/tokenizer.h"

#include "test_data.h"

namespace kvs::test {


inline const Tokenizer& stories_tokenizer() {
  static const auto t = [] {
    auto g = GgufFile::open(test_data("models/stories260K/stories260K.gguf"));
    return Tokenizer::create(vocab_from_gguf(*g));
  }();
  return *t;
}

inline const Tokenizer& smollm2_tokenizer() {
  static const auto t = Tokenizer::create(vocab_from_hf_dir(test_data("tokenizers/smollm2")));
  return *t;
}

// Error message of a call that must throw kvs::Error ("" if it did not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Protobuf wire format writer.
struct Pb {
  std::string buf;
  void varint(uint64_t v) {
    while (v >= 0x80) {
      buf += static_cast<char>((v & 0x7F) | 0x80);
      v >>= 7;
    }
    buf += static_cast<char>(v);
  }
  void tag(uint32_t field, uint32_t wire) { varint((static_cast<uint64_t>(field) << 3) | wire); }
  Pb& u(uint32_t field, uint64_t v) {
    tag(field, 0);
    varint(v);
    return *this;
  }
  Pb& str(uint32_t field, const std::string& s) {
    tag(field, 2);
    varint(s.size());
    buf += s;
    return *this;
  }
  Pb& f32(uint32_t field, float f) {
    tag(field, 5);
    char b[4];
    std::memcpy(b, &f, 4);
    buf.append(b, 4);
    return *this;
  }
  Pb& msg(uint32_t field, const Pb& m) { return str(field, m.buf); }
};

// GGUF v3 image with metadata only (no tensors).
struct GgufWriter {
  std::string kv;
  uint64_t n = 0;
  void raw_str(std::string& out, const std::string& s) {
    const uint64_t len = s.size();
    out.append(reinterpret_cast<const char*>(&len), 8);
    out += s;
  }
  template <typename T>
  void raw(std::string& out, T v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void key(const std::string& k, uint32_t type) {
    raw_str(kv, k);
    raw(kv, type);
    ++n;
  }
  GgufWriter& str(const std::string& k, const std::string& v) {
    key(k, 8);
    raw_str(kv, v);
    return *this;
  }
  GgufWriter& u32(const std::string& k, uint32_t v) {
    key(k, 4);
    raw(kv, v);
    return *this;
  }
  GgufWriter& boolean(const std::string& k, bool v) {
    key(k, 7);
    raw(kv, static_cast<uint8_t>(v));
    return *this;
  }
  GgufWriter& strs(const std::string& k, const std::vector<std::string>& v) {
    key(k, 9);
    raw(kv, uint32_t{8});
    raw(kv, static_cast<uint64_t>(v.size()));
    for (const auto& s : v) raw_str(kv, s);
    return *this;
  }
  GgufWriter& f32s(const std::string& k, const std::vector<float>& v) {
    key(k, 9);
    raw(kv, uint32_t{6});
    raw(kv, static_cast<uint64_t>(v.size()));
    for (float f : v) raw(kv, f);
    return *this;
  }
  GgufWriter& i32s(const std::string& k, const std::vector<int32_t>& v) {
    key(k, 9);
    raw(kv, uint32_t{5});
    raw(kv, static_cast<uint64_t>(v.size()));
    for (int32_t x : v) raw(kv, x);
    return *this;
  }
  std::string image() {
    std::string out = "GGUF";
    raw(out, uint32_t{3});
    raw(out, uint64_t{0});
    raw(out, n);
    return out + kv;
  }
};

// The directories temp_dir made in this process, removed when it exits (each test process makes
// its own, so they would otherwise pile up in /tmp: thousands after a few days of test runs).
struct TempDirsRemovedAtExit {
  std::vector<std::filesystem::path> dirs;
  ~TempDirsRemovedAtExit() {
    std::error_code ec;  // best effort: a failure to clean up is not a test failure
    for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
  }
};
inline TempDirsRemovedAtExit& temp_dirs_made() {
  static TempDirsRemovedAtExit made;
  return made;
}

// A fresh directory under the gtest temp dir, unique per process: ctest runs tests in parallel
// (and other builds' suites may run at the same time), so a fixed name would be shared. Removed
// when the process exits.
inline std::string temp_dir(const std::string& name) {
  const auto d = std::filesystem::path(testing::TempDir()) / ("kvs_tok_" + name + "." + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  temp_dirs_made().dirs.push_back(d);
  return d.string();
}

inline void write_file(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary);
  out << data;
}

}  // namespace kvs::test
