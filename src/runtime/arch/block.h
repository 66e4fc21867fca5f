// What differs between architectures, one file each, reading top-down:
//   llama.cpp   Llama 2/3/3.1/3.2, Mistral, SmolLM, TinyLlama (the block every other file departs from)
//   qwen2.cpp   Qwen2 / Qwen2.5: the Llama block with Q/K/V biases, rotate-half RoPE
//   qwen3.cpp   Qwen3: the Llama block with a per-head RMSNorm of queries and keys before RoPE
//   phi3.cpp    Phi-3: the Llama block; fused QKV and gate/up projections split at load
//   gemma2.cpp  Gemma 2: scaled embeddings, post-norms, GeGLU, soft-capped logits, sliding layers
//   gemma3.cpp  Gemma 3 (text): Gemma 2's layer with Qwen3's per-head norms, two RoPE tables
// The forward pass itself (embedding -> layers -> logits over chunks, segments, layer-major
// prefill, the cache append and attention, observers and row pruning) is shared:
// runtime/arch/forward.cpp runs a layer as
//   attention_input (norm, Q/K/V, RoPE) -> cache append + attention -> output_and_ffn
// with the architecture's steps from its ArchBlock. Every step computes through the Backend's ops
// (rt.be: backend/backend.h), never in its own loops nor with the kernels' row API. Attention's own differences (sliding
// windows, logit soft-capping, query scale) are data in AttnShape (kvcache/attention.h).
//
// Dimension legend: T = rows (tokens) of the chunk, E = n_embd, H = query heads, Hkv = KV heads,
// D = head_dim, R = rope_dim, F = n_ff, V = n_vocab.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/arch/forward.h"

namespace kvs::arch {

struct ArchBlock {
  // x [n][E] = the input embedding of tokens[0..n).
  void (*embed)(const Runtime& rt, const int32_t* tokens, int n, float* x);
  // Layer il's attention input from the residual rows a.x[0..n): a.xn [n][E] = attn_norm(x) (kept
  // for observers), a.q [n][H][D], a.k [n][Hkv][D] after RoPE with the (cos, sin) rows rope [n][R],
  // a.v [n][Hkv][D]; a.q_pre / a.k_pre the same before RoPE when keep_pre.
  void (*attention_input)(const Runtime& rt, Activations& a, int il, int n, bool keep_pre, const float* rope);
  // Queries of rows that already are layer il's attention input (attn_norm applied): attn_in
  // [n][E] -> q_out [n][H][D], RoPE with rope_cs [n][R] (or one row shared when rope_shared).
  void (*queries)(const Runtime& rt, int il, const float* attn_in, int n, const float* rope_cs, bool rope_shared,
                  float* q_out);
  // The rest of layer il on rows [0, rows) of a.att [rows][H*D] and a.x [rows][E]: output
  // projection, residual, feed-forward block, residual (a.xn, a.ffn_* as scratch).
  void (*output_and_ffn)(const Runtime& rt, Activations& a, int il, int rows);
  // logits_out [rows.size()][V] of the residual rows a.x[rows[i]] (a.xn as scratch).
  void (*logits)(const Runtime& rt, Activations& a, const std::vector<int>& rows, float* logits_out);
};

// The block of each architecture (defined in its file) and the one a model runs.
const ArchBlock& llama_block();
const ArchBlock& qwen2_block();
const ArchBlock& qwen3_block();
const ArchBlock& phi3_block();
const ArchBlock& gemma2_block();
const ArchBlock& gemma3_block();
const ArchBlock& block_of(Arch arch);

// Steps the files share (defined where they first appear; the files that reuse one say so).
namespace llama {
void embed(const Runtime& rt, const int32_t* tokens, int n, float* x);
void attention_input(const Runtime& rt, Activations& a, int il, int n, bool keep_pre, const float* rope);
void queries(const Runtime& rt, int il, const float* attn_in, int n, const float* rope_cs, bool rope_shared,
             float* q_out);
void output_and_ffn(const Runtime& rt, Activations& a, int il, int rows);
void logits(const Runtime& rt, Activations& a, const std::vector<int>& rows, float* logits_out);
}  // namespace llama
namespace qwen3 {
void attention_input(const Runtime& rt, Activations& a, int il, int n, bool keep_pre, const float* rope);
void queries(const Runtime& rt, int il, const float* attn_in, int n, const float* rope_cs, bool rope_shared,
             float* q_out);
}  // namespace qwen3
namespace gemma2 {
void embed(const Runtime& rt, const int32_t* tokens, int n, float* x);
void output_and_ffn(const Runtime& rt, Activations& a, int il, int rows);
void logits(const Runtime& rt, Activations& a, const std::vector<int>& rows, float* logits_out);
}  // namespace gemma2

// Steps several blocks share (block.cpp), in backend ops (rt.be) like the blocks themselves.
namespace step {
// out[t] = RMSNorm(x[t]) * w for rows t in [0, n) of width E (rows of [n][E]).
void norm_rows(const Runtime& rt, const float* x, const TensorView& w, float* out, int n);
// a.x[t] += y[t] for rows [0, rows) (y [rows][E]).
void add_residual(const Runtime& rt, Activations& a, const float* y, int rows);
// add_residual(y) then norm_rows(a.x, w, out) in one parallel section, row by row (a row's sum,
// then its norm): the same values; out may be y.
void add_residual_then_norm(const Runtime& rt, Activations& a, const float* y, const TensorView& w, float* out,
                            int rows);

// The attention input of the Llama block and of those that add per-head Q/K norms:
//   n = attn_norm(x); q, k, v = W . n (+ b_q, b_k, b_v when the layer has them);
//   with head_norms: q_h, k_h = q_norm(q_h), k_norm(k_h) (Qwen3, Gemma 3); pre-RoPE copies when
//   keep_pre; q, k = RoPE(q), RoPE(k) with the rows of rope [n][R].
void qkv_rope(const Runtime& rt, Activations& a, int il, int n, bool keep_pre, const float* rope, bool head_norms);
// Queries only, from rows that are already the attention input: W_q (+ b_q), q_norm per head when
// head_norms, RoPE (ArchBlock::queries).
void queries_rope(const Runtime& rt, int il, const float* attn_in, int n, const float* rope_cs, bool rope_shared,
                  float* q_out, bool head_norms);
}  // namespace step

}  // namespace kvs::arch
