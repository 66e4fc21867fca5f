#include "runtime/compression_spec.h"

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
  s.trigger = a.trigger.empty() ? s.press.trigger : parse_trigger(a.trigger);
  check_request(s.press, s.request);
  if (s.press.adaptive() && s.trigger.kind != Trigger::Kind::OnPrefill)
    fail("press '{}' chooses its own keep ratio once after prefill; it cannot run {}", s.press.name, s.trigger.describe());
  return s;
}

}  // namespace kvs
