// The narrow view of the model a press may use (KVzip's repeat pass, GVote's synthetic queries,
// Compactor's context NLL). Declared here, implemented in runtime/ (runtime/engine_probe.h), so
// a press never includes the runtime or the model's internals and the dependency direction
// core <- kernels <- {model, kvcache} <- press <- runtime stays as it is.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvcache/kv_cache.h"
#include "press/observer.h"

namespace kvs {

struct ProbeDims {
  int n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, head_dim = 0, rope_dim = 0;
  int n_ctx_train = 0;  // context length the model was trained for (0: unknown)
};

class ModelProbe {
 public:
  virtual ~ModelProbe() = default;
  virtual ProbeDims dims() const = 0;

  // ---- query projection --------------------------------------------------------------------
  // Queries of hidden states entering `layer`, exactly as the forward computes them: attn_norm,
  // W_q (+ bias), RoPE. hidden [n][n_embd]; rope_cs [n][rope_dim] (cos, sin) pairs, or one row
  // used for every hidden state when rope_shared; out [n][n_head][head_dim].
  virtual void project_queries(int layer, const float* hidden, int n, const float* rope_cs, bool rope_shared,
                               float* out) = 0;
  // Queries of rows that are already the attention block's input (LayerView::attn_in, the
  // statistics' attn-input moments): W_q (+ bias), RoPE — project_queries without attn_norm.
  virtual void project_attn_input_queries(int layer, const float* attn_in, int n, const float* rope_cs,
                                          bool rope_shared, float* out) = 0;
  // (cos, sin) rows for positions as `layer` rotates (Gemma 3's local layers have their own
  // table): [pos.size()][rope_dim].
  virtual std::vector<float> rope_table(int layer, std::span<const int32_t> pos) const = 0;
  // (cos, sin) of `layer`'s table averaged over positions first .. first + count - 1: [rope_dim].
  virtual std::vector<float> rope_table_mean(int layer, int32_t first, int32_t count) const = 0;

  // ---- probe forwards ----------------------------------------------------------------------
  // Runs `tokens` after everything `cache` holds (positions cache.n_past() ...) on a
  // copy-on-write fork, showing `observer` every layer; the fork and the pages it allocated are
  // released before returning. The probe's K/V never reach `cache`. bf16_attention: the pass's
  // prefill attention computes its products in BF16 (ForwardHooks::bf16_attention), for a probe
  // whose outputs only feed the observer's scores.
  virtual void probe_forward(const KvCache& cache, std::span<const int32_t> tokens, LayerObserver& observer,
                             bool bf16_attention = false) = 0;
  // Same, but the fork is kept between calls: tokens are appended after those of the previous
  // call with the same session (a chunked probe whose later chunks see the earlier ones).
  // Call end_probe_session() to release it.
  virtual void probe_forward_continue(const KvCache& cache, std::span<const int32_t> tokens,
                                      LayerObserver& observer) = 0;
  virtual void end_probe_session() = 0;

  // ---- the context -------------------------------------------------------------------------
  // Tokens the cache was prefilled with (empty when unknown, e.g. a loaded .kvc).
  virtual std::span<const int32_t> context_tokens() const = 0;
  // Negative log-likelihood of every context token after the first, from the prefill logits
  // ([n - 1]; empty unless a component's needs() asked for context_nll).
  virtual std::span<const float> context_nll() const = 0;
  // Text -> tokens with the model's tokenizer; `chat` wraps the text as one user turn of the
  // model's chat template when it has one (the template's assistant prefix included).
  virtual std::vector<int32_t> encode(const std::string& text, bool chat) const = 0;
  virtual bool has_chat_template() const = 0;

  // ---- per-model calibration -----------------------------------------------------------------
  // The data `kvshrink calibrate --press <press>` stored for this model (KVzip's head scores,
  // Compactor's curve, UNComp's groups), or null when there is none. Throws kvs::Error when a
  // file exists but is malformed or was made with another model.
  virtual const nlohmann::json* calibration(const std::string& press) = 0;
};

}  // namespace kvs
