// Presses by name, with typed, documented parameters (`kvshrink presses` prints this table).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "press/params.h"  // ParamSpec, ParamMap, Params, parse_params, parse_trigger
#include "press/press.h"
#include "press/select/topk.h"

namespace kvs {

// A named set of option values (`--opt preset=NAME`): the paper's settings, the official code's.
// A preset's values replace the options' defaults; options given explicitly replace the preset's.
// Values for options the chosen allocator does not take are skipped (a preset may set the
// press's own allocator's options). `sinks` / `window` (>= 0) replace the press's defaults.
struct PressPreset {
  std::string name;
  std::string doc;  // one line: where the values come from
  ParamMap values;
  int sinks = -1;
  int window = -1;
};

// A press: its scorer (and selector, merger, trigger) from its own options; its allocator from
// the allocator registry, `--opt allocator=NAME` (default: the press's own) with that
// allocator's options.
struct PressInfo {
  std::string name;
  std::string paper;        // citation
  std::string description;  // one line
  std::vector<ParamSpec> params;
  int default_sinks = 0;    // CompressRequest defaults this press is meant to run with
  int default_window = 0;
  Trigger default_trigger;
  std::string default_allocator;  // empty: the press takes no allocator (full)
  // Builds the press's scorer, selector (null: top-k), merger and trigger; the allocator is set
  // by make_press.
  std::function<Press(const Params&)> make;
  // Presets, the first the default; when given, the press takes a `preset` option (add it to
  // `params` with preset_param()). Empty: no presets.
  std::vector<PressPreset> presets = {};
};

// The `preset` option of a press with presets (its default the first preset's name).
ParamSpec preset_param(const std::vector<PressPreset>& presets);
// The preset `options` select for `info` (options["preset"], else the first); null when the
// press has none. Throws kvs::Error naming the known presets.
const PressPreset* selected_preset(const PressInfo& info, const ParamMap& options);
// The options a press is built with: the selected preset's values under the explicit ones.
ParamMap with_preset(const PressInfo& info, const ParamMap& options);
// The sinks / window a press runs with when the request does not say (preset, else the press's).
int default_sinks(const PressInfo& info, const ParamMap& options);
int default_window(const PressInfo& info, const ParamMap& options);

struct AllocatorInfo {
  std::string name;
  std::string description;
  std::vector<ParamSpec> params;
  std::function<std::shared_ptr<const BudgetAllocator>(const Params&, const Scorer&)> make;
};

const std::vector<PressInfo>& press_registry();
const std::vector<AllocatorInfo>& allocator_registry();
// Throws kvs::Error listing the known names.
const AllocatorInfo& allocator_info(const std::string& name);
// Every option press `info` accepts with allocator `allocator` (its own + allocator options).
std::vector<ParamSpec> press_param_specs(const PressInfo& info, const std::string& allocator);
// Throws kvs::Error listing the known names.
const PressInfo& press_info(const std::string& name);
// Builds a press: validates params (unknown keys, bad values -> kvs::Error naming the press and
// the parameter).
Press make_press(const std::string& name, const ParamMap& params = {});
}  // namespace kvs
