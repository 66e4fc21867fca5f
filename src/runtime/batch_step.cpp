#include "runtime/batch_step.h"

#include <algorithm>
#include <exception>

#include "core/error.h"
#include "core/memory_cap.h"
#include "core/timer.h"

namespace kvs {

namespace {

// Runs `fn`, turning an exception into a failure of `who`.
template <typename Fn>
bool guarded(Stepper* who, std::vector<StepFailure>& failed, Fn&& fn) {
  try {
    fn();
    return true;
  } catch (const MemoryCapError& e) {
    failed.push_back({who, e.what(), true});
  } catch (const std::exception& e) {
    failed.push_back({who, e.what(), false});
  } catch (...) {
    failed.push_back({who, "unknown error", false});
  }
  return false;
}

}  // namespace

StepStats batch_step(Engine& engine, std::span<Stepper* const> steppers, int prefill_rows,
                     std::vector<StepFailure>& failed) {
  Timer t;
  StepStats st;
  // A whole prefill runs first, alone (it holds the engine for its whole duration).
  for (Stepper* s : steppers) {
    if (s->phase() == Stepper::Phase::Prefill && s->runs_alone()) {
      if (guarded(s, failed, [&] { s->run_alone(); })) ++st.alone;
      ++st.sequences;
      break;
    }
  }
  std::vector<Stepper*> who;
  std::vector<Engine::BatchItem> items;
  int budget = std::max(prefill_rows, 1);
  for (Stepper* s : steppers) {
    if (s->runs_alone()) continue;
    if (s->phase() == Stepper::Phase::Decode) {
      items.push_back(s->next_item(1));
      who.push_back(s);
      ++st.decode_rows;
    } else if (s->phase() == Stepper::Phase::Prefill && budget > 0) {
      const int n = static_cast<int>(std::min<int64_t>(budget, s->prefill_left()));
      if (n <= 0) continue;
      items.push_back(s->next_item(n));
      who.push_back(s);
      budget -= static_cast<int>(items.back().tokens.size());
      st.prefill_rows += static_cast<int>(items.back().tokens.size());
    }
  }
  if (items.empty()) {
    st.seconds = t.seconds();
    return st;
  }
  // The logits stay in the engine (forward_batch_spans) until every stepper has used them.
  std::vector<std::span<const float>> logits;
  bool batched = true;
  try {
    logits = engine.forward_batch_spans(items);
  } catch (const std::exception&) {
    batched = false;  // nothing changed: run each item alone to find which one cannot proceed
    logits.assign(items.size(), {});
  }
  // The samplers of every sequence at once (Stepper::presample), before the after_steps, which
  // run one after another (they may compress, which uses the pool itself).
  if (batched && items.size() > 1)
    engine.pool().parallel_for(static_cast<int64_t>(items.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) who[static_cast<size_t>(i)]->presample(logits[static_cast<size_t>(i)]);
    });
  for (size_t i = 0; i < items.size(); ++i) {
    Stepper* s = who[i];
    std::vector<float> alone;
    if (!batched) {
      const bool ok = guarded(s, failed, [&] {
        std::vector<std::vector<float>> one = engine.forward_batch(std::span<const Engine::BatchItem>(&items[i], 1));
        alone = std::move(one[0]);
      });
      if (!ok) continue;
      logits[i] = alone;
    }
    guarded(s, failed, [&] { s->after_step(logits[i]); });
    ++st.sequences;
  }
  engine.trim_batch_logits();
  st.seconds = t.seconds();
  return st;
}

}  // namespace kvs
