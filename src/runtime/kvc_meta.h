// What a .kvc file records besides the cache: the model's identity (path, name, fingerprint),
// the press and its parameters, the prompt format — and the checks made when loading it.
#pragma once
#include <nlohmann/json.hpp>

#include "model/model.h"
#include "press/press_state_json.h"  // press_state_to_json / press_state_from_meta
#include "runtime/context_options.h"
#include "runtime/session.h"

namespace kvs {

// The model's identity as a .kvc header records it: model_path (absolute when it can be made so),
// model_name, model_fingerprint (16 hex digits). Shared by the CLI/API header and the server's.
void add_model_identity(nlohmann::json& j, const Model& m);
std::string fingerprint_hex(const Model& m);

nlohmann::json cache_meta(const Model& m, const PressOptions& po, const PromptOptions& pr, const CompressedContext& ctx);
// Validates the fields of a .kvc header (besides check_cache_header's layout fields):
// model_path / model_name / model_fingerprint / question_template strings, press a known press
// whose press_options (array of "key=value" strings) it accepts, keep a number in (0, 1], budget
// an integer 0..2^30, sinks / window integers -1..2^30, trigger "" or a valid trigger, seed a
// uint64, chat a boolean, context_tokens 0..n_past, context_ids null or that many token ids, full_slots from slots to
// n_layer * n_head_kv * n_past, full_bytes 0..2^50. Absent fields take their defaults. Every
// accessor below calls it, so no header field reaches the engine unchecked.
void check_cache_meta(const nlohmann::json& meta, const std::string& file);
// context_ids, when present and not null: an array of exactly context_tokens token ids, each in
// 0..2^31-1 (the vocabulary bound is checked by whoever has the tokenizer: inspect, the server).
void check_context_ids(const nlohmann::json& meta, int64_t context_tokens, const std::string& file);
// Throws naming the file and both fingerprints if `m` is not the model the cache was made with.
void check_cache_model(const nlohmann::json& meta, const Model& m, const std::string& file);
std::string meta_model_path(const nlohmann::json& meta, const std::string& file);
PressOptions press_options_from_meta(const nlohmann::json& meta);
PromptOptions prompt_options_from_meta(const nlohmann::json& meta);
// The press's per-sequence state as saved in the header, and back (checked: an object of arrays
// of finite numbers).

}  // namespace kvs
