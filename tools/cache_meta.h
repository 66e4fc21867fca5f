// What a .kvc file records besides the cache: the model's identity (path, name, fingerprint),
// the press and its parameters, the prompt format — and the checks made when loading it.
#pragma once
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "press_options.h"
#include "runtime/session.h"

namespace kvs::cli {

nlohmann::json cache_meta(const Model& m, const PressOptions& po, const PromptOptions& pr, const CompressedContext& ctx);
// Throws naming the file and both fingerprints if `m` is not the model the cache was made with.
void check_cache_model(const nlohmann::json& meta, const Model& m, const std::string& file);
std::string meta_model_path(const nlohmann::json& meta, const std::string& file);
PressOptions press_options_from_meta(const nlohmann::json& meta);
PromptOptions prompt_options_from_meta(const nlohmann::json& meta);
// The press's per-sequence state as saved in the header, and back (checked: an object of arrays
// of finite numbers).
nlohmann::json press_state_to_json(const PressState& s);
PressState press_state_from_meta(const nlohmann::json& meta, const std::string& file);

}  // namespace kvs::cli
