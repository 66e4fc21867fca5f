// Presses by name, with typed, documented parameters (`kvshrink presses` prints this table).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "press/params.h"  // ParamSpec, ParamMap, Params, parse_params, parse_trigger
#include "press/press.h"

namespace kvs {

struct PressInfo {
  std::string name;
  std::string paper;        // citation
  std::string description;  // one line
  std::vector<ParamSpec> params;
  int default_sinks = 0;    // CompressRequest defaults this press is meant to run with
  int default_window = 0;
  Trigger default_trigger;
  std::function<Press(const Params&)> make;
};

const std::vector<PressInfo>& press_registry();
// Throws kvs::Error listing the known names.
const PressInfo& press_info(const std::string& name);
// Builds a press: validates params (unknown keys, bad values -> kvs::Error naming the press and
// the parameter).
Press make_press(const std::string& name, const ParamMap& params = {});
}  // namespace kvs
