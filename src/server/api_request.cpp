#include "server/api_request.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>

#include "core/error.h"
#include "press/params.h"
#include "press/registry.h"
#include "server/json_fields.h"
#include "server/sampling_fields.h"

namespace kvs::server {

namespace {

constexpr int64_t kMaxPositions = int64_t{1} << 30;

// A press option value as the "key=value" text the option parser takes.
std::string option_text(const JsonFields& f, const std::string& key, const nlohmann::json& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s.size() > 256) f.bad(key, "is too long (at most 256 bytes)");
    return s;
  }
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  if (v.is_number_integer()) return fmt::format("{}", v.get<int64_t>());
  if (v.is_number_unsigned()) return fmt::format("{}", v.get<uint64_t>());
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d)) f.bad(key, "must be finite");
    if (d == std::floor(d) && std::fabs(d) < 1e15) return fmt::format("{}", static_cast<int64_t>(d));
    return fmt::format("{}", d);
  }
  f.bad(key, fmt::format("must be a string, number or boolean, got {}", json_type_name(v)));
}

// A press option's JSON type must be its spec's: a number for an integer or number option, a
// boolean for a flag, a string for a name ("window_size": "32" is refused, not read as 32; the
// command line's key=value text has no types, JSON has). Unknown presses, allocators, presets and
// options are left to make_compression_spec, which names them.
void check_option_types(const JsonFields& opts, const std::string& press, const nlohmann::json& o,
                        const ParamMap& given) {
  std::vector<ParamSpec> specs;
  const PressInfo* info = nullptr;
  try {
    info = &press_info(press);
    specs = info->params;
    const ParamMap merged = with_preset(*info, given);
    const auto a = merged.find("allocator");
    specs = press_param_specs(*info, info->default_allocator.empty() ? ""
                                     : a != merged.end()            ? a->second
                                                                    : info->default_allocator);
  } catch (const Error&) {
    // The press's own options are still typed (an unknown allocator, or "quality" outside the
    // registry), and the allocator's name is a string.
    if (!info) return;
    if (!info->default_allocator.empty()) specs.push_back({"allocator", ParamSpec::Type::String, "", ""});
  }
  for (const auto& [k, v] : o.items()) {
    for (const ParamSpec& spec : specs) {
      if (spec.name != k) continue;
      using T = ParamSpec::Type;
      const bool ok = spec.type == T::Int || spec.type == T::Float ? v.is_number()
                      : spec.type == T::Bool                      ? v.is_boolean()
                                                                  : v.is_string();
      if (ok) break;
      const char* want = spec.type == T::Int     ? "must be a JSON number (an integer option)"
                         : spec.type == T::Float ? "must be a JSON number"
                         : spec.type == T::Bool  ? "must be a JSON boolean (true or false)"
                                                 : "must be a JSON string";
      opts.bad(k, fmt::format("{}, got {}{}", want, json_type_name(v),
                              v.is_string() ? fmt::format(" \"{}\"", v.get_ref<const std::string&>().substr(0, 64)) : ""));
    }
  }
}

std::vector<ChatMessage> parse_messages(const JsonFields& f, const nlohmann::json* v, const RequestLimits& lim) {
  if (!v) f.bad("messages", "is required");
  if (!v->is_array()) f.bad("messages", fmt::format("must be an array, got {}", json_type_name(*v)));
  if (v->empty()) f.bad("messages", "must hold at least one message");
  if (static_cast<int>(v->size()) > lim.max_messages) f.bad("messages", fmt::format("holds more than {} messages", lim.max_messages));
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string prefix = fmt::format("messages[{}].", i);
    JsonFields m((*v)[i], prefix);
    m.allow_only({"role", "content", "name"});
    const auto role = m.string("role", 32);
    if (!role) m.bad("role", "is required");
    std::string r = *role;
    if (r == "developer") r = "system";
    if (r != "system" && r != "user" && r != "assistant")
      m.bad("role", fmt::format("must be 'system', 'user' or 'assistant' (tool messages are not supported), got '{}'", r));
    m.string("name", 256);
    std::string content;
    const nlohmann::json* c = m.get("content");
    if (!c) m.bad("content", "is required");
    if (c->is_string()) {
      content = c->get<std::string>();
    } else if (c->is_array()) {
      // Content parts: only text parts.
      for (size_t k = 0; k < c->size(); ++k) {
        JsonFields part((*c)[k], fmt::format("{}content[{}].", prefix, k));
        part.allow_only({"type", "text"});
        const auto type = part.string("type", 32);
        if (type != "text") part.bad("type", "must be 'text' (only text content is supported)");
        const auto text = part.string("text", lim.max_body_bytes);
        if (!text) part.bad("text", "is required");
        content += *text;
      }
    } else {
      m.bad("content", fmt::format("must be a string or an array of text parts, got {}", json_type_name(*c)));
    }
    out.push_back({r, content});
  }
  return out;
}

std::vector<std::string> parse_stop(const JsonFields& f, const RequestLimits& lim) {
  const nlohmann::json* v = f.get("stop");
  std::vector<std::string> out;
  if (!v) return out;
  auto add = [&](const nlohmann::json& s) {
    if (!s.is_string()) f.bad("stop", fmt::format("must be a string or an array of strings, got {}", json_type_name(s)));
    const auto& str = s.get_ref<const std::string&>();
    if (str.empty()) f.bad("stop", "must not hold an empty string");
    if (str.size() > lim.max_stop_bytes) f.bad("stop", fmt::format("strings must be at most {} bytes", lim.max_stop_bytes));
    out.push_back(str);
  };
  if (v->is_array()) {
    if (static_cast<int>(v->size()) > lim.max_stop) f.bad("stop", fmt::format("holds more than {} strings", lim.max_stop));
    for (const auto& s : *v) add(s);
  } else {
    add(*v);
  }
  return out;
}

// Parameters OpenAI defines that this server supports at their default value only.
void refuse_unsupported(const JsonFields& f) {
  auto unsupported = [&](const char* key, const std::string& what) {
    throw bad_request(fmt::format("'{}' {} is not supported by this server", key, what), key, "unsupported_parameter");
  };
  if (auto s = f.string("suffix", 1 << 20); s && !s->empty()) unsupported("suffix", "");
  if (const nlohmann::json* rf = f.get("response_format")) {
    JsonFields r(*rf, "response_format.");
    if (r.string("type", 64).value_or("text") != "text") unsupported("response_format", "other than text");
  }
  if (const nlohmann::json* t = f.get("tools")) {
    if (!t->is_array()) f.bad("tools", "must be an array");
    if (!t->empty()) unsupported("tools", "");
  }
  if (const nlohmann::json* t = f.get("tool_choice")) {
    if (!(t->is_string() && t->get<std::string>() == "none")) unsupported("tool_choice", "other than 'none'");
  }
  // Current OpenAI fields: accepted (and ignored) when they cannot change the answer, refused
  // when they would. Null is always "not given".
  if (const nlohmann::json* m = f.get("modalities")) {
    if (!m->is_array()) f.bad("modalities", "must be an array of strings");
    for (const auto& x : *m) {
      if (!x.is_string()) f.bad("modalities", "must be an array of strings");
      if (x.get<std::string>() != "text") unsupported("modalities", "other than [\"text\"]");
    }
  }
  if (f.has("audio")) unsupported("audio", "(audio output)");
  if (f.has("web_search_options")) unsupported("web_search_options", "(web search)");
  if (const nlohmann::json* p = f.get("prediction")) {
    // Predicted outputs only speed generation up: the answer is the same.
    JsonFields pr(*p, "prediction.");
    pr.allow_only({"type", "content"});
    if (pr.string("type", 32).value_or("content") != "content") pr.bad("type", "must be 'content'");
  }
  if (auto e = f.string("reasoning_effort", 16)) {
    // These models do not reason before answering: any effort gives the same answer.
    if (*e != "none" && *e != "minimal" && *e != "low" && *e != "medium" && *e != "high")
      f.bad("reasoning_effort", "must be 'none', 'minimal', 'low', 'medium' or 'high'");
  }
  if (auto v = f.string("verbosity", 16); v && *v != "medium") unsupported("verbosity", "other than 'medium'");
  f.string("prompt_cache_key", 1024);
  f.string("safety_identifier", 1024);
  if (const nlohmann::json* fn = f.get("functions")) {
    if (!fn->is_array()) f.bad("functions", "must be an array");
    if (!fn->empty()) unsupported("functions", "");
  }
  if (const nlohmann::json* fc = f.get("function_call")) {
    if (!(fc->is_string() && fc->get<std::string>() == "none")) unsupported("function_call", "other than 'none'");
  }
}

void parse_common(const JsonFields& f, const RequestLimits& lim, GenerateRequest& r, int default_max_tokens) {
  r.model = f.string("model", 256).value_or("");
  refuse_unsupported(f);
  f.string("user", 1024);
  f.boolean("store");
  f.boolean("parallel_tool_calls");
  f.string("service_tier", 64);
  if (const nlohmann::json* m = f.get("metadata"); m && !m->is_object()) f.bad("metadata", "must be an object");
  r.n = static_cast<int>(f.integer("n", 1, lim.max_choices).value_or(1));
  // Log-probabilities: completions' `logprobs` is the number of most likely tokens (0 lists none
  // but still gives each token's own); chat's is a boolean, with `top_logprobs` the number.
  if (r.chat) {
    const bool on = f.boolean("logprobs").value_or(false);
    const auto top = f.integer("top_logprobs", 0, lim.max_logprobs);
    if (top && !on) f.bad("top_logprobs", "needs 'logprobs': true");
    if (on) r.logprobs = static_cast<int>(top.value_or(0));
  } else {
    if (const nlohmann::json* lp = f.get("logprobs")) {
      if (lp->is_boolean() && !lp->get<bool>()) {
        // false: none (as null)
      } else if (auto n = f.integer("logprobs", 0, lim.max_logprobs)) {
        r.logprobs = static_cast<int>(*n);
      }
    }
    r.echo = f.boolean("echo").value_or(false);
  }
  // max_tokens 0 asks for no answer: only meaningful when the prompt comes back (echo), the way
  // lm-eval's loglikelihood scores a prompt.
  const int64_t min_tokens = r.echo ? 0 : 1;
  std::optional<int64_t> mt = f.integer("max_tokens", min_tokens, lim.max_tokens);
  if (!mt) mt = f.integer("max_completion_tokens", min_tokens, lim.max_tokens);
  r.max_tokens = static_cast<int>(mt.value_or(std::min(default_max_tokens, lim.max_tokens)));
  parse_sampling(f, lim, r);
  r.stop = parse_stop(f, lim);
  r.ignore_eos = f.boolean("ignore_eos").value_or(false);
  r.stream = f.boolean("stream").value_or(false);
  if (const nlohmann::json* so = f.get("stream_options")) {
    JsonFields s(*so, "stream_options.");
    s.allow_only({"include_usage", "include_obfuscation"});
    r.include_usage = s.boolean("include_usage").value_or(false);
    s.boolean("include_obfuscation");
    if (!r.stream) f.bad("stream_options", "is only allowed with stream: true");
  }
  if (auto id = f.string("context_id", 256)) {
    if (!valid_context_id(*id)) f.bad("context_id", "must be a context id (letters, digits, '_' and '-', at most 64)");
    r.context_id = *id;
  }
  if (const nlohmann::json* c = f.get("kv_compression")) {
    if (r.context_id)
      f.bad("kv_compression", "cannot be combined with context_id: a context is compressed once, when it is created");
    r.compression = parse_compression(*c);
  }
}

}  // namespace

Compression parse_compression(const nlohmann::json& j, const std::string& param) {
  JsonFields f(j, param + ".");
  f.allow_only({"press", "keep", "budget", "quality", "sinks", "window", "trigger", "seed", "options"});
  Compression c;
  SpecArgs& a = c.args;
  const auto press = f.string("press", 64);
  if (!press) f.bad("press", "is required (see GET /v1/presses or `kvshrink presses`)");
  a.press = *press;
  c.echo["press"] = a.press;
  if (const nlohmann::json* k = f.get("keep")) {
    if (k->is_string()) {
      if (k->get<std::string>() != "auto") f.bad("keep", "must be a ratio in (0, 1] or 'auto'");
      c.echo["keep"] = "auto";
    } else {
      a.keep = f.number("keep", 0.0, 1.0, true);
      c.echo["keep"] = *a.keep;
    }
  }
  // A token budget is 1 or more tokens per KV head; 0 is no budget (the command line's default),
  // which a request says by leaving the field out.
  if (const nlohmann::json* b0 = f.get("budget"); b0 && b0->is_number() && b0->get<double>() == 0)
    f.bad("budget", fmt::format("must be an integer in [1, {}] (tokens kept per KV head), got 0: leave it out (or null) "
                                "for no token budget",
                                kMaxPositions));
  if (auto b = f.integer("budget", 1, kMaxPositions)) {
    a.budget = static_cast<int32_t>(*b);
    c.echo["budget"] = *b;
  }
  if (auto q = f.number("quality", 0.0, 1.0, true)) {
    a.quality = *q;
    c.echo["quality"] = *q;
  }
  if (auto s = f.integer("sinks", 0, kMaxPositions)) {
    a.sinks = static_cast<int>(*s);
    c.echo["sinks"] = *s;
  }
  if (auto w = f.integer("window", 0, kMaxPositions)) {
    a.window = static_cast<int>(*w);
    c.echo["window"] = *w;
  }
  if (auto t = f.string("trigger", 64)) {
    a.trigger = *t;
    c.echo["trigger"] = *t;
  }
  if (auto s = f.integer("seed", 0, INT64_MAX)) {
    a.seed = static_cast<uint64_t>(*s);
    c.echo["seed"] = *s;
  }
  if (const nlohmann::json* o = f.get("options")) {
    JsonFields opts(*o, param + ".options.");
    nlohmann::json echo = nlohmann::json::object();
    if (o->size() > 64) f.bad("options", "holds more than 64 options");
    for (const auto& [k, v] : o->items()) {
      if (k.empty() || k.size() > 64) f.bad("options", "keys must be 1..64 bytes");
      a.options[k] = option_text(opts, k, v);
      echo[k] = a.options[k];
    }
    c.echo["options"] = echo;
    check_option_types(opts, a.press, *o, a.options);
  }
  // The engine's messages quote these names in C strings: a control character (a NUL) would cut
  // the message; no valid name or value has one.
  auto plain = [&](const std::string& key, const std::string& v) {
    for (char ch : v)
      if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) f.bad(key, "must not contain control characters");
  };
  plain("press", a.press);
  plain("trigger", a.trigger);
  for (const auto& [k, v] : a.options) {
    plain("options", k);
    plain("options", v);
  }
  try {
    c.spec = make_compression_spec(a);
  } catch (const Error& e) {
    throw bad_request(fmt::format("'{}': {}", param, e.what()), param, "invalid_compression");
  }
  return c;
}

Compression no_compression() {
  Compression c;
  c.args.press = "full";
  c.args.keep = 1.0;
  c.spec = make_compression_spec(c.args);
  c.echo = {{"press", "full"}};
  return c;
}

nlohmann::json parse_body(const std::string& body, const RequestLimits& lim) {
  // Bounded while parsing: a body of 8 MiB of "[1,1,1,..." would otherwise become millions of
  // JSON values (tens of bytes each) before any field is checked.
  size_t values = 0;
  const size_t max_values = lim.max_json_values();
  const auto bound = [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json&) {
    if (depth > 64) throw bad_request("the request body is nested deeper than 64 levels", "", "invalid_json");
    if (ev == nlohmann::json::parse_event_t::value && ++values > max_values)
      throw bad_request(fmt::format("the request body holds more than {} JSON values", max_values), "", "invalid_json");
    return true;
  };
  nlohmann::json j = nlohmann::json::parse(body, bound, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw bad_request("the request body is not valid JSON", "", "invalid_json");
  if (!j.is_object()) throw bad_request(fmt::format("the request body must be a JSON object, got {}", json_type_name(j)));
  return j;
}

bool valid_context_id(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

namespace {

// A route's own fields and the sampling fields (sampling_fields.h), for JsonFields::allow_only.
std::vector<std::string_view> with_sampling_fields(std::initializer_list<std::string_view> own) {
  std::vector<std::string_view> all(own);
  const auto more = sampling_field_names();
  all.insert(all.end(), more.begin(), more.end());
  return all;
}

// One prompt of token ids (`what` names it in messages: "prompt" or "prompt[2]").
std::vector<int32_t> prompt_ids(const JsonFields& f, const nlohmann::json& a, const RequestLimits& lim,
                                const std::string& what) {
  if (a.empty()) f.bad("prompt", fmt::format("{}must not be empty", what == "prompt" ? "" : what + " "));
  if (a.size() > static_cast<size_t>(lim.max_prompt_tokens))
    throw bad_request(fmt::format("{} has {} tokens, more than this server's limit of {}",
                                  what == "prompt" ? "the prompt" : what, a.size(), lim.max_prompt_tokens),
                      "prompt", "context_length_exceeded");
  std::vector<int32_t> ids;
  ids.reserve(a.size());
  for (const auto& t : a) {
    if (!t.is_number_integer() && !t.is_number_unsigned())
      f.bad("prompt", fmt::format("token ids must be integers, got {} in {}", json_type_name(t), what));
    const int64_t id = t.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(t.get<uint64_t>(), INT64_MAX))
                                              : t.get<int64_t>();
    if (id < 0 || id >= lim.n_vocab)
      f.bad("prompt", fmt::format("token id {} is outside the vocabulary (0..{})", id, lim.n_vocab - 1));
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

}  // namespace

GenerateRequest parse_completion(const nlohmann::json& body, const RequestLimits& lim) {
  JsonFields f(body);
  f.allow_only(with_sampling_fields({"model", "prompt", "max_tokens", "n", "stream", "stream_options", "stop", "user",
                                     "logprobs", "echo", "suffix", "kv_compression", "context_id", "ignore_eos",
                                     "metadata", "store", "service_tier", "parallel_tool_calls", "prompt_cache_key",
                                     "safety_identifier"}));
  GenerateRequest r;
  parse_common(f, lim, r, lim.default_max_tokens_completion);
  const nlohmann::json* p = f.get("prompt");
  if (!p) f.bad("prompt", "is required");
  // A string, an array of token ids, or an array of prompts (strings or arrays of token ids).
  if (p->is_string()) {
    r.prompts.push_back({p->get<std::string>(), std::nullopt});
  } else if (p->is_array()) {
    if (p->empty()) f.bad("prompt", "must not be empty");
    const bool several = (*p)[0].is_string() || (*p)[0].is_array();
    if (!several) {
      r.prompts.push_back({"", prompt_ids(f, *p, lim, "prompt")});
    } else {
      if (static_cast<int64_t>(p->size()) * r.n > lim.max_choices)
        f.bad("prompt", fmt::format("holds {} prompts; with n = {} that is more than this server's {} choices per request",
                                    p->size(), r.n, lim.max_choices));
      for (size_t i = 0; i < p->size(); ++i) {
        const nlohmann::json& one = (*p)[i];
        if (one.is_string()) {
          r.prompts.push_back({one.get<std::string>(), std::nullopt});
        } else if (one.is_array()) {
          r.prompts.push_back({"", prompt_ids(f, one, lim, fmt::format("prompt[{}]", i))});
        } else {
          f.bad("prompt", fmt::format("must be a string, an array of token ids or an array of prompts (strings or "
                                      "arrays of token ids); prompt[{}] is {}",
                                      i, json_type_name(one)));
        }
      }
    }
  } else {
    f.bad("prompt", fmt::format("must be a string, an array of token ids or an array of prompts, got {}",
                                json_type_name(*p)));
  }
  if (static_cast<int64_t>(r.prompts.size()) * r.n > lim.max_choices)
    f.bad("n", fmt::format("{} prompts x n = {} is more than this server's {} choices per request", r.prompts.size(), r.n,
                           lim.max_choices));
  if (r.max_tokens == 0 && !r.echo) f.bad("max_tokens", "must be at least 1 (0 only with echo)");
  return r;
}

GenerateRequest parse_chat(const nlohmann::json& body, const RequestLimits& lim) {
  JsonFields f(body);
  f.allow_only(with_sampling_fields({"model", "messages", "max_tokens", "max_completion_tokens", "n", "stream",
                                     "stream_options", "stop", "user", "logprobs", "top_logprobs", "response_format",
                                     "tools", "tool_choice", "parallel_tool_calls", "store", "metadata", "service_tier",
                                     "kv_compression", "context_id", "ignore_eos", "modalities", "audio", "prediction",
                                     "reasoning_effort", "verbosity", "web_search_options", "prompt_cache_key",
                                     "safety_identifier", "functions", "function_call"}));
  GenerateRequest r;
  r.chat = true;
  parse_common(f, lim, r, lim.default_max_tokens_chat);
  r.messages = parse_messages(f, f.get("messages"), lim);
  return r;
}

ContextRequest parse_context(const nlohmann::json& body, const RequestLimits& lim) {
  JsonFields f(body);
  f.allow_only({"model", "text", "tokens", "messages", "kv_compression"});
  ContextRequest r;
  r.model = f.string("model", 256).value_or("");
  r.text = f.string("text", lim.max_body_bytes);
  if (const nlohmann::json* t = f.get("tokens")) {
    if (!t->is_array()) f.bad("tokens", fmt::format("must be an array of token ids, got {}", json_type_name(*t)));
    if (t->size() > static_cast<size_t>(lim.max_prompt_tokens))
      throw bad_request(fmt::format("the context has {} tokens, more than this server's limit of {}", t->size(),
                                    lim.max_prompt_tokens),
                        "tokens", "context_length_exceeded");
    std::vector<int32_t> ids;
    for (const auto& x : *t) {
      if (!x.is_number_integer() && !x.is_number_unsigned()) f.bad("tokens", "must hold integers");
      const int64_t id = x.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(x.get<uint64_t>(), INT64_MAX))
                                                : x.get<int64_t>();
      if (id < 0 || id >= lim.n_vocab)
        f.bad("tokens", fmt::format("token id {} is outside the vocabulary (0..{})", id, lim.n_vocab - 1));
      ids.push_back(static_cast<int32_t>(id));
    }
    r.tokens = std::move(ids);
  }
  if (f.has("messages")) r.messages = parse_messages(f, f.get("messages"), lim);
  if (int(r.text.has_value()) + int(r.tokens.has_value()) + int(!r.messages.empty()) > 1)
    f.bad("text", "'tokens' and 'messages' are exclusive: give one");
  if (!r.text && !r.tokens && r.messages.empty()) f.bad("text", "'tokens' or 'messages' is required");
  if (r.text && r.text->empty()) f.bad("text", "must not be empty");
  if (const nlohmann::json* c = f.get("kv_compression")) r.compression = parse_compression(*c);
  return r;
}

}  // namespace kvs::server
