#include "server/json_fields.h"

#include <fmt/format.h>

#include <cmath>

namespace kvs::server {

std::string json_type_name(const nlohmann::json& v) {
  if (v.is_string()) return "string";
  if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_boolean()) return "boolean";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  if (v.is_null()) return "null";
  return "value";
}

JsonFields::JsonFields(const nlohmann::json& obj, std::string prefix) : j_(obj), prefix_(std::move(prefix)) {
  if (!j_.is_object()) {
    const std::string where = prefix_.empty() ? "the request body" : fmt::format("'{}'", prefix_.substr(0, prefix_.size() - 1));
    throw bad_request(fmt::format("{} must be a JSON object, got {}", where, json_type_name(j_)),
                      prefix_.empty() ? "" : prefix_.substr(0, prefix_.size() - 1));
  }
}

void JsonFields::allow_only(std::initializer_list<std::string_view> known) const {
  allow_only(std::span<const std::string_view>(known.begin(), known.size()));
}

void JsonFields::allow_only(std::span<const std::string_view> known) const {
  for (const auto& [k, v] : j_.items()) {
    bool ok = false;
    for (std::string_view n : known) ok = ok || k == n;
    if (!ok) {
      std::string list;
      for (std::string_view n : known) list += (list.empty() ? "" : ", ") + std::string(n);
      throw bad_request(fmt::format("unknown field '{}{}' (accepted: {})", prefix_, k.substr(0, 64), list), param(k.substr(0, 64)),
                        "unknown_parameter");
    }
  }
}

const nlohmann::json* JsonFields::get(std::string_view key) const {
  const auto it = j_.find(key);
  if (it == j_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonFields::has(std::string_view key) const { return get(key) != nullptr; }

void JsonFields::bad(std::string_view key, const std::string& what) const {
  throw bad_request(fmt::format("'{}' {}", param(key), what), param(key));
}

std::optional<std::string> JsonFields::string(std::string_view key, size_t max_bytes) const {
  const nlohmann::json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad(key, fmt::format("must be a string, got {}", json_type_name(*v)));
  const std::string& s = v->get_ref<const std::string&>();
  if (s.size() > max_bytes) bad(key, fmt::format("is too long: {} bytes, at most {}", s.size(), max_bytes));
  return s;
}

std::optional<int64_t> JsonFields::integer(std::string_view key, int64_t lo, int64_t hi) const {
  const nlohmann::json* v = get(key);
  if (!v) return std::nullopt;
  const auto range = [&] { return fmt::format("must be an integer in [{}, {}]", lo, hi); };
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) bad(key, fmt::format("{}, got {}", range(), u));
    x = static_cast<int64_t>(u);
  } else if (v->is_number_integer()) {
    x = v->get<int64_t>();
  } else if (v->is_number_float()) {
    // 16.0 is 16 (JavaScript has one number type); 16.5 is not an integer.
    const double d = v->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || d < -9.2e18 || d > 9.2e18)
      bad(key, fmt::format("{}, got {}", range(), d));
    x = static_cast<int64_t>(d);
  } else {
    bad(key, fmt::format("{}, got {}", range(), json_type_name(*v)));
  }
  if (x < lo || x > hi) bad(key, fmt::format("{}, got {}", range(), x));
  return x;
}

std::optional<double> JsonFields::number(std::string_view key, double lo, double hi, bool lo_open) const {
  const nlohmann::json* v = get(key);
  if (!v) return std::nullopt;
  const auto range = [&] { return fmt::format("must be a number in {}{}, {}]", lo_open ? "(" : "[", lo, hi); };
  if (!v->is_number()) bad(key, fmt::format("{}, got {}", range(), json_type_name(*v)));
  const double d = v->get<double>();
  if (!std::isfinite(d) || d < lo || d > hi || (lo_open && d == lo)) bad(key, fmt::format("{}, got {}", range(), d));
  return d;
}

std::optional<bool> JsonFields::boolean(std::string_view key) const {
  const nlohmann::json* v = get(key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad(key, fmt::format("must be a boolean, got {}", json_type_name(*v)));
  return v->get<bool>();
}

}  // namespace kvs::server
