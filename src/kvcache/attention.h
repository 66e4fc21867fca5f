// Causal attention of a batch of queries over one layer of a KvCache, per KV head (GQA: query
// head qh reads KV head qh / (n_head / n_head_kv), whatever token set that head holds). A key is
// visible to a query iff key position <= query position (and, on a sliding-window layer, key
// position > query position - window), so a compressed cache, a question after a compressed
// context and plain causal prefill are the same computation.
//
// Two paths, both exact against attention_ref:
//  - decode (few queries): split each head's keys into ranges across threads (flash-decoding),
//    partial softmax per range, merged at the end;
//  - prefill (many queries): K/V gathered to f32 (keys transposed into panels of 16), query
//    blocks x key blocks through the kernel table's attention tiles (kernels::qk_panels,
//    pv_tile) and an online softmax — never an N x N matrix.
//
// Dimension legend: T = queries in the batch, H = query heads, Hkv = KV heads, D = head dim,
// L = slots held by a KV head.
#pragma once
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "kvcache/kv_cache.h"

namespace kvs {

struct AttnShape {
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  float scale = 0;  // usually 1/sqrt(head_dim)
  // llama.cpp numerics: round queries and attention probabilities to F16 before the products,
  // as llama.cpp's CPU attention does with its default F16 KV cache. Off by default (F32 is more
  // accurate); used to compare logits with llama.cpp references to their print precision.
  bool f16_compat = false;
  // BF16 products in the prefill path: Q.K^T and P.V from operands rounded to BF16 (nearest even),
  // accumulated in f32; the softmax and its normaliser stay f32. For passes whose outputs only
  // feed scores (KVzip's repeat pass: its official code runs the model in BF16); twice the
  // products per instruction on CPUs with AVX512_BF16 (kernels::native_bf16), plain loops on
  // others. Ignored with f16_compat and by the decode path.
  bool bf16_products = false;
  // Whether the prefill path runs them: not with f16_compat, and only for even head dims (the
  // BF16 kernels multiply dims in pairs). What a scorer reading the forward's lse must match.
  bool bf16_active() const { return bf16_products && !f16_compat && head_dim % 2 == 0; }
  // Gemma 2: attention logits soft-capped, s -> softcap * tanh(s / softcap) after the scale; 0 = off.
  float softcap = 0;
  // Sliding-window layers: a query at position p sees keys at positions (p - n_swa, p] on a local
  // layer (every layer when swa_period is 0; all but each swa_period-th otherwise, as HParams).
  int32_t n_swa = 0;
  int swa_period = 0;
  int32_t window(int layer) const { return n_swa > 0 && (swa_period == 0 || (layer + 1) % swa_period != 0) ? n_swa : 0; }
  // A local layer beside global ones (Gemma 2): presses leave it to its window and spend their
  // budget on the global layers. A model whose every layer slides (Phi-3) has no global layer, so
  // its layers are compressed like any other (on top of the window).
  bool press_skips(int layer) const { return swa_period > 0 && window(layer) > 0; }
  // The logit of a key whose scaled dot product with the query is `scaled` (soft-capped when set).
  float logit(float scaled) const { return softcap > 0 ? softcap * std::tanh(scaled * (1.0f / softcap)) : scaled; }
};

struct AttnScratch {
  std::vector<AlignedBuffer<float>> per_thread;  // [threads] work buffers
  std::vector<AlignedBuffer<uint16_t>> per_thread16;  // [threads] BF16 queries, probabilities and key blocks
  AlignedBuffer<float> partial;                  // decode partial results
};

// q: [T][H][D] post-RoPE queries, qpos: [T]. out: [T][H][D]. lse: optional [T][H] receives the
// natural-log sum of exp(scale * q.k) over visible keys (statistics passes use it to recover
// attention probabilities without storing them).
void attention(const KvCache& cache, int layer, const AttnShape& s, const float* q, const int32_t* qpos,
               int n_tok, float* out, float* lse, ThreadPool& pool, AttnScratch& scratch);

// One sequence's queries for attention_batch: q [T][H][D] post-RoPE, qpos [T], out [T][H][D],
// lse [T][H] (optional), T = n_tok, over `cache`.
struct AttnJob {
  const KvCache* cache = nullptr;
  const float* q = nullptr;
  const int32_t* qpos = nullptr;
  int n_tok = 0;
  float* out = nullptr;
  float* lse = nullptr;
  // Rows to write before reading them: non-null when the last n_tok slots of every KV head of the
  // layer were reserved by KvCache::append_slots (this cache) and their rows are k_new / v_new
  // [n_tok][n_head_kv][head_dim] floats. attention_batch writes them (KvCache::write_slot): a
  // decode task writes the new slots in its own key range before its Q.K, so a batched step's
  // appends run in the attention's parallel section instead of one after another before it.
  KvCache* writes = nullptr;
  const float* k_new = nullptr;
  const float* v_new = nullptr;
};

// attention() of several sequences on one layer (batched decoding), each job over its own cache:
// the same results as one attention() call per job. The decode-sized jobs (n_tok below
// kAttnPrefillMinTokens) share one parallel section, their (job, KV head, key range) tasks handed
// to whichever thread is free; the others run the prefill path one after the other.
void attention_batch(std::span<const AttnJob> jobs, int layer, const AttnShape& s, ThreadPool& pool,
                     AttnScratch& scratch);

// Scalar reference (double accumulation). Same contract.
void attention_ref(const KvCache& cache, int layer, const AttnShape& s, const float* q, const int32_t* qpos,
                   int n_tok, float* out, float* lse);

// Number of queries from which the blocked prefill path is used.
constexpr int kAttnPrefillMinTokens = 8;

}  // namespace kvs
