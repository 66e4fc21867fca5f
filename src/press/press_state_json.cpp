#include "press/press_state_json.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace kvs {

nlohmann::json press_state_to_json(const PressState& s) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : s.values) j[k] = v;
  return j;
}

PressState press_state_from_meta(const nlohmann::json& meta, const std::string& file) {
  PressState s;
  if (!meta.contains("press_state") || meta.at("press_state").is_null()) return s;
  const auto& j = meta.at("press_state");
  if (!j.is_object()) fail("{}: header field 'press_state' must be an object", file);
  for (const auto& [k, v] : j.items()) {
    if (!v.is_array()) fail("{}: press_state '{}' must be an array of numbers", file, k);
    std::vector<double> xs;
    for (const auto& x : v) {
      if (!x.is_number()) fail("{}: press_state '{}' must be an array of numbers", file, k);
      const double d = x.get<double>();
      if (!std::isfinite(d)) fail("{}: press_state '{}' holds a non-finite number", file, k);
      xs.push_back(d);
    }
    s.values[k] = std::move(xs);
  }
  return s;
}

}  // namespace kvs
