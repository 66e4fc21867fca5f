// A press's per-sequence state (PressState) as JSON, the form the `.kvc` header stores it in
// ("press_state": an object of arrays of finite numbers). Used by the CLI's .kvc headers
// (runtime/kvc_meta) and the server's context store (server/context_file).
#pragma once
#include <nlohmann/json.hpp>

#include <string>

#include "press/press.h"

namespace kvs {

nlohmann::json press_state_to_json(const PressState& s);
// Reads meta["press_state"] (absent or null: an empty state); anything but an object of arrays
// of finite numbers is refused with a message naming `file`.
PressState press_state_from_meta(const nlohmann::json& meta, const std::string& file);

}  // namespace kvs
