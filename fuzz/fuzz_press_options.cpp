// libFuzzer target for press-option and trigger parsing (src/press/params.cpp, registry.cpp):
// make_press with an arbitrary name and key=value options, parse_params, parse_trigger and the
// scalar parsers. kvs::Error is the expected outcome for bad input; a crash, sanitizer report,
// abort, or an accepted value that breaks the parser's promises (a trigger that wraps, a NaN or
// out-of-range option) is a bug. See docs/fuzzing.md.
//
// Input: lines separated by '\n': line 1 the press name, line 2 a trigger, every further line a
// "key=value" press option (as `--press`, `--trigger` and `--opt` take them).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/error.h"
#include "press/params.h"
#include "press/registry.h"

namespace {

volatile uint8_t g_sink;

#define FUZZ_CHECK(cond)                                                                          \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      std::fprintf(stderr, "fuzz_press_options: check failed: %s (line %d)\n", #cond, __LINE__); \
      std::abort();                                                                               \
    }                                                                                             \
  } while (0)

void check_trigger(const kvs::Trigger& t) {
  if (t.kind == kvs::Trigger::Kind::EveryN) FUZZ_CHECK(t.every_n >= 1 && t.every_n <= kvs::kMaxTriggerEvery);
  if (t.kind == kvs::Trigger::Kind::MemoryCap)
    FUZZ_CHECK(t.cap_bytes >= 1 && static_cast<double>(t.cap_bytes) <= kvs::kMaxTriggerBytes);
}

// Every value Params accepted is typed, finite and inside its spec's range.
void check_params(const std::string& press, const std::vector<kvs::ParamSpec>& specs, const kvs::ParamMap& given) {
  const kvs::Params p(press, specs, given);
  for (const auto& s : specs) {
    switch (s.type) {
      case kvs::ParamSpec::Type::Int: {
        const int64_t v = p.get_int(s.name);
        FUZZ_CHECK(v >= INT_MIN && v <= INT_MAX);
        FUZZ_CHECK(!s.min || static_cast<double>(v) >= *s.min);
        FUZZ_CHECK(!s.max || static_cast<double>(v) <= *s.max);
        break;
      }
      case kvs::ParamSpec::Type::Float: {
        const double v = p.get_float(s.name);
        FUZZ_CHECK(std::isfinite(v));
        FUZZ_CHECK(!s.min || v >= *s.min);
        FUZZ_CHECK(!s.max || v <= *s.max);
        break;
      }
      case kvs::ParamSpec::Type::Bool:
        g_sink = p.get_bool(s.name);
        break;
      case kvs::ParamSpec::Type::String:
        g_sink = static_cast<uint8_t>(p.get_str(s.name).size());
        break;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> lines(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') lines.emplace_back();
    else lines.back().push_back(static_cast<char>(data[i]));
  }
  const std::string name = lines[0];
  const std::string trigger = lines.size() > 1 ? lines[1] : "";
  const std::vector<std::string> opts(lines.begin() + std::min<size_t>(2, lines.size()), lines.end());

  // Scalar parsers on every line: whatever they accept is in range of its type.
  for (const auto& l : lines) {
    if (auto v = kvs::parse_finite_double(l)) FUZZ_CHECK(std::isfinite(*v));
    if (auto v = kvs::parse_int64(l)) g_sink = static_cast<uint8_t>(*v);
    g_sink = kvs::parse_bool_word(l).value_or(false);
  }
  try {
    check_trigger(kvs::parse_trigger(trigger));
  } catch (const kvs::Error&) {
  }
  kvs::ParamMap params;
  try {
    params = kvs::parse_params(opts);
  } catch (const kvs::Error&) {
    return 0;
  }
  try {
    const kvs::Press p = kvs::make_press(name, params);
    check_trigger(p.trigger);
    // make_press accepted these options, so Params must have too, with every promise kept.
    check_params(name, kvs::press_info(name).params, params);
  } catch (const kvs::Error&) {
  }
  return 0;
}
