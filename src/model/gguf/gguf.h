// GGUF model files (versions 2 and 3): metadata key/values and tensor infos, tensor data mmapped.
// Spec: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
// Every parse error names the file, the byte offset or key/tensor, and what was expected.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/mapped_file.h"
#include "core/tensor_view.h"

namespace kvs {

enum class GgufType : uint32_t {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
};
std::string_view gguf_type_name(GgufType t);

// One metadata value. Scalars: integers in `i` (signed types) or `u` (unsigned types and bool),
// floats in `f`, strings in `s`. Arrays: `array_type` plus the matching vector (integers of any
// width in `ints`, floats in `floats`, strings in `strs`, bools in `ints`). Nested arrays are
// rejected by the parser (no model uses them).
struct GgufValue {
  GgufType type = GgufType::UINT8;
  GgufType array_type = GgufType::UINT8;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strs;

  bool is_int() const;    // any integer scalar type
  bool is_float() const;  // FLOAT32 / FLOAT64
  size_t array_size() const;
};

class GgufFile {
 public:
  // Maps and parses `path`. Throws kvs::Error on any malformation.
  static std::unique_ptr<GgufFile> open(const std::string& path);
  // Parses an in-memory image (used by the fuzzer and tests); `name` is used in messages.
  // The buffer must outlive the returned object.
  static std::unique_ptr<GgufFile> parse(const uint8_t* data, size_t size, const std::string& name);

  const std::string& path() const { return name_; }
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }
  size_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters. The required ones throw if missing or of the wrong type; the _opt ones throw
  // only for a wrong type. Integer getters accept any integer type; float getters accept floats
  // and integers.
  std::string get_str(std::string_view key) const;
  std::optional<std::string> get_str_opt(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  std::optional<int64_t> get_int_opt(std::string_view key) const;
  double get_float(std::string_view key) const;
  std::optional<double> get_float_opt(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::optional<bool> get_bool_opt(std::string_view key) const;
  std::vector<std::string> get_str_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;

  // The file mapping the tensor data lives in ([mapped_data(), + file_size())), or nullptr when
  // parsed from a caller's buffer.
  const uint8_t* mapped_data() const { return file_ ? data_ : nullptr; }

  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  void parse_all();
  [[noreturn]] void type_error(std::string_view key, const GgufValue& v, std::string_view want) const;

  std::string name_;
  std::unique_ptr<MappedFile> file_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace kvs
