#include "runtime/arch/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/rope_cos_sin.h"
#include "core/error.h"
#include "core/memory_cap.h"
#include "runtime/arch/block.h"

namespace kvs::arch {

void Activations::reserve(const HParams& hp, int n) {
  if (n <= capacity) return;
  const size_t T = static_cast<size_t>(n);
  const size_t E = hp.n_embd, Q = static_cast<size_t>(hp.n_head) * hp.head_dim,
               KV = static_cast<size_t>(hp.n_head_kv) * hp.head_dim, F = hp.n_ff;
  x.resize(T * E);
  xn.resize(T * std::max(E, Q));
  q.resize(T * Q);
  k.resize(T * KV);
  v.resize(T * KV);
  q_pre.resize(T * Q);
  k_pre.resize(T * KV);
  att.resize(T * Q);
  lse.resize(T * hp.n_head);
  ffn_gate.resize(T * F);
  ffn_up.resize(T * F);
  rope.resize(T * hp.rope_dim);
  if (hp.rope_theta_swa > 0) rope_local.resize(T * hp.rope_dim);
  capacity = n;
}

namespace {
// The inverse frequencies layer il rotates with.
const std::vector<float>& inv_freq(const Model& m, int il) {
  return m.hp.layer_local_rope(il) ? m.rope_inv_freq_swa : m.rope_inv_freq;
}

}  // namespace

void rope_table(const Model& m, int layer, const int32_t* pos, int n, float* out) {
  const std::vector<float>& f = inv_freq(m, layer);
  KVS_ASSERT(2 * static_cast<int>(f.size()) == m.hp.rope_dim);
  backend::rope_cos_sin_host(f, pos, n, out);
}

void rope_table_mean(const Model& m, int layer, int32_t first, int32_t count, float* out) {
  KVS_ASSERT(count >= 1);
  const int R = m.hp.rope_dim;
  const std::vector<float>& f = inv_freq(m, layer);
  for (int i = 0; i < R / 2; ++i) {
    double c = 0, s = 0;
    for (int32_t p = first; p < first + count; ++p) {
      const double a = static_cast<double>(p) * f[static_cast<size_t>(i)];
      c += std::cos(a);
      s += std::sin(a);
    }
    out[2 * i] = static_cast<float>(c / count);
    out[2 * i + 1] = static_cast<float>(s / count);
  }
}

namespace {

// Keeps rows keep[0..m) of the chunk: the residual stream, positions, row indices, RoPE rows.
void compact_rows(const HParams& hp, Activations& a, int n, const std::vector<int32_t>& keep) {
  const int m = static_cast<int>(keep.size());
  KVS_ASSERT(m >= 1 && keep.back() == n - 1);
  for (int i = 0; i < m; ++i) KVS_ASSERT(keep[i] >= 0 && keep[i] < n && (i == 0 || keep[i] > keep[i - 1]));
  const size_t E = hp.n_embd, R = hp.rope_dim;
  for (int i = 0; i < m; ++i) {
    const size_t src = static_cast<size_t>(keep[i]);
    if (src == static_cast<size_t>(i)) continue;
    std::memmove(a.x.data() + i * E, a.x.data() + src * E, sizeof(float) * E);
    std::memmove(a.rope.data() + i * R, a.rope.data() + src * R, sizeof(float) * R);
    if (hp.rope_theta_swa > 0) std::memmove(a.rope_local.data() + i * R, a.rope_local.data() + src * R, sizeof(float) * R);
    a.pos[static_cast<size_t>(i)] = a.pos[src];
    a.row[static_cast<size_t>(i)] = a.row[src];
  }
  a.pos.resize(static_cast<size_t>(m));
  a.row.resize(static_cast<size_t>(m));
}

}  // namespace

void project_attn_input_queries(const Runtime& rt, int layer, const float* attn_in, int n, const float* rope_cs,
                                 bool rope_shared, float* q_out) {
  KVS_ASSERT(layer >= 0 && layer < rt.model.hp.n_layer);
  block_of(rt.model.hp.arch).queries(rt, layer, attn_in, n, rope_cs, rope_shared, q_out);
}

void project_queries(const Runtime& rt, int layer, const float* hidden, int n, const float* rope_cs, bool rope_shared,
                     float* q_out, float* xn_scratch) {
  const HParams& hp = rt.model.hp;
  KVS_ASSERT(layer >= 0 && layer < hp.n_layer);
  const LayerWeights& L = rt.model.layers[static_cast<size_t>(layer)];
  step::norm_rows(rt, hidden, L.attn_norm, xn_scratch, n);
  project_attn_input_queries(rt, layer, xn_scratch, n, rope_cs, rope_shared, q_out);
}

namespace {

// Attention of layer il on the chunk's rows a.x[0..n) (a.pos, a.rope set): the architecture's
// attention input (norm, Q/K/V, RoPE) over every row of the chunk, then every segment's K/V
// appended to its cache, the attention of all segments (attention_batch) into a.att, each one's
// observer. (The output projection is the architecture's output_and_ffn.)
void attention_block(const Runtime& rt, const ArchBlock& block, Activations& a, std::span<Segment> segs, int il, int n,
                     bool keep_pre) {
  const HParams& hp = rt.model.hp;
  const int E = hp.n_embd, H = hp.n_head, Hkv = hp.n_head_kv, D = hp.head_dim;
  // Several sequences: what their appends below read is asked for now, during the Q/K/V projection.
  if (segs.size() > 1)
    for (const Segment& sg : segs) sg.cache->prefetch_append_slots(il);
  block.attention_input(rt, a, il, n, keep_pre, hp.layer_local_rope(il) ? a.rope_local.data() : a.rope.data());
  // Every sequence's K/V appended to its cache, then the attention of all of them in one call
  // (one parallel section for the batch's decode rows), then each sequence's observer.
  std::vector<AttnJob> jobs;
  jobs.reserve(segs.size());
  // A decode-sized segment's slots are reserved here and its rows written by the attention's
  // tasks, in parallel (AttnJob::k_new): written here, one sequence after another, they kept one
  // thread busy while the others waited.
  for (const Segment& sg : segs) {
    const size_t r0 = static_cast<size_t>(sg.first);
    const int32_t* sp = a.pos.data() + r0;
    const float* k = a.k.data() + r0 * Hkv * D;
    const float* v = a.v.data() + r0 * Hkv * D;
    const bool in_task = sg.n < kAttnPrefillMinTokens;
    if (!(in_task ? sg.cache->append_slots(il, sg.n, sp) : sg.cache->append(il, sg.n, k, v, sp)))
      fail_memory_cap("KV cache memory cap reached while appending layer {}", il);
    AttnJob job{sg.cache, a.q.data() + r0 * H * D, sp, sg.n, a.att.data() + r0 * H * D, a.lse.data() + r0 * H};
    if (in_task) {
      job.writes = sg.cache;
      job.k_new = k;
      job.v_new = v;
    }
    jobs.push_back(job);
  }
  attention_batch(jobs, il, rt.shape, rt.attn_pool, rt.attn);
  for (const Segment& sg : segs) {
    const size_t r0 = static_cast<size_t>(sg.first);
    float* q = a.q.data() + r0 * H * D;
    const int32_t* sp = a.pos.data() + r0;
    if (sg.observer) {
      LayerView v;
      v.layer = il;
      v.n_tok = sg.n;
      v.pos = sp;
      v.shape = &rt.shape;
      v.hidden = a.x.data() + r0 * E;
      v.attn_in = a.xn.data() + r0 * E;  // attn_norm(x), overwritten only after the observers ran
      v.q = q;
      v.lse = a.lse.data() + r0 * H;
      v.q_pre_rope = keep_pre ? a.q_pre.data() + r0 * H * D : nullptr;
      v.k_pre_rope = keep_pre ? a.k_pre.data() + r0 * Hkv * D : nullptr;
      v.cache = sg.cache;
      sg.observer->on_layer(v);
    }
    // A local (sliding-window) layer: the next query (position > this chunk's last, p) sees keys
    // at positions >= p + 2 - window; the pages wholly before that are freed (memory bounded by
    // the window plus the pages in use, whatever the context).
    if (const int32_t w = rt.shape.window(il); w > 0) sg.cache->drop_pages_before(il, sp[sg.n - 1] + 2 - w);
  }
}

// The RoPE rows of positions pos[0..n): the table every layer uses (global) [n][R], and the local
// layers' own [n][R] when the model has one (Gemma 3; `local` untouched otherwise).
void fill_rope(const Runtime& rt, const int32_t* pos, int n, float* global, float* local) {
  const Model& m = rt.model;
  backend::Tensor g = rows_of(global, n, m.hp.rope_dim);
  rt.be.rope_cos_sin(m.rope_inv_freq, pos, g);
  if (!m.rope_inv_freq_swa.empty()) {
    backend::Tensor l = rows_of(local, n, m.hp.rope_dim);
    rt.be.rope_cos_sin(m.rope_inv_freq_swa, pos, l);
  }
}

}  // namespace

int forward_segments(const Runtime& rt, Activations& a, std::span<Segment> segs, const int32_t* tokens,
                     const int32_t* pos, int n, LogitsRows mode, RowSelector* row_selector, float* logits_out) {
  const Model& model = rt.model;
  const HParams& hp = model.hp;
  const ArchBlock& block = block_of(hp.arch);
  KVS_ASSERT(!segs.empty());
  KVS_ASSERT(!row_selector || segs.size() == 1);
  KVS_ASSERT(mode != LogitsRows::All || segs.size() == 1);
  a.reserve(hp, n);
  const int E = hp.n_embd, H = hp.n_head, D = hp.head_dim;
  bool keep_pre = false;
  for (const Segment& sg : segs) keep_pre |= sg.observer && sg.observer->needs_pre_rope();
  a.pos.assign(pos, pos + n);
  a.row.resize(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) a.row[static_cast<size_t>(t)] = t;

  // Embedding and the RoPE table of every row.
  block.embed(rt, tokens, n, a.x.data());
  fill_rope(rt, a.pos.data(), n, a.rope.data(), a.rope_local.data());

  std::vector<int32_t> keep;
  int n_out = 0;  // > 0: the last layer ran on the logits rows only, moved to rows 0..n_out-1
  for (int il = 0; il < hp.n_layer; ++il) {
    int rows = n;  // rows the output projection and feed-forward block run on
    // Optional pruning of rows before the layer (this chunk's rows only; a whole prefill is
    // pruned layer-major by forward_layer_major).
    if (row_selector && il > 0) {
      RowView rv{il, n, E, a.pos.data(), a.row.data(), a.x.data(), segs[0].cache};
      keep.clear();
      if (row_selector->select_rows(rv, keep) && static_cast<int>(keep.size()) < n) {
        compact_rows(hp, a, n, keep);
        n = static_cast<int>(keep.size());
        segs[0].n = n;
      }
    }
    attention_block(rt, block, a, segs, il, n, keep_pre);
    // Without logits nothing reads the last layer's output (a prefill chunk before the last, a
    // press's probe forward): its output projection and feed-forward block are skipped.
    if (mode == LogitsRows::None && il == hp.n_layer - 1) break;
    // With the last row's logits only, the last layer's output projection and feed-forward block
    // run on those rows alone (one per sequence), moved to the front: a.att [n_out][H * D] and
    // a.x [n_out][E]. Segments are in row order, so row i <= the row copied into it.
    if (mode == LogitsRows::Last && il == hp.n_layer - 1) {
      int i = 0;
      for (const Segment& sg : segs) {
        const size_t t = static_cast<size_t>(sg.first + sg.n - 1), d = static_cast<size_t>(i++);
        if (t == d) continue;
        std::memmove(a.att.data() + d * H * D, a.att.data() + t * H * D, sizeof(float) * H * D);
        std::memmove(a.x.data() + d * E, a.x.data() + t * E, sizeof(float) * E);
      }
      n_out = i;
      rows = i;
    }
    block.output_and_ffn(rt, a, il, rows);
  }

  // Output: logits = W_out . norm(x) for the last row of every sequence, or every row alive.
  if (mode == LogitsRows::None) return n;
  std::vector<int> out_rows;
  if (mode == LogitsRows::All)
    for (int t = 0; t < n; ++t) out_rows.push_back(t);
  else if (n_out > 0)
    for (int t = 0; t < n_out; ++t) out_rows.push_back(t);  // moved to the front in the last layer
  else
    for (const Segment& sg : segs) out_rows.push_back(sg.first + sg.n - 1);
  block.logits(rt, a, out_rows, logits_out);
  return n;
}

int forward_layer_major(const Runtime& rt, Activations& a, KvCache& cache, const int32_t* tokens, const int32_t* pos,
                        int n, int n_batch, LogitsRows mode, const ForwardHooks& hooks, float* logits_out,
                        std::vector<int32_t>* rows_out) {
  const Model& model = rt.model;
  const HParams& hp = model.hp;
  const ArchBlock& block = block_of(hp.arch);
  const int E = hp.n_embd, H = hp.n_head, D = hp.head_dim, L = hp.n_layer;
  KVS_ASSERT(n >= 1 && n_batch >= 1);
  const bool keep_pre = hooks.observer && hooks.observer->needs_pre_rope();
  // The whole prefill's residual stream, positions, input rows and RoPE rows: X [n][E], P [n],
  // R [n], RC [n][rope_dim].
  const int RD = hp.rope_dim;
  // RCL [n][rope_dim]: the local layers' RoPE rows (Gemma 3 only, else empty).
  const bool two_tables = hp.rope_theta_swa > 0;
  std::vector<float> X(static_cast<size_t>(n) * E), RC(static_cast<size_t>(n) * RD),
      RCL(two_tables ? static_cast<size_t>(n) * RD : 0);
  std::vector<int32_t> P(pos, pos + n), R(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) R[static_cast<size_t>(t)] = t;
  fill_rope(rt, P.data(), n, RC.data(), RCL.data());
  block.embed(rt, tokens, n, X.data());
  a.reserve(hp, std::min(n, n_batch));
  std::vector<int32_t> keep;
  for (int il = 0; il < L; ++il) {
    // Pruning before the layer, over every row still alive (UNComp ranks them by the attention
    // of the context's last token at the previous layer, which has seen the whole context).
    if (hooks.rows && il > 0) {
      RowView rv{il, n, E, P.data(), R.data(), X.data(), &cache};
      keep.clear();
      if (hooks.rows->select_rows(rv, keep) && static_cast<int>(keep.size()) < n) {
        const int m = static_cast<int>(keep.size());
        KVS_ASSERT(m >= 1 && keep.back() == n - 1);
        for (int i = 0; i < m; ++i) {
          const size_t src = static_cast<size_t>(keep[static_cast<size_t>(i)]);
          KVS_ASSERT(src < static_cast<size_t>(n) && (i == 0 || keep[static_cast<size_t>(i)] > keep[static_cast<size_t>(i - 1)]));
          if (src == static_cast<size_t>(i)) continue;
          std::memmove(X.data() + static_cast<size_t>(i) * E, X.data() + src * E, sizeof(float) * E);
          std::memmove(RC.data() + static_cast<size_t>(i) * RD, RC.data() + src * RD, sizeof(float) * RD);
          if (two_tables) std::memmove(RCL.data() + static_cast<size_t>(i) * RD, RCL.data() + src * RD, sizeof(float) * RD);
          P[static_cast<size_t>(i)] = P[src];
          R[static_cast<size_t>(i)] = R[src];
        }
        n = m;
        P.resize(static_cast<size_t>(n));
        R.resize(static_cast<size_t>(n));
      }
    }
    const bool last_layer = il == L - 1;
    // The layer over chunks of n_batch rows: each chunk's queries see the layer's keys of every
    // earlier chunk (appended before) and its own, causally.
    for (int b = 0; b < n; b += n_batch) {
      const int nb = std::min(n_batch, n - b);
      std::memcpy(a.x.data(), X.data() + static_cast<size_t>(b) * E, sizeof(float) * static_cast<size_t>(nb) * E);
      a.pos.assign(P.begin() + b, P.begin() + b + nb);
      a.row.assign(R.begin() + b, R.begin() + b + nb);
      std::memcpy(a.rope.data(), RC.data() + static_cast<size_t>(b) * RD, sizeof(float) * static_cast<size_t>(nb) * RD);
      if (two_tables)
        std::memcpy(a.rope_local.data(), RCL.data() + static_cast<size_t>(b) * RD, sizeof(float) * static_cast<size_t>(nb) * RD);
      Segment seg{&cache, 0, nb, hooks.observer};
      attention_block(rt, block, a, std::span<Segment>(&seg, 1), il, nb, keep_pre);
      if (last_layer && mode == LogitsRows::None) continue;
      int rows = nb;
      if (last_layer && mode == LogitsRows::Last) {
        if (b + nb < n) continue;  // only the prefill's last row needs the rest of the last layer
        std::memmove(a.att.data(), a.att.data() + static_cast<size_t>(nb - 1) * H * D, sizeof(float) * H * D);
        std::memmove(a.x.data(), a.x.data() + static_cast<size_t>(nb - 1) * E, sizeof(float) * E);
        rows = 1;
      }
      block.output_and_ffn(rt, a, il, rows);
      if (last_layer && mode == LogitsRows::Last) {
        block.logits(rt, a, {0}, logits_out);
      } else if (last_layer && mode == LogitsRows::All) {
        std::vector<int> out(static_cast<size_t>(nb));
        for (int t = 0; t < nb; ++t) out[static_cast<size_t>(t)] = t;
        block.logits(rt, a, out, logits_out + static_cast<size_t>(b) * hp.n_vocab);
      } else {
        std::memcpy(X.data() + static_cast<size_t>(b) * E, a.x.data(), sizeof(float) * static_cast<size_t>(nb) * E);
      }
    }
  }
  if (rows_out) *rows_out = R;
  return n;
}

int forward_chunk(const Runtime& rt, Activations& a, KvCache& cache, const int32_t* tokens, const int32_t* pos, int n,
                  LogitsRows mode, const ForwardHooks& hooks, float* logits_out) {
  Segment seg{&cache, 0, n, hooks.observer};
  return forward_segments(rt, a, std::span<Segment>(&seg, 1), tokens, pos, n, mode, hooks.rows, logits_out);
}

}  // namespace kvs::arch
