#include "runtime/kvc_meta.h"

#include <fmt/format.h>

#include <climits>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "kvcache/cache_file.h"
#include "kvcache/header_fields.h"
#include "press/methods/kvzip.h"
#include "press/registry.h"

namespace kvs {

std::string fingerprint_hex(const Model& m) { return fmt::format("{:016x}", m.fingerprint); }

void add_model_identity(nlohmann::json& j, const Model& m) {
  std::error_code ec;
  const auto abs = std::filesystem::absolute(m.path, ec);
  j["model_path"] = ec ? m.path : abs.string();
  j["model_name"] = m.name;
  j["model_fingerprint"] = fingerprint_hex(m);
}

nlohmann::json cache_meta(const Model& m, const PressOptions& po, const PromptOptions& pr, const CompressedContext& ctx) {
  nlohmann::json j;
  add_model_identity(j, m);
  j["press"] = po.press;
  j["press_options"] = po.opts;
  const auto keep = po.keep_ratio();
  j["keep"] = keep ? nlohmann::json(*keep) : nlohmann::json(nullptr);  // null: the press chose
  if (po.quality > 0) j["quality"] = po.quality;
  j["keep_measured"] = ctx.keep_measured();
  j["keep_chosen"] = ctx.keep_chosen() ? nlohmann::json(*ctx.keep_chosen()) : nlohmann::json(nullptr);
  j["press_state"] = press_state_to_json(ctx.press_state());
  // The scoring pass's precision as resolved on the machine that compressed (KVzip's
  // precision=auto depends on the CPU): absent for a press without a choice.
  if (const auto* kz = dynamic_cast<const KvzipScorer*>(ctx.spec().press.scorer.get()))
    j["score_precision"] = kz->score_precision();
  j["budget"] = po.budget;
  j["sinks"] = po.sinks;
  j["window"] = po.window;
  j["trigger"] = po.trigger;
  j["seed"] = po.seed;
  j["chat"] = pr.chat;
  j["question_template"] = pr.question_template;
  j["context_tokens"] = ctx.context_tokens();
  // The token ids themselves, so that `kvshrink inspect` can show the text without --context
  // (a cache adopted from a file has none: null).
  const auto& ids = ctx.context_ids();
  j["context_ids"] = ids.size() == static_cast<size_t>(ctx.context_tokens()) && !ids.empty() ? nlohmann::json(ids)
                                                                                               : nlohmann::json(nullptr);
  j["full_bytes"] = ctx.full_bytes();
  j["full_slots"] = ctx.full_slots();
  return j;
}

void check_context_ids(const nlohmann::json& meta, int64_t context_tokens, const std::string& file) {
  if (!meta.contains("context_ids") || meta.at("context_ids").is_null()) return;
  const auto& a = meta.at("context_ids");
  if (!a.is_array()) fail("{}: header field 'context_ids' must be an array of token ids or null", file);
  if (static_cast<int64_t>(a.size()) != context_tokens)
    fail("{}: header field 'context_ids' holds {} ids, but 'context_tokens' is {}", file, a.size(), context_tokens);
  for (const auto& x : a)
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
      fail("{}: header field 'context_ids' holds {}, not a token id", file, x.dump());
}

void check_cache_meta(const nlohmann::json& meta, const std::string& file) {
  const CacheHeaderLayout h = check_cache_header(meta, file);
  const HeaderFields f(meta, file);
  for (const char* k : {"model_path", "model_name", "model_fingerprint", "question_template"}) f.string_or(k, "");
  const std::string press = f.string_or("press", "full");
  const std::vector<std::string> opts = f.strings_or("press_options");
  f.number_or_null("keep", 0.0, 1.0);  // null: an adaptive press chose its own
  if (f.has("keep") && !f.is_null("keep")) f.number_or("keep", 0.0, 1.0, true, 1.0);
  f.number_or("quality", 0.0, 1.0, false, 0.0);
  f.number_or_null("keep_measured", 0.0, 1.0);
  f.number_or_null("keep_chosen", 0.0, 1.0);
  f.object_if_present("press_state");
  press_state_from_meta(meta, file);  // an object of arrays of finite numbers
  f.integer_or("budget", 0, kMaxCachePositions, 0);
  f.integer_or("sinks", -1, kMaxCachePositions, -1);
  f.integer_or("window", -1, kMaxCachePositions, -1);
  const std::string trigger = f.string_or("trigger", "");
  f.uint64_or("seed", 0);
  f.boolean_or("chat", false);
  if (const std::string sp = f.string_or("score_precision", "f32"); sp != "f32" && sp != "bf16")
    f.bad("score_precision", fmt::format("must be \"f32\" or \"bf16\", got \"{}\"", sp));
  // What the context was before compression: at most n_past tokens, at least the slots kept and
  // at most every head holding every position.
  check_context_ids(meta, f.integer_or("context_tokens", 0, h.n_past, 0), file);
  const int64_t all_slots = int64_t{h.n_layer} * h.n_head_kv * h.n_past;
  if (f.has("full_slots")) f.integer("full_slots", static_cast<int64_t>(h.slots), all_slots);
  f.integer_or("full_bytes", 0, int64_t{1} << 50, 0);
  // The press, its options and trigger must be ones this build accepts (the same checks as the
  // command line's), so a crafted header cannot smuggle in a value the options parser refuses.
  try {
    make_press(press, parse_params(opts));
    if (!trigger.empty()) parse_trigger(trigger);
  } catch (const Error& e) {
    fail("{}: header fields 'press', 'press_options' or 'trigger': {}", file, e.what());
  }
}

void check_cache_model(const nlohmann::json& meta, const Model& m, const std::string& file) {
  check_cache_meta(meta, file);
  const std::string want = meta.value("model_fingerprint", std::string());
  const std::string have = fingerprint_hex(m);
  if (want != have)
    fail("{}: this compressed context was made with model '{}' (fingerprint {}), not '{}' ({})", file,
         meta.value("model_name", std::string("?")), want.empty() ? "missing" : want, m.name, have);
}

std::string meta_model_path(const nlohmann::json& meta, const std::string& file) {
  check_cache_meta(meta, file);
  const std::string p = meta.value("model_path", std::string());
  if (p.empty()) fail("{}: the file does not name its model; pass -m MODEL", file);
  return p;
}

PressOptions press_options_from_meta(const nlohmann::json& meta) {
  check_cache_meta(meta, "compressed-context file");
  PressOptions po;
  try {
    po.press = meta.value("press", std::string("full"));
    po.opts = meta.value("press_options", std::vector<std::string>{});
    // Version 1 files have no null keep: a missing keep was the old default, 1.
    const auto& k = meta.contains("keep") ? meta.at("keep") : nlohmann::json(1.0);
    po.keep = k.is_null() ? std::string() : fmt::format("{}", k.get<double>());
    po.quality = meta.value("quality", 0.0);
    po.budget = meta.value("budget", 0);
    po.sinks = meta.value("sinks", -1);
    po.window = meta.value("window", -1);
    po.trigger = meta.value("trigger", std::string());
    po.seed = meta.value("seed", uint64_t{0});
  } catch (const nlohmann::json::exception& e) {
    fail("compressed-context header has a malformed press field: {}", e.what());
  }
  return po;
}

PromptOptions prompt_options_from_meta(const nlohmann::json& meta) {
  check_cache_meta(meta, "compressed-context file");
  PromptOptions pr;
  try {
    pr.chat = meta.value("chat", false);
    pr.question_template = meta.value("question_template", std::string());
  } catch (const nlohmann::json::exception& e) {
    fail("compressed-context header has a malformed prompt field: {}", e.what());
  }
  return pr;
}

}  // namespace kvs
