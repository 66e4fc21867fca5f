// Continuous batching, one step at a time: every sequence in flight is a Stepper (a context
// being prefilled and compressed, or an answer being generated); batch_step() runs the next token
// of every decoding sequence and chunks of the prompts being prefilled in ONE Engine::forward_batch
// call, so the weights are read once per step for all of them. Sequences join and leave between
// steps; a long prompt advances by at most `prefill_rows` tokens per step, so it never stalls the
// decoding sequences for longer than that.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace kvs {

class Stepper {
 public:
  enum class Phase { Prefill, Decode, Done };
  virtual ~Stepper() = default;
  virtual Phase phase() const = 0;
  // Prefill phase: tokens still to feed.
  virtual int64_t prefill_left() const = 0;
  // True when the next step must run alone, outside forward_batch (a context whose press needs a
  // whole prefill in one call; see ContextBuilder::whole()).
  virtual bool runs_alone() const { return false; }
  virtual void run_alone() {}
  // The rows this sequence feeds in the next step: a chunk of at most max_rows prompt tokens
  // (Prefill), or its last sampled token (Decode). The spans stay valid until after_step().
  virtual Engine::BatchItem next_item(int max_rows) = 0;
  // Called after the forward pass that fed next_item(), with that item's logits (empty when the
  // item did not ask for them; they live in the engine and are gone after the call).
  virtual void after_step(std::span<const float> logits) = 0;
  // Before after_step, with the same logits: the part of after_step that only reads the logits
  // and this stepper's own state (sampling the next token), so that batch_step can run it for all
  // the sequences of a step in parallel (16 samplers over 49,152 logits each were ~0.2 ms of a
  // step on one thread). May run on any thread, concurrently with other steppers' presample; must
  // not throw (a failure leaves the work to after_step). Default: nothing.
  virtual void presample(std::span<const float> logits) noexcept { (void)logits; }
};

struct StepFailure {
  Stepper* who = nullptr;
  std::string message;
  bool out_of_memory = false;  // the KV pool's cap refused the step (the sequence is unchanged)
};

struct StepStats {
  int sequences = 0;     // steppers advanced (forward_batch items + lone steps)
  int decode_rows = 0;   // decode tokens fed
  int prefill_rows = 0;  // prompt tokens fed
  int alone = 0;         // steppers that ran alone (whole prefills)
  double seconds = 0;
};

// Advances the steppers that are not Done, in order: each decoding one by one token; the prefilling
// ones by chunks taken from a budget of `prefill_rows` tokens per step (first come, first served);
// at most one stepper that runs_alone(). Never throws for a stepper's failure: when the batch
// cannot be planned (the pool's cap) each item is retried alone, and whatever still fails — in
// the forward pass or in after_step (a compression the pool cannot hold) — is listed in `failed`
// and left for the caller to drop; the others advance normally.
StepStats batch_step(Engine& engine, std::span<Stepper* const> steppers, int prefill_rows,
                     std::vector<StepFailure>& failed);

}  // namespace kvs
