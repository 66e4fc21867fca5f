// Typed, range-checked reading of a JSON request body's fields. A field of the wrong type or out
// of range is an ApiError 400 naming the field (`param`) and what was expected — never a
// nlohmann exception. JSON null counts as absent (clients send null for "not given").
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "server/api_error.h"

namespace kvs::server {

class JsonFields {
 public:
  // `prefix` names nested objects in messages ("kv_compression."). Throws 400 unless `obj` is an
  // object.
  JsonFields(const nlohmann::json& obj, std::string prefix = "");

  // Refuses fields not in `known` (a misspelt option must not be silently ignored).
  void allow_only(std::initializer_list<std::string_view> known) const;
  void allow_only(std::span<const std::string_view> known) const;

  bool has(std::string_view key) const;            // present and not null
  const nlohmann::json* get(std::string_view key) const;  // null when absent or null

  std::optional<std::string> string(std::string_view key, size_t max_bytes) const;
  std::optional<int64_t> integer(std::string_view key, int64_t lo, int64_t hi) const;
  // Finite numbers in [lo, hi] (lo excluded when lo_open).
  std::optional<double> number(std::string_view key, double lo, double hi, bool lo_open = false) const;
  std::optional<bool> boolean(std::string_view key) const;

  std::string param(std::string_view key) const { return prefix_ + std::string(key); }
  [[noreturn]] void bad(std::string_view key, const std::string& what) const;

 private:
  const nlohmann::json& j_;
  std::string prefix_;
};

// "string", "integer", "number", "boolean", "array", "object", "null".
std::string json_type_name(const nlohmann::json& v);

}  // namespace kvs::server
