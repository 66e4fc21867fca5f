// KVzip (Kim et al. 2025, "KVzip: Query-Agnostic KV Cache Compression with Context
// Reconstruction", ../shared/papers/kvzip.txt §3) as press parts.
//
// Score of a KV pair (Eq. 2): the MAXIMUM attention it receives, over the query heads of its KV
// group and over every query position, while the model is teacher-forced on a repeat prompt
// followed by the context itself, with the prefilled cache as prefix:
//     S_{l,h}[j] = max_{g, i} softmax(Q_{l,h}[g, i] K^T / sqrt(d))[j]      (softmax first, max after)
// Chunked scoring (§3.4, "Chunked Scoring"): the context is cut into chunks of m tokens (default
// 2,048); chunk 1 is repeated after "\n\nRepeat the previous context exactly.", chunk i >= 2 after
// "\n\nRepeat the part of the previous context exactly, starting with " + the last 8 tokens of
// chunk i - 1 (+ the chat template's assistant header when the model has one). Each chunk runs
// as one probe forward after the prefilled cache (model_probe.h: a copy-on-write fork dropped
// afterwards, so the probe's K/V never reach the cache and the extra memory is one chunk's K/V).
//
// Choices where the paper is open (official code checked: snu-mllab/KVzip attention/score.py
// `_get_score`, model/wrapper.py `self_task` / `scoring`; NVIDIA/kvpress kvzip_press.py):
//  - The softmax of chunk i is taken over the keys the official code subsamples — the sinks
//    (their "system prompt"), the cache slots of chunk i and the repeat input's own keys (causal)
//    — i.e. the paper's n_in x (m + n_in) matrix (Fig. 5), not over the whole cache (that is what
//    both official implementations compute; the forward itself still attends to the whole cache,
//    so the hidden states are the full model's). `softmax=cache` normalises over everything the
//    query sees instead (the forward's own log-sum-exp), for comparison.
//  - Sinks: the first `sinks` positions (default 4, kvpress's n_sink) play the official code's
//    system prompt: never evicted (protected, score +inf), included in every chunk's softmax, and
//    not repeated — the repeated text is the context from position `sinks` on. A context that
//    starts with the chat template's head (`--chat`) protects that whole head instead when it is
//    longer (the official code's system prompt is the template's prefix: kvzip_protected_prefix).
//  - Prompts: the official wording (KVzip's code; "starting with " keeps its trailing space, as
//    the testbed models were trained with it); tokens are concatenated at token level (prompt
//    continuation ids, then the context's own ids), as the paper does. Without a chat template
//    nothing follows the prompt (KVzip's code appends "\n\nAnswer: " for unknown models, kvpress
//    "\n"; the testbed was trained with the bare prompt). With one (`chat=auto`), the template's
//    assistant header follows, as both codes do.
//  - Scale 1/sqrt(d) as the forward (the code's matmul / sqrt(head_dim)).
//  - Scoring only the original slots; slots of the cache outside every chunk (none after a plain
//    prefill) keep score 0.
//
// Head level (§3 and the official `load_head_score`): a head's score is the maximum of its pair
// scores; `kvshrink calibrate --press kvzip` computes them once per model on calibration text
// (max over samples, as the official code takes the max over its score files) and
// `kvzip:level=head` broadcasts them to every slot, so the `global` allocator keeps whole heads in
// score order (the head on the boundary keeps its most recent tokens) and every other head only
// its protected tokens (sinks + window). No scoring pass at all.
//
// Eviction: pair level with non-uniform budgets is the `global` allocator (the default: one
// ranking across every head and layer); pair level uniform is `kvzip:allocator=uniform`.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "press/registry.h"

namespace kvs {

struct KvzipOptions {
  int chunk = 2048;             // m, context tokens per repeat chunk
  bool softmax_cache = false;   // normalise over every key the query sees (not the official subsample)
  std::string chat = "auto";    // chat template around the repeat prompt: auto (if the model has one), yes, no
  int prev_tokens = 8;          // tokens of the previous chunk quoted by the continuation prompt
  // The repeat pass's attention products (its forward's prefill attention and the score tiles)
  // from BF16 operands with f32 accumulation (precision=bf16), a speed option: the logits,
  // softmax and maxima stay f32 (the official code, in BF16 throughout, also rounds those; not
  // emulated: docs/methods/kvzip.md). Only the scores see it: the repeat pass's K/V are discarded.
  bool bf16 = false;
};

// The options of `kvzip` presses (chunk, softmax, chat, precision; precision=auto resolved on this
// CPU: kernels::native_bf16), validated, naming the bad value. Shared by the press and calibration.
KvzipOptions kvzip_options(const Params& p);

// Leading tokens of `ctx` that are the model's chat-template head (everything before the user
// content, a system turn included; a leading BOS counted), or 0 when the model has no template or
// the context does not start with it. A system turn other than the template's default is found
// by the head's first tokens, then the user turn's opening (the head's last 3 tokens).
int32_t kvzip_chat_head_tokens(ModelProbe& probe, std::span<const int32_t> ctx);
// The positions KVzip protects (never evicted, never repeated, in every chunk's softmax):
// max(sinks, the chat-template head of the context), at most n_past. probe may be null (sinks).
int32_t kvzip_protected_prefix(ModelProbe* probe, std::span<const int32_t> ctx, int32_t sinks, int32_t n_past);

// The repeat input of the chunk of context positions [p0, p1): prompt (+ chat header) + the
// context's tokens [p0, p1). ctx: the context tokens (positions 0..).
std::vector<int32_t> kvzip_repeat_input(ModelProbe& probe, std::span<const int32_t> ctx, int32_t p0, int32_t p1,
                                        bool first_chunk, const KvzipOptions& opt);

// Pair-level scores of every slot of env.cache (Eq. 2, chunked), through probe forwards; slots
// with positions below env.request.sinks get +inf. Needs env.probe and its context tokens.
Scores kvzip_pair_scores(const PressEnv& env, const KvzipOptions& opt);

// Head-level scores [n_layer][n_head_kv]: each head's maximum finite pair score.
std::vector<std::vector<double>> kvzip_head_scores(const Scores& pair, const KvLayout& layout);

class KvzipScorer : public Scorer {
 public:
  explicit KvzipScorer(KvzipOptions o = {}) : o_(std::move(o)) {}
  std::string name() const override { return "kvzip"; }
  Needs needs() const override { return {.stats = {}, .probe = true}; }
  Scores score(const PressEnv& env) const override { return kvzip_pair_scores(env, o_); }
  // "bf16" or "f32": the repeat pass's products as resolved (precision=auto on this CPU), for .kvc headers.
  std::string score_precision() const { return o_.bf16 ? "bf16" : "f32"; }

 private:
  KvzipOptions o_;
};

// Context-independent head scores from the model's calibration file ("kvzip": {"head_scores":
// [[...]]}), broadcast to every slot of the head; sinks +inf. No probe forward.
class KvzipHeadScorer : public Scorer {
 public:
  std::string name() const override { return "kvzip_head"; }
  Needs needs() const override { return {.stats = {}, .probe = true}; }
  Scores score(const PressEnv& env) const override;
};

void add_kvzip_presses(std::vector<PressInfo>& presses);
// The `global` allocator (one ranking across every head and layer).
void add_kvzip_allocators(std::vector<AllocatorInfo>& allocators);

}  // namespace kvs
