#include "server/sampling_fields.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>

namespace kvs::server {

namespace {

constexpr std::string_view kNames[] = {
    // OpenAI's
    "temperature", "top_p", "seed", "presence_penalty", "frequency_penalty", "logit_bias",
    // extensions this server implements
    "top_k", "min_p", "repetition_penalty",
    // other servers' fields, accepted at their neutral value (vLLM's sampling parameters)
    "best_of", "use_beam_search", "length_penalty", "early_stopping", "typical_p", "min_tokens", "stop_token_ids",
    "skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output", "truncate_prompt_tokens",
    "prompt_logprobs", "return_tokens_as_token_ids", "priority",
    // llama.cpp's
    "cache_prompt", "n_probs", "repeat_penalty", "repeat_last_n", "penalize_nl", "tfs_z", "mirostat", "mirostat_tau",
    "mirostat_eta", "dry_multiplier", "xtc_probability", "id_slot", "top_a", "return_tokens", "n_keep"};

[[noreturn]] void unsupported(const std::string& key, const std::string& what) {
  throw bad_request(fmt::format("'{}' {} is not supported by this server", key, what), key, "unsupported_parameter");
}

// A field accepted only when it equals its neutral value (a number; null is absent).
void neutral_number(const JsonFields& f, const char* key, double neutral) {
  if (auto v = f.number(key, -1e9, 1e9); v && *v != neutral) unsupported(key, fmt::format("other than {}", neutral));
}
void neutral_bool(const JsonFields& f, const char* key, bool neutral) {
  if (auto v = f.boolean(key); v && *v != neutral) unsupported(key, fmt::format("{}", *v));
}

}  // namespace

std::span<const std::string_view> sampling_field_names() { return kNames; }

void parse_sampling(const JsonFields& f, const RequestLimits& lim, GenerateRequest& r) {
  SamplerParams& s = r.sampler;
  // OpenAI's defaults: temperature 1, top_p 1 (no filter); top_k and min_p are extensions (off;
  // vLLM's -1 is off too).
  s.temp = static_cast<float>(f.number("temperature", 0.0, 2.0).value_or(1.0));
  s.top_p = static_cast<float>(f.number("top_p", 0.0, 1.0, true).value_or(1.0));
  const int64_t top_k = f.integer("top_k", -1, std::max(lim.n_vocab, 1)).value_or(0);
  s.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  s.min_p = static_cast<float>(f.number("min_p", 0.0, 1.0).value_or(0.0));
  if (s.min_p >= 1.0f) f.bad("min_p", "must be below 1");
  if (auto v = f.integer("seed", INT64_MIN, INT64_MAX)) {
    s.seed = static_cast<uint64_t>(*v);
    r.seeded = true;
  }
  s.presence_penalty = static_cast<float>(f.number("presence_penalty", -2.0, 2.0).value_or(0.0));
  s.frequency_penalty = static_cast<float>(f.number("frequency_penalty", -2.0, 2.0).value_or(0.0));
  // vLLM's repetition_penalty and llama.cpp's repeat_penalty are the same (CTRL's) penalty.
  std::optional<double> rep = f.number("repetition_penalty", 0.0, 10.0, true);
  if (const auto rp = f.number("repeat_penalty", 0.0, 10.0, true)) {
    if (rep && *rep != *rp) f.bad("repeat_penalty", "differs from 'repetition_penalty' (give one)");
    rep = rp;
  }
  s.repetition_penalty = static_cast<float>(rep.value_or(1.0));
  if (const nlohmann::json* lb = f.get("logit_bias")) {
    if (!lb->is_object()) f.bad("logit_bias", "must be an object mapping token ids (as strings) to biases");
    if (static_cast<int>(lb->size()) > lim.max_logit_bias)
      f.bad("logit_bias", fmt::format("holds more than {} entries", lim.max_logit_bias));
    JsonFields b(*lb, "logit_bias.");
    int banned = 0;
    for (const auto& [k, v] : lb->items()) {
      char* end = nullptr;
      errno = 0;
      const long long id = std::strtoll(k.c_str(), &end, 10);
      if (k.empty() || *end || errno || id < 0 || id >= lim.n_vocab)
        b.bad(k.substr(0, 32), fmt::format("is not a token id of this model (0..{})", lim.n_vocab - 1));
      const auto bias = b.number(k, -100.0, 100.0);
      if (!bias) continue;  // null: no bias
      banned += *bias <= kBanBias;
      s.logit_bias.emplace_back(static_cast<int32_t>(id), static_cast<float>(*bias));
    }
    if (banned >= lim.n_vocab) f.bad("logit_bias", "bans every token of the vocabulary");
  }

  // Neutral values only. best_of: the answer is the n samples themselves.
  if (auto b = f.integer("best_of", 1, lim.max_choices); b && *b != 1 && *b != r.n)
    unsupported("best_of", fmt::format("other than n ({})", r.n));
  neutral_bool(f, "use_beam_search", false);
  neutral_number(f, "length_penalty", 1);
  neutral_bool(f, "early_stopping", false);
  neutral_number(f, "typical_p", 1);
  neutral_number(f, "min_tokens", 0);
  if (const nlohmann::json* st = f.get("stop_token_ids")) {
    if (!st->is_array()) f.bad("stop_token_ids", "must be an array");
    if (!st->empty()) unsupported("stop_token_ids", "(non-empty)");
  }
  neutral_bool(f, "skip_special_tokens", true);
  neutral_bool(f, "spaces_between_special_tokens", true);
  neutral_bool(f, "include_stop_str_in_output", false);
  if (f.has("truncate_prompt_tokens")) unsupported("truncate_prompt_tokens", "(other than null)");
  if (f.has("prompt_logprobs")) unsupported("prompt_logprobs", "(use echo with logprobs)");
  neutral_bool(f, "return_tokens_as_token_ids", false);
  neutral_number(f, "priority", 0);
  // llama.cpp's: the prompt cache is a speed-up (prefix reuse is not implemented: accepted and
  // ignored either way); a slot id only picks where the same answer is computed.
  f.boolean("cache_prompt");
  neutral_number(f, "n_probs", 0);
  f.integer("repeat_last_n", -1, int64_t{1} << 30);
  neutral_bool(f, "penalize_nl", false);
  neutral_number(f, "tfs_z", 1);
  neutral_number(f, "mirostat", 0);
  f.number("mirostat_tau", -1e9, 1e9);
  f.number("mirostat_eta", -1e9, 1e9);
  neutral_number(f, "dry_multiplier", 0);
  neutral_number(f, "xtc_probability", 0);
  f.integer("id_slot", -1, int64_t{1} << 30);
  neutral_number(f, "top_a", 0);
  neutral_bool(f, "return_tokens", false);
  neutral_number(f, "n_keep", 0);
}

}  // namespace kvs::server
