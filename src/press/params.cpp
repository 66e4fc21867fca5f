#include "press/params.h"

#include <fmt/format.h>

#include <charconv>
#include <climits>
#include <cmath>

#include "core/error.h"

namespace kvs {

namespace {

using T = ParamSpec::Type;

// Shortest text that reads back as the same double ("1", "0.5", "1e+06").
std::string num(double v) { return fmt::format("{}", v); }

// Checks `val` against `spec`; returns an empty string when valid, else what is wrong.
std::string check_value(const ParamSpec& spec, const std::string& val) {
  const auto in_range = [&](double x) {
    return (!spec.min || x >= *spec.min) && (!spec.max || x <= *spec.max);
  };
  switch (spec.type) {
    case T::Int: {
      const auto v = parse_int64(val);
      if (!v || *v < INT_MIN || *v > INT_MAX || !in_range(static_cast<double>(*v)))
        return fmt::format("must be an integer {}, got '{}'", spec.range_text(), val);
      return {};
    }
    case T::Float: {
      const auto v = parse_finite_double(val);
      if (!v || !in_range(*v)) return fmt::format("must be a finite number {}, got '{}'", spec.range_text(), val);
      return {};
    }
    case T::Bool:
      if (!parse_bool_word(val)) return fmt::format("must be true or false, got '{}'", val);
      return {};
    case T::String:
      return {};
  }
  return "has an unknown type";
}

}  // namespace

std::string ParamSpec::range_text() const {
  if (type != T::Int && type != T::Float) return "";
  if (type == T::Int) {
    // Ints are also bounded by `int`; say so only when the spec leaves a side open.
    const double lo = min ? *min : INT_MIN, hi = max ? *max : INT_MAX;
    return fmt::format("in {}..{}", static_cast<int64_t>(lo), static_cast<int64_t>(hi));
  }
  if (min && max) return fmt::format("in [{}, {}]", num(*min), num(*max));
  if (min) return fmt::format(">= {}", num(*min));
  if (max) return fmt::format("<= {}", num(*max));
  return "";
}

std::optional<int64_t> parse_int64(const std::string& s) {
  int64_t v = 0;
  const char* b = s.data();
  const char* e = b + s.size();
  const auto r = std::from_chars(b, e, v, 10);
  if (s.empty() || r.ec != std::errc() || r.ptr != e) return std::nullopt;  // also ERANGE
  return v;
}

std::optional<double> parse_finite_double(const std::string& s) {
  double v = 0;
  const char* b = s.data();
  const char* e = b + s.size();
  const auto r = std::from_chars(b, e, v, std::chars_format::general);
  if (s.empty() || r.ec != std::errc() || r.ptr != e || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<bool> parse_bool_word(const std::string& v) {
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return std::nullopt;
}

Params::Params(const std::string& press, const std::vector<ParamSpec>& specs, const ParamMap& given) : press_(press) {
  for (const auto& [k, val] : given) {
    const ParamSpec* spec = nullptr;
    for (const auto& s : specs)
      if (s.name == k) spec = &s;
    if (!spec) {
      std::string known;
      for (const auto& s : specs) known += (known.empty() ? "" : ", ") + s.name;
      fail("press '{}' has no option '{}' (options: {})", press, k, known.empty() ? "none" : known);
    }
  }
  // Defaults are checked as well: a spec whose default falls outside its own range is a bug
  // that should surface at the first use, not as a silently wrong press.
  for (const auto& s : specs) {
    const auto it = given.find(s.name);
    const std::string& val = it != given.end() ? it->second : s.default_value;
    if (const std::string why = check_value(s, val); !why.empty())
      fail("press '{}': option {} {}{}", press, s.name, why, it == given.end() ? " (the default)" : "");
    values_[s.name] = val;
  }
}

int64_t Params::get_int(const std::string& k) const { return parse_int64(values_.at(k)).value(); }
double Params::get_float(const std::string& k) const { return parse_finite_double(values_.at(k)).value(); }
bool Params::get_bool(const std::string& k) const { return parse_bool_word(values_.at(k)).value(); }
const std::string& Params::get_str(const std::string& k) const { return values_.at(k); }

ParamMap parse_params(const std::vector<std::string>& kv) {
  ParamMap m;
  for (const auto& s : kv) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) fail("press option '{}' must look like key=value", s);
    const std::string key = s.substr(0, eq);
    if (!m.emplace(key, s.substr(eq + 1)).second) fail("press option '{}' is given twice", key);
  }
  return m;
}

Trigger parse_trigger(const std::string& s) {
  Trigger t;
  if (s == "prefill") return t;
  const auto colon = s.find(':');
  const std::string kind = s.substr(0, colon), arg = colon == std::string::npos ? "" : s.substr(colon + 1);
  if (kind == "every" && colon != std::string::npos) {
    const auto n = parse_int64(arg);
    if (!n || *n < 1 || *n > kMaxTriggerEvery)
      fail("trigger '{}': expected every:N with N an integer in 1..{}", s, kMaxTriggerEvery);
    t.kind = Trigger::Kind::EveryN;
    t.every_n = static_cast<int>(*n);
    return t;
  }
  if (kind == "memory" && colon != std::string::npos) {
    // The number, then an optional K/M/G suffix.
    double n = 0;
    const char* b = arg.data();
    const char* e = b + arg.size();
    const auto r = std::from_chars(b, e, n, std::chars_format::general);
    const bool parsed = !arg.empty() && r.ec == std::errc() && std::isfinite(n);
    const std::string suf = parsed ? std::string(r.ptr, e) : "";
    if (suf == "K" || suf == "k") n *= 1024;
    else if (suf == "M" || suf == "m") n *= 1024.0 * 1024;
    else if (suf == "G" || suf == "g") n *= 1024.0 * 1024 * 1024;
    else if (!suf.empty()) fail("trigger '{}': unknown size suffix '{}' (use K, M or G)", s, suf);
    if (!parsed || !(n >= 1) || !(n <= kMaxTriggerBytes))
      fail("trigger '{}': expected memory:BYTES with BYTES a finite size in 1..2^50 (e.g. memory:64M)", s);
    t.kind = Trigger::Kind::MemoryCap;
    t.cap_bytes = static_cast<size_t>(n);
    return t;
  }
  fail("unknown trigger '{}' (expected prefill, every:N or memory:BYTES)", s);
}

}  // namespace kvs
