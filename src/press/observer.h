// What the forward pass shows to compression methods, one layer of one batch at a time, and the
// one way a method may change the forward: dropping rows (tokens) from the hidden states between
// layers (UNComp's prefill pruning).
//
// LayerObserver: the press statistics collector (and a method's own probe observers) see every
// layer after its attention: queries, the log-sum-exp of each query's attention and the cache,
// from which they recompute what they need tile by tile — the forward never stores an attention
// matrix.
//
// RowSelector: called before each layer >= 1 with the rows still alive; the rows it drops are
// gone from that layer on (no K/V appended to the later layers' caches, no logits). Positions of
// the kept rows are unchanged. The last row of a chunk is never dropped (it carries the logits a
// Logits::Last forward returns).
#pragma once
#include <cstdint>
#include <vector>

#include "kvcache/attention.h"
#include "kvcache/kv_cache.h"

namespace kvs {

struct LayerView {
  int layer = 0;
  int n_tok = 0;                     // T queries in this batch (rows still alive)
  const int32_t* pos = nullptr;      // [T] positions
  const AttnShape* shape = nullptr;
  const float* hidden = nullptr;     // [T][n_embd] residual stream entering the layer
  const float* attn_in = nullptr;    // [T][n_embd] the attention block's input, attn_norm(hidden)
  const float* q = nullptr;          // [T][H][D] queries after RoPE
  const float* lse = nullptr;        // [T][H] log-sum-exp of scale*q.k over visible keys
  const float* q_pre_rope = nullptr; // [T][H][D] or null (only when needs_pre_rope())
  const float* k_pre_rope = nullptr; // [T][Hkv][D] or null
  const KvCache* cache = nullptr;    // holds this batch's keys already
};

class LayerObserver {
 public:
  virtual ~LayerObserver() = default;
  virtual void on_layer(const LayerView& v) = 0;
  virtual bool needs_pre_rope() const { return false; }
};

struct RowView {
  int layer = 0;                  // the layer about to run (>= 1)
  int n_tok = 0;                  // T rows alive
  int n_embd = 0;
  const int32_t* pos = nullptr;   // [T] positions
  const int32_t* row = nullptr;   // [T] index of each row in the forward call's input
  const float* hidden = nullptr;  // [T][n_embd] residual stream entering the layer
  const KvCache* cache = nullptr; // layers < `layer` hold this batch's alive rows
};

class RowSelector {
 public:
  virtual ~RowSelector() = default;
  // Fills `keep` with the rows to keep (ascending indices into the current T rows; must include
  // T - 1) and returns true, or returns false to keep every row.
  virtual bool select_rows(const RowView& v, std::vector<int32_t>& keep) = 0;
};

// Optional hooks of one forward call.
struct ForwardHooks {
  LayerObserver* observer = nullptr;
  RowSelector* rows = nullptr;
  // Receives, for Logits::All, the input index of every logits row returned (rows dropped by the
  // selector have none), appended chunk after chunk.
  std::vector<int32_t>* logits_rows = nullptr;
  // The prefill attention's products in BF16 (AttnShape::bf16_products) for this pass: a probe
  // whose outputs only feed an observer's scores (KVzip's repeat pass, precision=bf16).
  bool bf16_attention = false;
};

}  // namespace kvs
