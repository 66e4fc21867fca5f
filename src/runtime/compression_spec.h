// A press with the request it runs under and its trigger, built in one place from what a user
// gives (CLI flags, eval grid entries, .kvc headers, later HTTP bodies).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "press/press.h"
#include "press/registry.h"

namespace kvs {

struct CompressionSpec {
  Press press;
  CompressRequest request;
  Trigger trigger;  // usually press.trigger
  bool sinks_given = false, window_given = false;  // set by the user, not the press's defaults
};

struct SpecArgs {
  std::string press = "full";
  ParamMap options;               // press options (key=value)
  std::optional<double> keep;     // none: the press chooses (adaptive presses) or an error
  int32_t budget = 0;             // tokens per KV head (wins over keep)
  std::optional<double> quality;  // calibrated presses
  int sinks = -1, window = -1;    // -1: the press's defaults
  std::string trigger;            // empty: the press's default ("prefill", "every:N", "memory:BYTES")
  uint64_t seed = 0;
};

// Validates everything (unknown press or option, out-of-range values, a request the press cannot
// take) and throws kvs::Error naming what is wrong.
CompressionSpec make_compression_spec(const SpecArgs& a);

// Refuses (kvs::Error naming the option) sinks / window given explicitly that alone protect more
// of an n-token context than the keep ratio or token budget keeps: a press keeps every protected
// token, so it would keep far more than asked, silently. The press's own defaults are never
// refused (a short prompt under them keeps what they protect, by design).
void check_protection_fits(const CompressionSpec& s, int64_t n_tokens);

}  // namespace kvs
