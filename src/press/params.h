// Press options: typed, range-checked "key=value" parameters and the trigger syntax.
// Every press option and trigger, whether it comes from the command line, an eval grid or a
// .kvc header, goes through this file; nothing else parses them.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "press/press.h"

namespace kvs {

struct ParamSpec {
  enum class Type { Int, Float, Bool, String };
  std::string name;
  Type type;
  std::string default_value;
  std::string doc;
  // Inclusive range for Int and Float options (unset = unbounded on that side). Int options must
  // in any case fit an `int`, so get_int() results can be narrowed safely.
  std::optional<double> min = std::nullopt;
  std::optional<double> max = std::nullopt;
  // "1..4096", ">= 1", "[0, 1]", "any integer", ... (for messages and `kvshrink presses`).
  std::string range_text() const;
};

using ParamMap = std::map<std::string, std::string>;

// Typed access to validated parameters (defaults filled in). The constructor refuses unknown
// keys, values that do not parse as their type (whole string, no spaces), non-finite floats
// (nan, inf, 1e999), integers that overflow int64 or `int`, and values outside the spec's range;
// each message names the press, the option, the value and what is allowed.
class Params {
 public:
  Params(const std::string& press, const std::vector<ParamSpec>& specs, const ParamMap& given);
  int64_t get_int(const std::string& k) const;  // always within the spec's range and an int
  double get_float(const std::string& k) const;  // always finite and within the spec's range
  bool get_bool(const std::string& k) const;
  const std::string& get_str(const std::string& k) const;
  const ParamMap& values() const { return values_; }

 private:
  std::string press_;
  ParamMap values_;
};

// Strict scalar parsers (the whole string must be the number; no leading spaces or '+'):
// nullopt when the text is not a number of that type, out of the type's range or not finite.
std::optional<int64_t> parse_int64(const std::string& s);
std::optional<double> parse_finite_double(const std::string& s);
// "1", "true", "yes", "on" / "0", "false", "no", "off".
std::optional<bool> parse_bool_word(const std::string& s);

// Parses "key=value" strings into a map; throws on a missing '=', an empty key or a key given twice.
ParamMap parse_params(const std::vector<std::string>& kv);

inline constexpr int64_t kMaxTriggerEvery = 1'000'000;     // every:N, N in 1..this
inline constexpr double kMaxTriggerBytes = 1125899906842624.0;  // memory:BYTES <= 2^50 (1 PiB)
// Parses a trigger: "prefill", "every:N" (N in 1..1,000,000), "memory:BYTES" (K/M/G suffixes
// allowed; finite, >= 1 and <= 2^50 bytes after the suffix).
Trigger parse_trigger(const std::string& s);

}  // namespace kvs
