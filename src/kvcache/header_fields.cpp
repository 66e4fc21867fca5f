#include "kvcache/header_fields.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace kvs {

std::string json_kind(const nlohmann::json& v) {
  if (v.is_string()) return "string";
  if (v.is_number_integer()) return "integer";
  if (v.is_number()) return "number";
  if (v.is_boolean()) return "boolean";
  if (v.is_null()) return "null";
  if (v.is_array()) return "array";
  if (v.is_object()) return "object";
  return "binary";
}

namespace {
std::string fmt_range(double lo, double hi, bool lo_open) {
  return fmt::format("in {}{}, {}]", lo_open ? "(" : "[", lo, hi);
}
}  // namespace

HeaderFields::HeaderFields(const nlohmann::json& obj, std::string file) : j_(obj), file_(std::move(file)) {
  if (!j_.is_object()) fail("{}: the header must be a JSON object, got {}", file_, json_kind(j_));
}

const nlohmann::json* HeaderFields::get(std::string_view key) const {
  const auto it = j_.find(key);
  return it == j_.end() ? nullptr : &*it;
}

bool HeaderFields::has(std::string_view key) const { return get(key) != nullptr; }
bool HeaderFields::is_null(std::string_view key) const {
  const auto* v = get(key);
  return v && v->is_null();
}

void HeaderFields::bad(std::string_view key, const std::string& what) const {
  fail("{}: header field '{}' {}", file_, key, what);
}

int64_t HeaderFields::as_integer(std::string_view key, const nlohmann::json& v, int64_t lo, int64_t hi) const {
  if (!v.is_number_integer()) bad(key, "must be an integer, got " + json_kind(v));
  if (v.is_number_unsigned()) {
    // Non-negative integers are stored unsigned; compare in uint64 before narrowing.
    const uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi) || (lo > 0 && u < static_cast<uint64_t>(lo)))
      bad(key, fmt::format("must be an integer in {}..{}, got {}", lo, hi, u));
    return static_cast<int64_t>(u);
  }
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) bad(key, fmt::format("must be an integer in {}..{}, got {}", lo, hi, x));
  return x;
}

double HeaderFields::as_number(std::string_view key, const nlohmann::json& v, double lo, double hi, bool lo_open) const {
  if (!v.is_number()) bad(key, "must be a number, got " + json_kind(v));
  const double x = v.get<double>();
  if (!std::isfinite(x) || (lo_open ? !(x > lo) : !(x >= lo)) || !(x <= hi))
    bad(key, fmt::format("must be a finite number {}, got {}", fmt_range(lo, hi, lo_open), x));
  return x;
}

int64_t HeaderFields::integer(std::string_view key, int64_t lo, int64_t hi) const {
  const auto* v = get(key);
  if (!v) fail("{}: header lacks '{}'", file_, key);
  return as_integer(key, *v, lo, hi);
}

std::string HeaderFields::string(std::string_view key) const {
  const auto* v = get(key);
  if (!v) fail("{}: header lacks '{}'", file_, key);
  if (!v->is_string()) bad(key, "must be a string, got " + json_kind(*v));
  return v->get<std::string>();
}

int64_t HeaderFields::integer_or(std::string_view key, int64_t lo, int64_t hi, int64_t def) const {
  const auto* v = get(key);
  return v ? as_integer(key, *v, lo, hi) : def;
}

uint64_t HeaderFields::uint64_or(std::string_view key, uint64_t def) const {
  const auto* v = get(key);
  if (!v) return def;
  if (!v->is_number_integer()) bad(key, "must be an integer, got " + json_kind(*v));
  if (!v->is_number_unsigned() && v->get<int64_t>() < 0)
    bad(key, fmt::format("must be an integer in 0..{}, got {}", UINT64_MAX, v->get<int64_t>()));
  return v->get<uint64_t>();
}

double HeaderFields::number_or(std::string_view key, double lo, double hi, bool lo_open, double def) const {
  const auto* v = get(key);
  return v ? as_number(key, *v, lo, hi, lo_open) : def;
}

std::optional<double> HeaderFields::number_or_null(std::string_view key, double lo, double hi) const {
  const auto* v = get(key);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_number()) bad(key, "must be a number or null, got " + json_kind(*v));
  return as_number(key, *v, lo, hi, false);
}

std::string HeaderFields::string_or(std::string_view key, const std::string& def) const {
  const auto* v = get(key);
  if (!v) return def;
  if (!v->is_string()) bad(key, "must be a string, got " + json_kind(*v));
  return v->get<std::string>();
}

bool HeaderFields::boolean_or(std::string_view key, bool def) const {
  const auto* v = get(key);
  if (!v) return def;
  if (!v->is_boolean()) bad(key, "must be a boolean, got " + json_kind(*v));
  return v->get<bool>();
}

std::vector<std::string> HeaderFields::strings_or(std::string_view key) const {
  const auto* v = get(key);
  if (!v) return {};
  if (!v->is_array()) bad(key, "must be an array of strings, got " + json_kind(*v));
  std::vector<std::string> out;
  out.reserve(v->size());
  for (size_t i = 0; i < v->size(); ++i) {
    const auto& e = (*v)[i];
    if (!e.is_string()) bad(key, fmt::format("must be an array of strings, got {} at index {}", json_kind(e), i));
    out.push_back(e.get<std::string>());
  }
  return out;
}

void HeaderFields::object_if_present(std::string_view key) const {
  const auto* v = get(key);
  if (v && !v->is_object()) bad(key, "must be an object, got " + json_kind(*v));
}

}  // namespace kvs
