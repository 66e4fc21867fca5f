#include "runtime/compression_spec.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "press/budget/calibrated.h"

namespace kvs {

CompressionSpec make_compression_spec(const SpecArgs& a) {
  const PressInfo& info = press_info(a.press);
  CompressionSpec s;
  // A quality target (--quality, or allocator=quality) wraps the press's allocator in the calibrated
  // one (press/budget/calibrated.h), which picks the keep ratio from the model's fit.
  s.press = wants_quality(a.options, a.quality) ? make_calibrated_press(a.press, a.options, a.quality)
                                                 : make_press(a.press, a.options);
  if (a.budget < 0) fail("token budget must be >= 0, got {}", a.budget);
  if (a.sinks < -1 || a.sinks > (1 << 30)) fail("sinks must be >= 0, got {}", a.sinks);
  if (a.window < -1 || a.window > (1 << 30)) fail("window must be >= 0, got {}", a.window);
  s.request.keep = a.keep;
  s.request.max_tokens = a.budget;
  s.request.quality = a.quality;
  s.request.sinks = a.sinks >= 0 ? a.sinks : default_sinks(info, a.options);
  s.request.window = a.window >= 0 ? a.window : default_window(info, a.options);
  s.request.seed = a.seed;
  s.sinks_given = a.sinks >= 0;
  s.window_given = a.window >= 0;
  s.trigger = a.trigger.empty() ? s.press.trigger : parse_trigger(a.trigger);
  check_request(s.press, s.request);
  if (s.press.adaptive() && s.trigger.kind != Trigger::Kind::OnPrefill)
    fail("press '{}' chooses its own keep ratio once after prefill; it cannot run {}", s.press.name, s.trigger.describe());
  return s;
}

void check_protection_fits(const CompressionSpec& s, int64_t n) {
  const CompressRequest& r = s.request;
  if ((!s.sinks_given && !s.window_given) || n <= 0 || s.press.is_full() || s.press.adaptive() ||
      r.keeps_everything() || !r.has_budget())
    return;
  const int64_t sinks = s.sinks_given ? std::min<int64_t>(r.sinks, n) : 0;
  const int64_t window = s.window_given ? std::min<int64_t>(r.window, n) : 0;
  const int64_t prot = std::min<int64_t>(sinks + window, n);
  const int64_t keep = r.max_tokens > 0 ? r.max_tokens : std::llround(*r.keep * static_cast<double>(n));
  if (prot <= keep) return;
  std::string given;
  if (s.sinks_given) given = fmt::format("sinks {}", r.sinks);
  if (s.window_given) given += fmt::format("{}window {}", given.empty() ? "" : " and ", r.window);
  fail("{} protect{} {} of the context's {} tokens, more than the {} tokens per KV head {} keeps: lower {} (every "
       "protected token is kept, so the press would keep {})",
       given, s.sinks_given && s.window_given ? "" : "s", prot, n, keep,
       r.max_tokens > 0 ? fmt::format("the budget of {}", r.max_tokens) : fmt::format("the keep ratio {}", *r.keep),
       s.sinks_given && s.window_given ? "sinks or window" : s.sinks_given ? "sinks" : "window",
       prot == n ? "everything" : "more than asked");
}

}  // namespace kvs
