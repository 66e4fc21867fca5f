// Presses by name, with typed, documented parameters (`kvshrink presses` prints this table).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "press/params.h"  // ParamSpec, ParamMap, Params, parse_params, parse_trigger
#include "press/press.h"
#include "press/select/topk.h"

namespace kvs {

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
};

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
