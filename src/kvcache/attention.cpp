#include "kvcache/attention.h"
#include "kvcache/kv_rows.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <span>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/attn_rows.h"
#include "kernels/ops.h"
#include "kernels/vexp.h"

namespace kvs {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr int kDecodeRange = 512;  // least keys per decode task (flash-decoding split; decode_splits)
constexpr int kPrefillRows = 256;  // prefill: rows (query heads of a group x tokens) per task
constexpr int kBk = 512;           // prefill key block

// Number of leading slots of head h with position <= p (slots are sorted by position). Decode's
// case first: every slot is at or before the query (its own key was just appended), which the last
// position tells without a binary search over positions that are cold in cache by the next step
// (a 16-sequence step's planning, 48 searches a layer on one thread: 5.6 -> 0.8 us a layer).
int32_t visible_prefix(const HeadCache& h, int32_t p) {
  if (h.pos.empty() || h.pos.back() <= p) return static_cast<int32_t>(h.pos.size());
  return static_cast<int32_t>(std::upper_bound(h.pos.begin(), h.pos.end(), p) - h.pos.begin());
}

// First slot of head h a query at position p sees on a layer with `window` (0: none): slots
// with position > p - window.
int32_t window_start(const HeadCache& h, int32_t p, int32_t window) {
  if (window <= 0) return 0;
  return static_cast<int32_t>(std::upper_bound(h.pos.begin(), h.pos.end(), p - window) - h.pos.begin());
}

// Decode tasks (flash-decoding's split) a head's n visible slots are cut into: ranges of at least
// kDecodeRange keys, at least 2 x kDecodeRange once the head holds 4 x kDecodeRange (floor, not
// ceil: no task is shorter than the least range unless the head is). A function of n alone, so a
// sequence's split, hence its output, is the same alone or in any batch and on any thread count.
// Fewer, longer tasks cost less per key: each has its own query copy, softmax state, partial to
// merge and stream to start. One sequence between 1,024 and 2,047 keys keeps 2-3 tasks per head
// (docs/benchmarks/issue25-server-step-3-2026-11-29.md, "Decode tasks of 512 keys or more").
int32_t decode_splits(int32_t n) {
  const int32_t least = n >= 4 * kDecodeRange ? 2 * kDecodeRange : kDecodeRange;
  return std::max<int32_t>(1, n / least);
}

// Soft-capping of n scaled logits in place (Gemma 2's attn_logit_softcapping).
void softcap_row(float* row, int32_t n, const AttnShape& s) {
  if (s.softcap > 0)
    for (int32_t j = 0; j < n; ++j) row[j] = s.logit(row[j]);
}

inline float round_f16(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

// Pages of a head are scattered in the pool, so the hardware prefetcher restarts at every page;
// the next page's rows are asked for while the current one is being used. Not all at once: a
// burst of a page's 64+ prefetches fills the core's miss buffers and stalls the kernel behind it,
// so a page goes through the row kernel in pieces of kPieceRows rows, each preceded by the
// prefetch of the same rows of the next page; smaller pieces cost more in calls than they gain
// (docs/benchmarks/issue25-server-step-1-2026-11-28.md, "the next page's prefetch spread over the page").
constexpr int32_t kPieceRows = 16;
// The P.V pass of Q8_0 pages with int16 weights (kernels::pv_rows_q8_0_i16) goes 32 rows (a whole
// page at the default page size) at a time: the kernel's cost per call (the weights' scale and
// rounding, the int32 sums' conversion) is its own, and it halves with twice the rows
// (docs/benchmarks/issue25-server-step-4-intel-2026-11-29.md, "P.V with int16 weights").
constexpr int32_t kPieceRowsI16 = 32;

inline void prefetch_rows(const uint8_t* p, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 3);
}
// The same into L2 only (prefetcht1): for the next task's pages (NextTaskPrefetch), which are read
// a whole task later.
inline void prefetch_rows_l2(const uint8_t* p, size_t bytes) {
  for (size_t off = 0; off < bytes; off += 64) __builtin_prefetch(p + off, 0, 2);
}

// fn(r, m) for the pieces [r, r + m) of a page's n rows (row stride rb bytes; pieces of `piece`
// rows), each after the prefetch of rows [r, r + m) of `next` (n_next rows; none when null).
template <class Fn>
inline void in_pieces(int32_t n, const uint8_t* next, int32_t n_next, size_t rb, int32_t piece, Fn&& fn) {
  for (int32_t r = 0; r < n; r += piece) {
    const int32_t m = std::min(piece, n - r);
    if (r < n_next) prefetch_rows(next + r * rb, static_cast<size_t>(std::min(m, n_next - r)) * rb);
    fn(r, m);
  }
  // The next page's rows beyond this page's count (a short first piece of the task's range).
  if (n < n_next) prefetch_rows(next + static_cast<size_t>(n) * rb, static_cast<size_t>(n_next - n) * rb);
}

// The pages of a thread's next decode task, asked for a share at a time during the current task's
// Q.K and P.V passes. For the quantized page types a task is one softmax block
// (softmax_block_rows), so its pages are known when it starts. Spread over every piece of both
// passes, not in a burst (see kPieceRows): the next task's pages (~70 KB at 512 Q8_0 keys) take
// longer to arrive than one P.V pass lasts, so when they were asked for during P.V only, the next
// Q.K still waited on most of them; into L2 only (prefetcht1), since they are read a task later
// (docs/benchmarks/issue25-server-step-5-intel-2026-11-30.md, "The next task's pages during Q.K too").
class NextTaskPrefetch {
 public:
  NextTaskPrefetch() = default;
  // Slots [b, e) of head kvh of `layer` in cache c (whole pages), over `pieces` calls of step()
  // (fewer calls than that leave the rest unasked; more find nothing left to ask for).
  NextTaskPrefetch(const KvCache& c, int layer, int kvh, int32_t b, int32_t e, size_t pieces)
      : c_(&c), layer_(layer), kvh_(kvh), P_(c.layout().page_tokens) {
    page_ = b / P_;
    page_end_ = (e + P_ - 1) / P_;
    page_lines_ = (c.layout().page_bytes() + 63) / 64;
    per_step_ = (static_cast<size_t>(page_end_ - page_) * page_lines_ + pieces - 1) / std::max<size_t>(1, pieces);
    if (page_ < page_end_) p_ = c.k_row(layer, kvh, page_ * P_);  // a page: [K rows][V rows]
  }
  void step() {
    for (size_t k = 0; p_ != nullptr && k < per_step_;) {
      const size_t m = std::min(per_step_ - k, page_lines_ - line_);
      prefetch_rows_l2(p_ + line_ * 64, m * 64);
      k += m;
      line_ += m;
      if (line_ == page_lines_) {
        line_ = 0;
        p_ = ++page_ < page_end_ ? c_->k_row(layer_, kvh_, page_ * P_) : nullptr;
      }
    }
  }

 private:
  const KvCache* c_ = nullptr;
  int layer_ = 0, kvh_ = 0, P_ = 1;
  int32_t page_ = 0, page_end_ = 0;
  size_t page_lines_ = 0, per_step_ = 0, line_ = 0;
  const uint8_t* p_ = nullptr;  // the current page (null: done)
};

// llama.cpp numerics (AttnShape::f16_compat): probabilities as ggml's soft_max computes them
// (expf, sum in double, times 1/sum), then rounded to F16 for the product with V. The row's
// max m must be finite. Returns the sum the probabilities are normalised by (1).
float compat_probs(float* row, int32_t n, float m) {
  double sum = 0;
  for (int32_t j = 0; j < n; ++j) sum += (row[j] = std::exp(row[j] - m));
  const float inv = static_cast<float>(1.0 / sum);
  for (int32_t j = 0; j < n; ++j) row[j] = round_f16(row[j] * inv);
  return 1.0f;
}

// Rows per block of a decode task's one-pass loop (below). A page is [K rows][V rows] and the
// pages of a head come in runs (a prefill chunk's pages are allocated together). With one page
// per block, keys then values page by page, memory is read front to back, each half's product
// asking for the next half (the page's values during Q.K, the next page's keys during P.V);
// the whole task as one block keeps the old two passes' compute (one softmax call per query
// per task) but reads the key halves a page stride apart. F16 and F32 pages stream faster page by
// page; quantized rows cost more per row (the conversion), so for them the per-page softmax and
// calls weigh more than the DRAM stream and the whole range is one block
// (docs/benchmarks/issue25-server-step-2-2026-11-29.md, "Decode attention: keys and values page by page").
// llama.cpp numerics (compat) also take the whole range: they round normalised probabilities,
// which needs the row's max before any exponential.
int32_t softmax_block_rows(DType t, bool compat, int page_tokens, int32_t task_rows) {
  return !compat && (t == DType::F16 || t == DType::F32) ? page_tokens : task_rows;
}

// The output rows and log-sum-exp of KV head kvh's queries of job jb from its only partial: acc
// [nq][D], ml [nq][2] = (m, l). The merge's arithmetic for one partial (o = 0 + 1 * acc, then
// scaled by 1 / l in double rounded to float; lse = m + log l), so the result is the same bits.
void finish_head(const AttnJob& jb, int kvh, int G, int H, int D, const float* acc, const float* ml) {
  for (int t = 0; t < jb.n_tok; ++t)
    for (int g = 0; g < G; ++g) {
      const int qh = kvh * G + g, qi = t * G + g;
      float* o = jb.out + (static_cast<size_t>(t) * H + qh) * D;
      const float m = ml[2 * qi];
      std::fill(o, o + D, 0.0f);
      if (m != kNegInf) {
        kernels::axpy_f32(1.0f, acc + static_cast<size_t>(qi) * D, o, D);
        kernels::scale_f32(o, static_cast<float>(1.0 / static_cast<double>(ml[2 * qi + 1])), D);
      }
      if (jb.lse)
        jb.lse[static_cast<size_t>(t) * H + qh] =
            m == kNegInf ? kNegInf : m + static_cast<float>(std::log(static_cast<double>(ml[2 * qi + 1])));
    }
}

// ---------------------------------------------------------------------------------------------
// Decode path, over one or more sequences (jobs) at once: tasks are (job, kv head, key range);
// each computes, for every query of its job's batch and every query head of the group, a partial
// (max m, sum l, acc[D]) that is merged afterwards, in blocks of pages with the softmax online
// (softmax_block_rows), each K / V row read once for the whole group (attn_rows.h). The tasks of every job go to the threads from one
// counter (whichever is free takes the next), so a batched decode step costs one parallel
// section per layer instead of one per sequence, and a thread that finishes early keeps working.
// Which thread runs a task does not change its result, and the merge order is fixed: the output
// is the same for any thread count and batch.
void attention_decode(std::span<const AttnJob> jobs, int layer, const AttnShape& s, ThreadPool& pool,
                      AttnScratch& scr) {
  const int H = s.n_head, Hkv = s.n_head_kv, D = s.head_dim, G = H / Hkv;
  struct Task {
    int job, kvh;
    int32_t b, e;  // slots [b, e) of the head
    size_t off;    // the task's partial in scr.partial: acc [nq][D], then (m, l) [nq][2]
    bool whole;    // the head's only task: it writes the head's output itself (no merge)
  };
  std::vector<Task> tasks;
  std::vector<size_t> first_task(jobs.size() + 1);  // tasks of job j: [first_task[j], first_task[j + 1])
  std::vector<size_t> to_merge;                      // jobs with a head split over several tasks
  const int32_t window = s.window(layer);
  size_t partial_floats = 0;
  int32_t range = kDecodeRange;
  int max_nq = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const AttnJob& jb = jobs[j];
    const KvCache& c = *jb.cache;
    const int nq = jb.n_tok * G;  // queries per task: [t][g]
    max_nq = std::max(max_nq, nq);
    first_task[j] = tasks.size();
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      // Slots [W, L): visible to some query of the batch (W: the first query's window start).
      const int32_t L = visible_prefix(c.head(layer, kvh), jb.qpos[jb.n_tok - 1]);
      const int32_t W = std::min(L, window_start(c.head(layer, kvh), jb.qpos[0], window));
      // Compat mode rounds normalised probabilities, which needs the whole row in one task.
      const int32_t n_split = s.f16_compat ? 1 : decode_splits(L - W);
      if (n_split > 1 && (to_merge.empty() || to_merge.back() != j)) to_merge.push_back(j);
      for (int32_t sp = 0; sp < n_split; ++sp) {
        auto [b, e] = ThreadPool::split(L - W, sp, n_split);
        tasks.push_back({static_cast<int>(j), kvh, W + static_cast<int32_t>(b), W + static_cast<int32_t>(e), partial_floats,
                         n_split == 1});
        partial_floats += static_cast<size_t>(nq) * (D + 2);
        range = std::max(range, static_cast<int32_t>(e - b));
      }
    }
  }
  first_task[jobs.size()] = tasks.size();
  scr.partial.resize(std::max<size_t>(1, partial_floats));
  const int nth = pool.size();
  if (static_cast<int>(scr.per_thread.size()) < nth) scr.per_thread.resize(nth);
  // Per thread: scores [nq][range], queries [nq][D], queries prepared for Q8_0 rows
  // [nq][kQ8PreparedQueryBytes].
  constexpr size_t kPrepFloats = kernels::kQ8PreparedQueryBytes / sizeof(float);
  for (int t = 0; t < nth; ++t)
    scr.per_thread[t].resize(static_cast<size_t>(max_nq) * (range + 1) + static_cast<size_t>(max_nq) * D +
                             static_cast<size_t>(max_nq) * kPrepFloats);

  std::atomic<size_t> next{0};
  pool.run([&](int ith, int) {
    float* sc = scr.per_thread[ith].data();                // [nq][range] scores, then probabilities
    float* qc = sc + static_cast<size_t>(max_nq) * range;  // [nq][D] queries (F16-rounded in compat mode)
    // [nq][kQ8PreparedQueryBytes] the queries rounded to int16 for Q8_0 rows
    uint8_t* qp = reinterpret_cast<uint8_t*>(qc + static_cast<size_t>(max_nq) * D);
    // Each thread takes its next task before running the current one (NextTaskPrefetch).
    size_t tn = next.fetch_add(1, std::memory_order_relaxed);
    for (size_t ti; (ti = tn) < tasks.size();) {
      tn = next.fetch_add(1, std::memory_order_relaxed);
      const Task& tk = tasks[ti];
      const AttnJob& jb = jobs[static_cast<size_t>(tk.job)];
      const KvCache& c = *jb.cache;
      const int P = c.layout().page_tokens;
      const DType kt = c.layout().dtype;
      const int n_tok = jb.n_tok, nq = n_tok * G;
      const HeadCache& h = c.head(layer, tk.kvh);
      // The job's new rows in this task's key range, written before anything reads them: the new
      // slots are the head's last n_tok (every query sees them, so some task's range holds each).
      if (jb.writes) {
        const int32_t first_new = h.len() - n_tok;
        for (int32_t sl = std::max(tk.b, first_new); sl < tk.e; ++sl) {
          const size_t o = (static_cast<size_t>(sl - first_new) * Hkv + tk.kvh) * D;
          jb.writes->write_slot(layer, tk.kvh, sl, jb.k_new + o, jb.v_new + o);
        }
      }
      float* acc = scr.partial.data() + tk.off;       // [nq][D]
      float* ml = acc + static_cast<size_t>(nq) * D;  // [nq][2]
      for (int t = 0; t < n_tok; ++t)
        for (int g = 0; g < G; ++g) {
          const float* src = jb.q + (static_cast<size_t>(t) * H + tk.kvh * G + g) * D;
          float* dst = qc + static_cast<size_t>(t * G + g) * D;
          for (int d = 0; d < D; ++d) dst[d] = s.f16_compat ? round_f16(src[d]) : src[d];
        }
      // Q8_0 pages: the queries rounded to int16 once for the whole key range, where the kernels
      // have that path (kernels::prepare_queries_q8_0; else, and in compat mode, float queries).
      const bool prepared =
          kt == DType::Q8_0 && !s.f16_compat && kernels::prepare_queries_q8_0(qc, nq, D, s.scale, qp);
      // Slots the task's queries see, relative to tk.b: [first[t], vis[t]).
      static_assert(kAttnPrefillMinTokens <= 16);  // the decode path's tokens per job: below it
      int32_t vis[kAttnPrefillMinTokens], first[kAttnPrefillMinTokens];
      for (int t = 0; t < n_tok; ++t) {
        vis[t] = visible_prefix(h, jb.qpos[t]) - tk.b;
        first[t] = window_start(h, jb.qpos[t], window) - tk.b;
      }
      const size_t rb = c.layout().row_bytes();
      // Blocks of whole pages, the softmax online across blocks (flash-decoding's split
      // kernel): m and l follow the block maxima, acc is rescaled when m grows. Within a block,
      // Q.K page by page, each page's values asked for while its keys are used, then the
      // block's softmax piece, then P.V; see softmax_block_rows for the block size.
      for (int qi = 0; qi < nq; ++qi) {
        ml[2 * qi] = kNegInf;
        ml[2 * qi + 1] = 0.0f;
      }
      std::fill(acc, acc + static_cast<size_t>(nq) * D, 0.0f);
      const int32_t blk = softmax_block_rows(kt, s.f16_compat, P, tk.e - tk.b);
      // The P.V pass's pieces: with the int16 weights where the int16 queries are (the tables
      // and head dims that have one have both), whole pages.
      const bool pv_i16 = prepared && kernels::has_pv_rows_q8_0_i16(D);
      const int32_t pv_piece = pv_i16 ? kPieceRowsI16 : kPieceRows;
      // One block for the whole task: the next task's pages come during its Q.K and P.V passes.
      NextTaskPrefetch next_pages;
      if (blk >= tk.e - tk.b && tn < tasks.size()) {
        const Task& nt = tasks[tn];
        next_pages = NextTaskPrefetch(*jobs[static_cast<size_t>(nt.job)].cache, layer, nt.kvh, nt.b, nt.e,
                                      std::max<size_t>(1, static_cast<size_t>((tk.e - tk.b) / pv_piece +
                                                                              (tk.e - tk.b) / kPieceRows)));
      }
      for (int32_t b0 = tk.b; b0 < tk.e;) {
        // A block: whole pages, up to blk rows.
        int32_t b1 = std::min(tk.e, (b0 / P + 1) * P);
        while (b1 < tk.e && std::min(tk.e, b1 + P) - b0 <= blk) b1 = std::min(tk.e, b1 + P);
        const int32_t nb = b1 - b0, off = b0 - tk.b;
        // Q.K page by page, each page's values asked for while its keys are used.
        for (int32_t s0 = b0; s0 < b1;) {
          const int32_t s1 = std::min(b1, (s0 / P + 1) * P);
          const uint8_t* krow = c.k_row(layer, tk.kvh, s0);
          in_pieces(s1 - s0, c.v_row(layer, tk.kvh, s0), s1 - s0, rb, kPieceRows, [&](int32_t r, int32_t m) {
            next_pages.step();
            if (prepared)
              kernels::qk_rows_q8_0_prepared(qp, nq, krow + r * rb, m, D, sc + (s0 - tk.b) + r, range);
            else
              qk_rows(kt, qc, nq, krow + r * rb, m, D, s.scale, sc + (s0 - tk.b) + r, range);
          });
          s0 = s1;
        }
        bool any = false;  // some query sees a slot of the block
        for (int t = 0; t < n_tok; ++t) {
          const int32_t lo = std::clamp(first[t] - off, 0, nb), hi = std::clamp(vis[t] - off, lo, nb);
          for (int g = 0; g < G; ++g) {
            const int qi = t * G + g;
            float* row = sc + static_cast<size_t>(qi) * range + off;  // [nb] this block's scores
            softcap_row(row, nb, s);
            std::fill(row, row + lo, kNegInf);
            std::fill(row + hi, row + nb, kNegInf);
            const float pm = lo < hi ? kernels::max_f32(row + lo, hi - lo) : kNegInf;
            if (pm == kNegInf) {
              std::fill(row, row + nb, 0.0f);
              continue;
            }
            any = true;
            float& m = ml[2 * qi];
            float& l = ml[2 * qi + 1];
            if (pm > m) {
              if (m != kNegInf) {
                const float r = std::exp(m - pm);
                kernels::scale_f32(acc + static_cast<size_t>(qi) * D, r, D);
                l *= r;
              }
              m = pm;
            }
            // Compat: one block per task (softmax_block_rows), so m is the row's max here.
            l += s.f16_compat ? compat_probs(row, nb, m) : kernels::exp_sub_sum(row, nb, m);
          }
        }
        // P.V page by page (the values are in the cache); the last page asks for the next
        // block's first keys.
        for (int32_t s0 = b0; s0 < b1;) {
          const int32_t s1 = std::min(b1, (s0 / P + 1) * P);
          const uint8_t* vrow = c.v_row(layer, tk.kvh, s0);
          const int32_t n_next = s1 == b1 && b1 < tk.e ? std::min(tk.e - b1, P) : 0;
          if (any)
            in_pieces(s1 - s0, n_next > 0 ? c.k_row(layer, tk.kvh, b1) : nullptr, n_next, rb, pv_piece,
                      [&](int32_t r, int32_t m) {
              next_pages.step();
              if (pv_i16)
                kernels::pv_rows_q8_0_i16(sc + (s0 - tk.b) + r, nq, range, vrow + r * rb, m, D, acc);
              else
                pv_rows(kt, sc + (s0 - tk.b) + r, nq, range, vrow + r * rb, m, D, acc);
            });
          s0 = s1;
        }
        b0 = b1;
      }
      // The head's only task: its output and log-sum-exp, as the merge below computes them from a
      // single partial (weight exp(0) = 1), without the merge's parallel section (~5 us a layer
      // for a 16-sequence step).
      if (tk.whole) finish_head(jb, tk.kvh, G, H, D, acc, ml);
    }
  });

  // Merge the partials of each job whose heads were split, per (token, query head), in task order.
  auto merge = [&](size_t j) {
    const AttnJob& jb = jobs[j];
    const int nq = jb.n_tok * G;
    for (int t = 0; t < jb.n_tok; ++t) {
      for (int qh = 0; qh < H; ++qh) {
        const int kvh = qh / G, g = qh % G, qi = t * G + g;
        bool whole = false;  // written by its task
        for (size_t ti = first_task[j]; ti < first_task[j + 1]; ++ti) whole |= tasks[ti].kvh == kvh && tasks[ti].whole;
        if (whole) continue;
        float m = kNegInf;
        for (size_t ti = first_task[j]; ti < first_task[j + 1]; ++ti)
          if (tasks[ti].kvh == kvh) m = std::max(m, scr.partial[tasks[ti].off + static_cast<size_t>(nq) * D + 2 * qi]);
        float* o = jb.out + (static_cast<size_t>(t) * H + qh) * D;
        std::fill(o, o + D, 0.0f);
        double l = 0;
        if (m != kNegInf) {
          for (size_t ti = first_task[j]; ti < first_task[j + 1]; ++ti) {
            if (tasks[ti].kvh != kvh) continue;
            const float* acc = scr.partial.data() + tasks[ti].off;
            const float* ml = acc + static_cast<size_t>(nq) * D;
            if (ml[2 * qi] == kNegInf) continue;
            const float w = std::exp(ml[2 * qi] - m);
            l += static_cast<double>(ml[2 * qi + 1]) * w;
            kernels::axpy_f32(w, acc + static_cast<size_t>(qi) * D, o, D);
          }
          kernels::scale_f32(o, static_cast<float>(1.0 / l), D);
        }
        if (jb.lse) jb.lse[static_cast<size_t>(t) * H + qh] = m == kNegInf ? kNegInf : m + static_cast<float>(std::log(l));
      }
    }
  };
  if (to_merge.size() == 1) {
    merge(to_merge[0]);
  } else if (to_merge.size() > 1) {
    pool.parallel_for(static_cast<int64_t>(to_merge.size()), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) merge(to_merge[static_cast<size_t>(i)]);
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Prefill path: per (KV head, query block) task, the queries of every head of the GQA group
// stacked as one matrix [G x block rows][D] (each key/value block is read once for the whole
// group); keys in blocks of kBk, online softmax. The two products per block are the kernel
// table's attention tiles (qk_panels, pv_tile; ops.h), which take keys transposed into panels of
// 16 and values as rows (faster than OpenBLAS's sgemm on these shapes: docs/benchmarks/prefill-attention.md).
// Each task reads a key block from its pages
// and converts it into a per-thread tile just before its products (load_key_block): the pages
// are read as they are stored (F32, F16, Q8_0, Q4_0) and nothing of the cache's size is ever
// written out as f32 — the scratch is a block of kBk keys per thread, whatever the context. The
// price is that a block is converted once per query block that sees it instead of once per layer:
// per key, D conversions beside 4 x rows x D flops of products with rows = G x bq ~ 256.

// Keys [s0, s0 + n) of head kvh (n <= the tile's capacity) from their pages into a thread's tile:
// keys as panels Kt [ceil(n / 16)][D][16] and values as rows V [n][D] (f32); with BF16 products
// keys as BF16 panels Kb (dims in pairs) and values as BF16 key pairs Vb [ceil(n / 2)][D][2], V
// then only their f32 staging. k16: [16][D] staging of one panel's keys.
void load_key_block(const KvCache& c, int layer, int kvh, int32_t s0, int32_t n, int D, float* k16, float* Kt,
                    float* V, uint16_t* Kb, uint16_t* Vb) {
  for (int32_t p = 0; p < n; p += kernels::kKeyPanel) {
    const int32_t m = std::min<int32_t>(kernels::kKeyPanel, n - p);
    c.gather(layer, kvh, s0 + p, s0 + p + m, k16, nullptr);
    if (Kb)
      kernels::pack_key_panels_bf16(k16, m, D, Kb + static_cast<size_t>(p) * D);
    else
      kernels::pack_key_panels(k16, m, D, Kt + static_cast<size_t>(p) * D);
  }
  c.gather(layer, kvh, s0, s0 + n, nullptr, V);
  if (Vb) kernels::pack_value_pairs_bf16(V, n, D, Vb);
}

void attention_prefill(const KvCache& c, int layer, const AttnShape& s, const float* q, const int32_t* qpos,
                       int n_tok, float* out, float* lse, ThreadPool& pool, AttnScratch& scr) {
  const int H = s.n_head, Hkv = s.n_head_kv, D = s.head_dim, G = H / Hkv;
  // Every KV head's visible slots: [W, W + L) (W: the first query's window start, 0 without a
  // window); Lmax: the largest L.
  const int32_t window = s.window(layer);
  std::vector<int32_t> W(static_cast<size_t>(Hkv));
  int32_t Lmax = 0;
  for (int kvh = 0; kvh < Hkv; ++kvh) {
    const int32_t end = visible_prefix(c.head(layer, kvh), qpos[n_tok - 1]);
    W[kvh] = std::min(end, window_start(c.head(layer, kvh), qpos[0], window));
    Lmax = std::max(Lmax, end - W[kvh]);
  }
  const bool bf16 = s.bf16_active();

  // Query block: about kPrefillRows rows of the stacked group matrix (64 tokens at GQA 4, 85 at 3).
  const int bq = std::clamp(kPrefillRows / G, 16, 128);
  const int n_qb = (n_tok + bq - 1) / bq;
  const int n_tasks = Hkv * n_qb;
  const int nth = pool.size();
  if (static_cast<int>(scr.per_thread.size()) < nth) scr.per_thread.resize(nth);
  // Compat mode needs each row's full normalisation before rounding: one key block spans all keys
  // (+ 16: a block starts at a panel boundary, up to 15 keys before the first visible one).
  const int32_t bk = s.f16_compat ? std::max<int32_t>(kBk, (Lmax + 2 * kernels::kKeyPanel - 1) / kernels::kKeyPanel *
                                                                kernels::kKeyPanel)
                                  : kBk;
  const size_t R = static_cast<size_t>(G) * bq;  // rows of a task's stacked matrix
  // Sizes of the per-thread pieces below, each rounded up to 32 elements (64-byte alignment).
  auto al = [](size_t n) { return (n + 31) / 32 * 32; };
  const size_t kt_n = al(kernels::key_panels_floats(bk, D));      // a key block's panels
  const size_t v_n = al(static_cast<size_t>(bk + 1) / 2 * 2 * D);  // its values (rows or BF16 pairs)
  const size_t rd = al(R * D), rbk = al(R * bk), r1 = al(R);
  const size_t per = 2 * rd + rbk + 2 * r1 + (bf16 ? 0 : kt_n) + v_n + kernels::kKeyPanel * D;
  for (int t = 0; t < nth; ++t) scr.per_thread[t].resize(per);
  if (bf16) {
    if (static_cast<int>(scr.per_thread16.size()) < nth) scr.per_thread16.resize(nth);
    for (int t = 0; t < nth; ++t) scr.per_thread16[t].resize(rd + rbk + kt_n + v_n);
  }

  // Tasks from one counter, the query blocks that see the most keys (the last ones) first.
  std::atomic<int> next{0};
  pool.run([&](int ith, int) {
    float* Qb = scr.per_thread[ith].data();  // [G][bq][D] stacked queries of the group
    float* Ob = Qb + rd;                     // [G][bq][D]
    float* S = Ob + rd;                      // [G][bq][bk] scores of a key block
    float* M = S + rbk;                      // [G][bq] running max
    float* Ls = M + r1;                      // [G][bq] running sum
    float* Kt = Ls + r1;                     // [bk / 16][D][16] the key block as panels (f32 products)
    float* Vt = Kt + (bf16 ? 0 : kt_n);      // [bk][D] its values (with BF16 products their staging)
    float* k16 = Vt + v_n;                   // [16][D] one panel's keys as rows
    uint16_t* Qh = bf16 ? scr.per_thread16[ith].data() : nullptr;  // [G][bq][D] Qb in BF16
    uint16_t* Ph = bf16 ? Qh + rd : nullptr;                        // [G][bq][bk] probabilities in BF16
    uint16_t* Kb = bf16 ? Ph + rbk : nullptr;                       // [bk / 16][D / 2][16][2] BF16 key panels
    uint16_t* Vb = bf16 ? Kb + kt_n : nullptr;                      // [bk / 2][D][2] BF16 value pairs
    for (int task; (task = next.fetch_add(1, std::memory_order_relaxed)) < n_tasks;) {
      const int kvh = task % Hkv, qb = n_qb - 1 - task / Hkv;
      const int t0 = qb * bq, t1 = std::min(n_tok, t0 + bq), nb = t1 - t0, rows = G * nb;
      const HeadCache& h = c.head(layer, kvh);
      // Row r = g * nb + i: query head kvh * G + g of token t0 + i.
      for (int g = 0; g < G; ++g)
        for (int i = 0; i < nb; ++i) {
          const float* src = q + (static_cast<size_t>(t0 + i) * H + kvh * G + g) * D;
          float* dst = Qb + static_cast<size_t>(g * nb + i) * D;
          // Compat mode scales the product, as ggml does, not the query.
          for (int d = 0; d < D; ++d) dst[d] = s.f16_compat ? round_f16(src[d]) : src[d] * s.scale;
        }
      // BF16 products: the scaled queries rounded once per task (for D = 64 the scale is a power
      // of two, so this is the rounded query times the scale; for D = 128 it rounds q / sqrt(D)).
      if (bf16) kernels::to_bf16(Qb, Qh, static_cast<int64_t>(rows) * D);
      std::fill(M, M + rows, kNegInf);
      std::fill(Ls, Ls + rows, 0.0f);
      std::fill(Ob, Ob + static_cast<size_t>(rows) * D, 0.0f);
      // Indices into the gathered rows (slot - W): keys [kbeg, kend) are visible to some query of
      // the block, [kall, kfull) to every one of them.
      const int32_t w0 = W[kvh];
      const int32_t kend = visible_prefix(h, qpos[t1 - 1]) - w0;
      const int32_t kfull = visible_prefix(h, qpos[t0]) - w0;
      const int32_t kbeg = std::min(kend, window_start(h, qpos[t0], window) - w0);
      const int32_t kall = window_start(h, qpos[t1 - 1], window) - w0;
      // Blocks start at a panel boundary; keys before kbeg in the first one are outside every
      // query's window, so the mask hides them (k0 < kall).
      for (int32_t k0 = kbeg / kernels::kKeyPanel * kernels::kKeyPanel; k0 < kend; k0 += bk) {
        const int32_t nk = std::min<int32_t>(bk, kend - k0);
        const int np = (nk + kernels::kKeyPanel - 1) / kernels::kKeyPanel;
        load_key_block(c, layer, kvh, w0 + k0, nk, D, k16, Kt, Vt, Kb, Vb);
        if (bf16)
          kernels::qk_panels_bf16(Qh, rows, D, Kb, np, S, bk);
        else
          kernels::qk_panels(Qb, rows, D, Kt, np, S, bk);
        const bool needs_mask = k0 + nk > kfull || k0 < kall;
        for (int r = 0; r < rows; ++r) {
          float* row = S + static_cast<size_t>(r) * bk;
          if (s.f16_compat) kernels::scale_f32(row, s.scale, nk);
          softcap_row(row, nk, s);
          if (needs_mask) {
            const int32_t qp = qpos[t0 + r % nb];
            // Without a window only keys past kfull can be hidden (the causal diagonal).
            for (int32_t j = window > 0 ? 0 : std::max<int32_t>(0, kfull - k0); j < nk; ++j) {
              const int32_t kp = h.pos[static_cast<size_t>(w0 + k0 + j)];
              if (kp > qp || (window > 0 && kp <= qp - window)) row[j] = kNegInf;
            }
          }
          const float bm = kernels::max_f32(row, nk);
          const float mnew = std::max(M[r], bm);
          if (mnew == kNegInf) {  // nothing visible yet for this query
            std::fill(row, row + nk, 0.0f);
            if (bf16) std::fill(Ph + static_cast<size_t>(r) * bk, Ph + static_cast<size_t>(r) * bk + nk, uint16_t{0});
            continue;
          }
          if (s.f16_compat) {  // one key block spans every visible key
            Ls[r] = compat_probs(row, nk, mnew);
            M[r] = mnew;
            continue;
          }
          const float alpha = M[r] == kNegInf ? 0.0f : std::exp(M[r] - mnew);
          if (alpha != 1.0f) kernels::scale_f32(Ob + static_cast<size_t>(r) * D, alpha, D);
          // BF16: the normaliser Ls sums the f32 probabilities; P.V takes them rounded (Ph).
          Ls[r] = Ls[r] * alpha + (bf16 ? kernels::exp_sub_sum_bf16(row, Ph + static_cast<size_t>(r) * bk, nk, mnew)
                                        : kernels::exp_sub_sum(row, nk, mnew));
          M[r] = mnew;
        }
        if (bf16) {
          kernels::pv_tile_bf16(Ph, rows, bk, Vb, nk, D, Ob);
        } else {
          kernels::pv_tile(S, rows, bk, Vt, nk, D, Ob);
        }
      }
      for (int r = 0; r < rows; ++r) {
        const int g = r / nb, i = r % nb;
        const size_t o = static_cast<size_t>(t0 + i) * H + kvh * G + g;
        float* dst = out + o * D;
        const float inv = Ls[r] > 0 ? 1.0f / Ls[r] : 0.0f;
        for (int d = 0; d < D; ++d) dst[d] = Ob[static_cast<size_t>(r) * D + d] * inv;
        if (lse) lse[o] = Ls[r] > 0 ? M[r] + std::log(Ls[r]) : kNegInf;
      }
    }
  });
}

}  // namespace

void attention(const KvCache& c, int layer, const AttnShape& s, const float* q, const int32_t* qpos, int n_tok,
               float* out, float* lse, ThreadPool& pool, AttnScratch& scratch) {
  KVS_ASSERT(s.n_head % s.n_head_kv == 0 && s.n_head_kv == c.layout().n_head_kv && s.head_dim == c.layout().head_dim);
  if (n_tok <= 0) return;
  if (n_tok < kAttnPrefillMinTokens) {
    const AttnJob job{&c, q, qpos, n_tok, out, lse};
    attention_decode(std::span<const AttnJob>(&job, 1), layer, s, pool, scratch);
  } else {
    attention_prefill(c, layer, s, q, qpos, n_tok, out, lse, pool, scratch);
  }
}

void attention_batch(std::span<const AttnJob> jobs, int layer, const AttnShape& s, ThreadPool& pool,
                     AttnScratch& scratch) {
  KVS_ASSERT(s.n_head % s.n_head_kv == 0);
  std::vector<AttnJob> decode;
  for (const AttnJob& j : jobs) {
    KVS_ASSERT(j.cache && s.n_head_kv == j.cache->layout().n_head_kv && s.head_dim == j.cache->layout().head_dim);
    KVS_ASSERT(!j.writes || (j.writes == j.cache && j.k_new && j.v_new));
    if (j.n_tok <= 0) continue;
    if (j.n_tok < kAttnPrefillMinTokens) {
      decode.push_back(j);
      continue;
    }
    if (j.writes) j.writes->write_slots(layer, j.n_tok, j.k_new, j.v_new);  // the prefill path reads every slot
    attention_prefill(*j.cache, layer, s, j.q, j.qpos, j.n_tok, j.out, j.lse, pool, scratch);
  }
  if (!decode.empty()) attention_decode(decode, layer, s, pool, scratch);
}

void attention_ref(const KvCache& c, int layer, const AttnShape& s, const float* q, const int32_t* qpos, int n_tok,
                   float* out, float* lse) {
  const int H = s.n_head, D = s.head_dim, G = H / s.n_head_kv;
  std::vector<float> k(static_cast<size_t>(D)), v(static_cast<size_t>(D));
  for (int t = 0; t < n_tok; ++t) {
    for (int qh = 0; qh < H; ++qh) {
      const int kvh = qh / G;
      const HeadCache& h = c.head(layer, kvh);
      const float* qv = q + (static_cast<size_t>(t) * H + qh) * D;
      std::vector<double> sc;
      std::vector<int32_t> slots;
      double m = -INFINITY;
      const int32_t window = s.window(layer);
      for (int32_t j = 0; j < h.len(); ++j) {
        const int32_t kp = h.pos[static_cast<size_t>(j)];
        if (kp > qpos[t] || (window > 0 && kp <= qpos[t] - window)) continue;
        c.read_k(layer, kvh, j, k.data());
        double d = 0;
        for (int i = 0; i < D; ++i) d += static_cast<double>(qv[i]) * k[i];
        d *= s.scale;
        if (s.softcap > 0) d = s.softcap * std::tanh(d / s.softcap);
        sc.push_back(d);
        slots.push_back(j);
        m = std::max(m, d);
      }
      std::vector<double> acc(static_cast<size_t>(D), 0.0);
      double l = 0;
      for (size_t j = 0; j < sc.size(); ++j) {
        const double p = std::exp(sc[j] - m);
        l += p;
        c.read_v(layer, kvh, slots[j], v.data());
        for (int i = 0; i < D; ++i) acc[i] += p * v[i];
      }
      float* o = out + (static_cast<size_t>(t) * H + qh) * D;
      for (int i = 0; i < D; ++i) o[i] = l > 0 ? static_cast<float>(acc[i] / l) : 0.0f;
      if (lse) lse[static_cast<size_t>(t) * H + qh] = l > 0 ? static_cast<float>(m + std::log(l)) : -INFINITY;
    }
  }
}

}  // namespace kvs
