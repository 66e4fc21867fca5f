// Typed, range-checked reading of the fields of a JSON file header (the .kvc header and the
// metadata the tool stores in it). A field of the wrong type or out of range becomes a kvs::Error
// "FILE: header field 'NAME' must be an integer, got string" — never a nlohmann type_error.
// Reading a field never allocates more than the field itself holds.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvs {

// "string", "integer", "number", "boolean", "null", "array", "object".
std::string json_kind(const nlohmann::json& v);

class HeaderFields {
 public:
  // Fails unless `obj` is a JSON object.
  HeaderFields(const nlohmann::json& obj, std::string file);

  bool has(std::string_view key) const;  // present, whatever its value (null included)
  bool is_null(std::string_view key) const;

  // Required fields (missing -> "FILE: header lacks 'NAME'").
  int64_t integer(std::string_view key, int64_t lo, int64_t hi) const;
  std::string string(std::string_view key) const;
  // Optional fields: `def` when absent.
  int64_t integer_or(std::string_view key, int64_t lo, int64_t hi, int64_t def) const;
  uint64_t uint64_or(std::string_view key, uint64_t def) const;
  // Finite numbers (integers count), in [lo, hi]; lo excluded when lo_open.
  double number_or(std::string_view key, double lo, double hi, bool lo_open, double def) const;
  // A number as number_or, or null (-> nullopt); absent -> nullopt.
  std::optional<double> number_or_null(std::string_view key, double lo, double hi) const;
  std::string string_or(std::string_view key, const std::string& def) const;
  bool boolean_or(std::string_view key, bool def) const;
  std::vector<std::string> strings_or(std::string_view key) const;  // array of strings; absent -> {}
  void object_if_present(std::string_view key) const;               // must be an object when present

  // "FILE: header field 'KEY' ..." with `what` appended.
  [[noreturn]] void bad(std::string_view key, const std::string& what) const;

 private:
  const nlohmann::json* get(std::string_view key) const;  // null when absent
  int64_t as_integer(std::string_view key, const nlohmann::json& v, int64_t lo, int64_t hi) const;
  double as_number(std::string_view key, const nlohmann::json& v, double lo, double hi, bool lo_open) const;

  const nlohmann::json& j_;
  std::string file_;
};

}  // namespace kvs
