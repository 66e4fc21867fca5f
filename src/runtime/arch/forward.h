// The forward pass every architecture shares, read top-down: embedding -> N x [attention input
// (norm, Q/K/V, RoPE), append K/V to the cache, attention over the per-head cache, output
// projection and feed-forward block] -> logits, over chunks of rows that may hold several
// sequences (batched decoding) or a whole prefill layer by layer (forward_layer_major). What
// differs between architectures is their ArchBlock, one file each (runtime/arch/block.h lists them:
// llama.cpp, qwen2.cpp, qwen3.cpp, phi3.cpp, gemma2.cpp, gemma3.cpp); attention's own differences
// (sliding windows, soft-capping) are AttnShape's (kvcache/attention.h).
//
// Dimension legend: T = rows (tokens) of the chunk, E = n_embd, H = query heads, Hkv = KV heads,
// D = head_dim, R = rope_dim, F = n_ff, V = n_vocab.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/aligned_buffer.h"
#include "kvcache/attention.h"
#include "kvcache/kv_cache.h"
#include "model/model.h"
#include "press/observer.h"

namespace kvs::arch {

// Activations of one forward chunk (llama2.c's RunState): every buffer named with its shape.
// Capacity grows to the largest chunk seen; T shrinks when a RowSelector drops rows.
struct Activations {
  AlignedBuffer<float> x;         // [T][E]     residual stream
  AlignedBuffer<float> xn;        // [T][max(E, H*D)] normed residual, then projection outputs
  AlignedBuffer<float> q;         // [T][H][D]  queries, after RoPE
  AlignedBuffer<float> k;         // [T][Hkv][D] keys, after RoPE (appended to the cache)
  AlignedBuffer<float> v;         // [T][Hkv][D] values
  AlignedBuffer<float> q_pre;     // [T][H][D]  queries before RoPE (only for observers that ask)
  AlignedBuffer<float> k_pre;     // [T][Hkv][D] keys before RoPE (idem)
  AlignedBuffer<float> att;       // [T][H][D]  attention output
  AlignedBuffer<float> lse;       // [T][H]     log-sum-exp of each query's scaled scores
  AlignedBuffer<float> ffn_gate;  // [T][F]     gate projection, then silu(gate) * up
  AlignedBuffer<float> ffn_up;    // [T][F]     up projection
  AlignedBuffer<float> rope;      // [T][R]     (cos, sin) pairs of each row's position
  AlignedBuffer<float> rope_local;  // [T][R]   idem with the local layers' table (only when the model has one)
  std::vector<int32_t> pos;       // [T]        positions of the rows
  std::vector<int32_t> row;       // [T]        index of each row in the chunk as given
  int capacity = 0;
  void reserve(const HParams& hp, int n);
};

// What a pass uses besides its inputs (owned by the Engine). The architecture blocks compute
// through `be` only; the cache append and attention still run in kvcache/ on the host, over
// attn_pool (not behind the backend seam yet: docs/backend.md).
struct Runtime {
  const Model& model;
  backend::Backend& be;
  ThreadPool& attn_pool;
  AttnScratch& attn;
  AttnShape shape;
};

// The host F32 matrix [rows][cols] at p as a backend tensor (the forward's activations live in
// host buffers while the CPU is the only backend).
inline backend::Tensor rows_of(float* p, int64_t rows, int64_t cols) { return backend::Tensor::host_f32(p, rows, cols); }
inline backend::Tensor rows_of(const float* p, int64_t rows, int64_t cols) {
  return backend::Tensor::host_f32(p, rows, cols);
}

enum class LogitsRows { None, Last, All };

// One sequence's rows in a chunk that may hold several sequences (batched decoding).
struct Segment {
  KvCache* cache = nullptr;
  int first = 0, n = 0;               // rows [first, first + n) of the chunk
  LayerObserver* observer = nullptr;  // sees this sequence's rows only
};

// Runs a chunk of n rows belonging to one or more sequences: the projections and the FFN run over
// all rows at once (the weights are read once per chunk, whatever the number of sequences); the
// cache append, attention and observers run per segment over its own cache. Positions must
// increase within a segment. logits_out: Last -> [n_segments][V] (the last row of each segment);
// All (one segment only) -> [T_end][V]. A row selector needs a single segment. Returns T_end.
int forward_segments(const Runtime& rt, Activations& a, std::span<Segment> segs, const int32_t* tokens,
                     const int32_t* pos, int n, LogitsRows mode, RowSelector* row_selector, float* logits_out);

// Runs one chunk of n tokens at positions pos (increasing, >= cache.n_past()), appending their
// K/V to `cache`. logits_out: [1][V] for Last, [T_end][V] for All (T_end = rows alive at the end;
// their chunk indices are a.row[0 .. T_end)). Returns T_end.
int forward_chunk(const Runtime& rt, Activations& a, KvCache& cache, const int32_t* tokens, const int32_t* pos, int n,
                  LogitsRows mode, const ForwardHooks& hooks, float* logits_out);

// A whole prefill of n tokens (one sequence), LAYER-MAJOR: every row goes through layer l, in
// chunks of n_batch rows, before any goes through layer l + 1; hooks.rows (if set) is called
// before each layer >= 1 with every row still alive, so a row selector ranks the whole prefill
// whatever n_batch (UNComp's hidden-state pruning; the chunked forward shows it one chunk at a
// time). Memory: the residual stream of the whole prefill [n][E] beside the chunk's activations.
// logits_out: Last -> [1][V] (the last row), All -> [T_end][V]; rows_out (if given) receives the
// input index of each row alive at the end. Returns T_end.
int forward_layer_major(const Runtime& rt, Activations& a, KvCache& cache, const int32_t* tokens, const int32_t* pos,
                        int n, int n_batch, LogitsRows mode, const ForwardHooks& hooks, float* logits_out,
                        std::vector<int32_t>* rows_out);

// (cos, sin) pairs for positions, as layer `layer` rotates (Gemma 3's local layers have their
// own table; every layer of other models shares one): out [n][R].
void rope_table(const Model& m, int layer, const int32_t* pos, int n, float* out);
// (cos, sin) pairs averaged over positions first .. first + count - 1: out [R]. The average of
// rotations is not a rotation: it shrinks the rotated pairs as a future query of unknown
// position would on average (GVote's projection of synthetic queries).
void rope_table_mean(const Model& m, int layer, int32_t first, int32_t count, float* out);

// Queries of hidden states entering `layer`: attn_norm, W_q (+ bias), RoPE with the given (cos,
// sin) rows — the code the forward runs. hidden [n][E], rope_cs [n][R] (or [1][R] shared by every
// row when rope_shared), q_out [n][H][D]; xn_scratch [n][E].
void project_queries(const Runtime& rt, int layer, const float* hidden, int n, const float* rope_cs, bool rope_shared,
                     float* q_out, float* xn_scratch);
// Queries of rows that are already the attention block's input (attn_norm applied): W_q (+ bias),
// RoPE. attn_in [n][E]; the rest as project_queries.
void project_attn_input_queries(const Runtime& rt, int layer, const float* attn_in, int n, const float* rope_cs,
                                bool rope_shared, float* q_out);

}  // namespace kvs::arch
