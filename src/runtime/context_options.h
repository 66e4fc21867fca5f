// How a compressed context is asked for: the press options (press, keep ratio or budget, sinks,
// window, press options, trigger, seed) and the prompt format (chat template, question template),
// as the CLI's options, the C++/Python API and the .kvc header (runtime/kvc_meta.h) spell them.
// The command-line parsing of these lives in tools/press_options.h; this is the engine's side.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "runtime/session.h"

namespace kvs {

struct PressOptions {
  std::string press = "full";
  std::string keep;     // "" or "auto": none (adaptive presses choose); else a ratio in (0, 1]
  double quality = 0;   // > 0: target quality of a calibrated press (instead of keep)
  int budget = 0;  // absolute tokens per head (overrides keep)
  int sinks = -1;  // -1 = the press's default
  int window = -1;
  std::vector<std::string> opts;  // key=value press options
  std::string trigger;            // empty = the press's default
  uint64_t seed = 0;
  CompressionSpec spec() const;  // validates; throws kvs::Error
  // The keep ratio given (none for "" / "auto"); throws kvs::Error on anything else.
  std::optional<double> keep_ratio() const;
};

// How a context and a question become tokens.
struct PromptOptions {
  bool chat = false;
  std::string question_template;  // empty = the default for the mode
  std::vector<int32_t> context_tokens(const Tokenizer& tok, const std::string& context) const;
  std::vector<int32_t> question_tokens(const Tokenizer& tok, const std::string& question) const;
};

}  // namespace kvs
