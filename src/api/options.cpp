// Conversions between the public option structs and the engine's / the CLI's forms; the list of
// presses; the version.
#include <fmt/format.h>

#include "core/error.h"
#include "impl.h"
#include "press/registry.h"

namespace kvshrink::detail {

kvs::PressOptions press_options(const CompressOptions& o) {
  kvs::PressOptions p;
  p.press = o.press;
  if (o.keep) {
    if (!(*o.keep > 0.0 && *o.keep <= 1.0)) kvs::fail("keep must be a ratio in (0, 1], got {}", *o.keep);
    p.keep = fmt::format("{}", *o.keep);  // shortest form that reads back to the same double
  }
  if (o.quality) {
    if (!(*o.quality > 0.0 && *o.quality <= 1.0)) kvs::fail("quality must be in (0, 1], got {}", *o.quality);
    p.quality = *o.quality;
  }
  if (o.budget < 0 || o.budget > (1 << 30)) kvs::fail("budget must be in 0..{} tokens per head, got {}", 1 << 30, o.budget);
  p.budget = o.budget;
  p.sinks = o.sinks;
  p.window = o.window;
  for (const auto& [k, v] : o.options) {
    if (k.empty() || k.find('=') != std::string::npos) kvs::fail("press option name '{}' must be non-empty without '='", k);
    p.opts.push_back(k + "=" + v);
  }
  p.trigger = o.trigger;
  p.seed = o.seed;
  return p;
}

kvs::PromptOptions prompt_options(const CompressOptions& o) {
  if (!o.question_template.empty() && o.question_template.find("{question}") == std::string::npos)
    kvs::fail("question_template must contain {{question}}, got '{}'", o.question_template);
  kvs::PromptOptions p;
  p.chat = o.chat;
  p.question_template = o.question_template;
  return p;
}

CompressOptions compress_options(const kvs::PressOptions& p, const kvs::PromptOptions& pr) {
  CompressOptions o;
  o.press = p.press;
  o.keep = p.keep_ratio();
  if (p.quality > 0) o.quality = p.quality;
  o.budget = p.budget;
  o.sinks = p.sinks;
  o.window = p.window;
  for (const auto& kv : p.opts) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) kvs::fail("press option '{}' is not key=value", kv);
    o.options[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  o.trigger = p.trigger;
  o.seed = p.seed;
  o.chat = pr.chat;
  o.question_template = pr.question_template;
  return o;
}

kvs::AnswerOptions answer_options(const SamplingOptions& s) {
  if (s.max_new_tokens < 0 || s.max_new_tokens > (1 << 24))
    kvs::fail("max_new_tokens must be in 0..{}, got {}", 1 << 24, s.max_new_tokens);
  if (!(s.temperature >= 0 && s.temperature <= 100)) kvs::fail("temperature must be in [0, 100], got {}", s.temperature);
  if (s.top_k < 0) kvs::fail("top_k must be >= 0 (0 = off), got {}", s.top_k);
  if (!(s.top_p > 0 && s.top_p <= 1)) kvs::fail("top_p must be in (0, 1], got {}", s.top_p);
  if (!(s.min_p >= 0 && s.min_p < 1)) kvs::fail("min_p must be in [0, 1), got {}", s.min_p);
  kvs::AnswerOptions a;
  a.max_new_tokens = s.max_new_tokens;
  a.sampler.temp = s.temperature;
  a.sampler.top_k = s.top_k;
  a.sampler.top_p = s.top_p;
  a.sampler.min_p = s.min_p;
  a.sampler.seed = s.seed;
  a.stop = s.stop;
  a.stop_at_eog = s.stop_at_eog;
  return a;
}

Answer to_answer(const kvs::Answer& a) {
  Answer r;
  r.text = a.text;
  r.tokens = a.tokens;
  r.prefill_seconds = a.prefill_seconds;
  r.decode_seconds = a.decode_seconds;
  r.compress_seconds = a.compress_seconds;
  r.kv_bytes_peak = a.kv_bytes_peak;
  return r;
}

}  // namespace kvshrink::detail

namespace kvshrink {
namespace {
std::vector<PressParam> params_of(const std::vector<kvs::ParamSpec>& ps) {
  std::vector<PressParam> out;
  for (const auto& s : ps) out.push_back({s.name, s.default_value, s.doc});
  return out;
}
}  // namespace

std::vector<PressDescription> presses() {
  return detail::guarded([] {
    std::vector<PressDescription> out;
    for (const kvs::PressInfo& p : kvs::press_registry()) {
      PressDescription d;
      d.name = p.name;
      d.description = p.description;
      d.paper = p.paper;
      d.default_sinks = p.default_sinks;
      d.default_window = p.default_window;
      d.default_trigger = p.default_trigger.describe();
      d.default_allocator = p.default_allocator;
      d.params = params_of(p.params);
      out.push_back(std::move(d));
    }
    return out;
  });
}

std::vector<AllocatorDescription> allocators() {
  return detail::guarded([] {
    std::vector<AllocatorDescription> out;
    for (const kvs::AllocatorInfo& a : kvs::allocator_registry()) out.push_back({a.name, a.description, params_of(a.params)});
    return out;
  });
}

std::string version() { return KVSHRINK_VERSION_STRING; }

}  // namespace kvshrink
