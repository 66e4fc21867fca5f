#include "press/stats.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/timer.h"
#include "kernels/ops.h"
#include "kvcache/attention_probs.h"

namespace kvs {

StatsRequest& StatsRequest::operator|=(const StatsRequest& o) {
  col_sum |= o.col_sum;
  col_sum_query_heads |= o.col_sum_query_heads;
  col_max |= o.col_max;
  window = std::max(window, o.window);
  pre_rope_keys |= o.pre_rope_keys;
  if (o.query_gram != QueryGram::Off) {
    if (query_gram != QueryGram::Off && query_gram != o.query_gram)
      fail("two presses ask for query Gram statistics before and after RoPE; one prefill cannot collect both");
    query_gram = o.query_gram;
  }
  attn_input_moments |= o.attn_input_moments;
  if (o.chunk_attention > 0) {
    if (chunk_attention > 0 && chunk_attention != o.chunk_attention)
      fail("two presses ask for chunked attention with different chunk sizes ({} and {}); one prefill cannot collect both",
           chunk_attention, o.chunk_attention);
    chunk_attention = o.chunk_attention;
  }
  return *this;
}

bool StatsRequest::covers(const StatsRequest& need) const {
  return (col_sum || !need.col_sum) && (col_sum_query_heads || !need.col_sum_query_heads) &&
         (col_max || !need.col_max) && window >= need.window &&
         (pre_rope_keys || !need.pre_rope_keys) &&
         (need.query_gram == QueryGram::Off || need.query_gram == query_gram) &&
         (attn_input_moments || !need.attn_input_moments) &&
         (need.chunk_attention == 0 || need.chunk_attention == chunk_attention);
}

StatsCollector::StatsCollector(const KvLayout& layout, const AttnShape& shape, int n_embd, const StatsRequest& req,
                               ThreadPool& pool)
    : layout_(layout),
      shape_(shape),
      n_embd_(n_embd),
      req_(req),
      pool_(&pool),
      heads_(static_cast<size_t>(layout.n_heads_total())),
      windows_(static_cast<size_t>(layout.n_layer)),
      n_queries_(static_cast<size_t>(layout.n_layer), 0),
      attn_in_(static_cast<size_t>(layout.n_layer)),
      chunks_(static_cast<size_t>(layout.n_layer)) {
  if (req.chunk_attention < 0) fail("chunked attention: chunk size {} (expected > 0, or 0 for none)", req.chunk_attention);
  // Without a hidden width (synthetic caches in tests) the moments stay empty; a press reading
  // them then says there are none.
  if (req.attn_input_moments && n_embd > 0)
    for (auto& s : attn_in_) s = math::ChannelStats(n_embd);
  if (req.query_gram != QueryGram::Off) {
    const size_t D = static_cast<size_t>(shape.head_dim);
    grams_.resize(static_cast<size_t>(layout.n_layer) * shape.n_head);
    for (auto& g : grams_) {
      g.gram.assign(D * D, 0.0);
      g.sum.assign(D, 0.0);
    }
  }
}

std::unique_ptr<StatsCollector> StatsCollector::clone_subset(const StatsRequest& req) const {
  KVS_ASSERT(req_.covers(req));
  auto c = std::make_unique<StatsCollector>(*this);
  c->req_ = req;
  for (auto& h : c->heads_) {
    if (!req.col_sum) h.col_sum = {};
    if (!req.col_sum_query_heads) h.col_sum_qh = {};
    if (!req.col_max) h.col_max = {};
    if (!req.pre_rope_keys) h.k_pre = {};
    if (req.chunk_attention == 0) h.chunk_attn = {};
  }
  if (req.chunk_attention == 0)
    for (auto& b : c->chunks_) b = {};
  for (auto& w : c->windows_) {
    const int drop = std::max(0, w.size() - req.window);
    w.pos.erase(w.pos.begin(), w.pos.begin() + drop);
    w.q.erase(w.q.begin(), w.q.begin() + static_cast<std::ptrdiff_t>(drop) * shape_.n_head * shape_.head_dim);
  }
  if (req.query_gram == QueryGram::Off) c->grams_ = {};
  if (!req.attn_input_moments)
    for (auto& s : c->attn_in_) s = {};
  c->seconds_ = 0;
  return c;
}

std::vector<double> StatsCollector::Gram::covariance() const {
  const size_t D = sum.size();
  std::vector<double> c(D * D, 0.0);
  if (count == 0) return c;
  const double n = static_cast<double>(count);
  for (size_t i = 0; i < D; ++i)
    for (size_t j = 0; j < D; ++j) c[i * D + j] = gram[i * D + j] / n - (sum[i] / n) * (sum[j] / n);
  return c;
}

double StatsCollector::attention_variance(int layer, int kvh) const {
  const auto& cs = col_sum(layer, kvh);
  const int64_t nq = n_queries(layer);
  if (cs.empty() || nq == 0) return 0.0;
  double m = 0, m2 = 0;
  for (float x : cs) {
    const double a = static_cast<double>(x) / static_cast<double>(nq);
    m += a;
    m2 += a * a;
  }
  m /= static_cast<double>(cs.size());
  return m2 / static_cast<double>(cs.size()) - m * m;
}

void StatsCollector::on_layer(const LayerView& v) {
  Timer timer;
  collect(v);
  seconds_ += timer.seconds();
}

void StatsCollector::collect(const LayerView& v) {
  const int H = shape_.n_head, Hkv = shape_.n_head_kv, D = shape_.head_dim;
  const KvCache& c = *v.cache;
  n_queries_[static_cast<size_t>(v.layer)] += v.n_tok;
  // A sliding-window layer beside global ones (AttnShape::press_skips): no press chooses there
  // (compress() hides it from allocators), so nothing is collected per slot; its per-slot arrays
  // are kept at the head lengths, zero, for scorers that read every head. The statistics of
  // queries (Gram matrices, attention inputs, the window of queries) are collected as elsewhere.
  // Slots dropped by a window since the last call leave the arrays first (sync_head).
  const bool local = shape_.press_skips(v.layer);
  for (int kvh = 0; kvh < Hkv; ++kvh) sync_head(heads_[idx(v.layer, kvh)], c.head(v.layer, kvh));
  if (local) {
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      Head& h = heads_[idx(v.layer, kvh)];
      const size_t len = static_cast<size_t>(c.len(v.layer, kvh));
      if (req_.col_sum) h.col_sum.assign(len, 0.0f);
      if (req_.col_sum_query_heads) h.col_sum_qh.assign(len * static_cast<size_t>(H / Hkv), 0.0f);
      if (req_.col_max) h.col_max.assign(len, 0.0f);
      if (req_.chunk_attention > 0) h.chunk_attn.assign(len, 0.0f);
      if (req_.pre_rope_keys) h.k_pre.assign(len * D, 0.0f);
    }
  }
  // Grow per-slot arrays to the head lengths (new slots start at 0).
  for (int kvh = 0; kvh < Hkv && !local; ++kvh) {
    Head& h = heads_[idx(v.layer, kvh)];
    const size_t len = static_cast<size_t>(c.len(v.layer, kvh));
    if (req_.col_sum) h.col_sum.resize(len, 0.0f);
    if (req_.col_sum_query_heads) h.col_sum_qh.resize(len * static_cast<size_t>(H / Hkv), 0.0f);
    if (req_.col_max) h.col_max.resize(len, 0.0f);
    if (req_.chunk_attention > 0) h.chunk_attn.resize(len, 0.0f);
    if (req_.pre_rope_keys) {
      // The batch's tokens are the last n_tok slots of every head (just appended).
      const size_t old = h.k_pre.size() / D;
      h.k_pre.resize(len * D, 0.0f);
      const size_t first_new = len - static_cast<size_t>(v.n_tok);
      for (int t = 0; t < v.n_tok; ++t) {
        const size_t slot = first_new + static_cast<size_t>(t);
        if (slot < old) continue;
        std::memcpy(&h.k_pre[slot * D], v.k_pre_rope + (static_cast<size_t>(t) * Hkv + kvh) * D, sizeof(float) * D);
      }
    }
  }
  if (req_.query_gram != QueryGram::Off) collect_grams(v);
  if (req_.attn_input_moments && n_embd_ > 0) {
    if (!v.attn_in) fail("attention-input moments: the forward gave layer {} no attention input", v.layer);
    attn_in_[static_cast<size_t>(v.layer)].add({v.attn_in, static_cast<size_t>(v.n_tok) * n_embd_}, v.n_tok);
  }
  if (req_.window > 0) {
    Window& w = windows_[static_cast<size_t>(v.layer)];
    w.q.insert(w.q.end(), v.q, v.q + static_cast<size_t>(v.n_tok) * H * D);
    w.pos.insert(w.pos.end(), v.pos, v.pos + v.n_tok);
    if (w.size() >= 2 * req_.window) {  // (Window: trimmed in batches)
      const size_t drop = static_cast<size_t>(w.size() - req_.window);
      w.pos.erase(w.pos.begin(), w.pos.begin() + static_cast<std::ptrdiff_t>(drop));
      w.q.erase(w.q.begin(), w.q.begin() + static_cast<std::ptrdiff_t>(drop * H * D));
    }
  }
  if (local) return;
  if (req_.col_sum || req_.col_max || req_.col_sum_query_heads) collect_attention(v);
  if (req_.chunk_attention > 0) collect_chunks(v);
}

void StatsCollector::collect_chunks(const LayerView& v) {
  const int C = req_.chunk_attention, H = shape_.n_head, D = shape_.head_dim;
  const size_t row = static_cast<size_t>(H) * D;
  ChunkBuffer& b = chunks_[static_cast<size_t>(v.layer)];
  std::vector<std::vector<float>*> acc(static_cast<size_t>(layout_.n_head_kv));
  for (int kvh = 0; kvh < layout_.n_head_kv; ++kvh) acc[static_cast<size_t>(kvh)] = &heads_[idx(v.layer, kvh)].chunk_attn;
  auto flush = [&] {
    chunk_scores(*v.cache, v.layer, b, acc);
    b.q.clear();
    b.pos.clear();
  };
  for (int t = 0; t < v.n_tok; ++t) {
    // A query of a later chunk: the buffered chunk is complete and its keys are all in the cache
    // (this batch's keys are appended before observers run).
    if (!b.pos.empty() && v.pos[t] / C != b.pos.front() / C) flush();
    b.q.insert(b.q.end(), v.q + static_cast<size_t>(t) * row, v.q + static_cast<size_t>(t + 1) * row);
    b.pos.push_back(v.pos[t]);
  }
  if (!b.pos.empty() && (b.pos.back() + 1) % C == 0) flush();  // the chunk's last position was seen
}

void StatsCollector::chunk_scores(const KvCache& c, int layer, const ChunkBuffer& buf,
                                  std::vector<std::vector<float>*>& out) const {
  if (buf.pos.empty()) return;
  const int C = req_.chunk_attention, H = shape_.n_head, Hkv = shape_.n_head_kv, D = shape_.head_dim, G = H / Hkv;
  const int nq = static_cast<int>(buf.pos.size());
  const int32_t lo = buf.pos.front() / C * C, hi = lo + C;
  struct Range {
    int32_t s0 = 0, m = 0;
  };
  std::vector<Range> r(static_cast<size_t>(Hkv));
  for (int kvh = 0; kvh < Hkv; ++kvh) {
    const auto& pos = c.head(layer, kvh).pos;
    const auto b = std::lower_bound(pos.begin(), pos.end(), lo), e = std::lower_bound(pos.begin(), pos.end(), hi);
    r[static_cast<size_t>(kvh)] = {static_cast<int32_t>(b - pos.begin()), static_cast<int32_t>(e - b)};
  }
  // One task per query head: its column sums [m] (averaged over the group afterwards).
  std::vector<std::vector<float>> part(static_cast<size_t>(H));
  pool_->parallel_for(H, [&](int64_t b, int64_t e) {
    std::vector<float> K, S;
    for (int64_t qh = b; qh < e; ++qh) {
      const int kvh = static_cast<int>(qh) / G;
      const Range rg = r[static_cast<size_t>(kvh)];
      if (rg.m == 0) continue;
      K.resize(static_cast<size_t>(rg.m) * D);  // [m][D] the chunk's keys of this KV head
      c.gather(layer, kvh, rg.s0, rg.s0 + rg.m, K.data(), nullptr);
      S.resize(static_cast<size_t>(nq) * rg.m);  // [nq][m] logits, then probabilities
      // Eq. 5 has no 1/sqrt(d) (both official implementations use none either): scale 1. Nor
      // Gemma 2's soft-cap: Eq. 5 is the paper's own score, not the model's attention (whose cap
      // applies to scaled logits), and neither official code caps it.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, rg.m, D, 1.0f, buf.q.data() + qh * D, H * D, K.data(),
                  D, 0.0f, S.data(), rg.m);
      std::vector<float>& acc = part[static_cast<size_t>(qh)];
      acc.assign(static_cast<size_t>(rg.m), 0.0f);
      for (int i = 0; i < nq; ++i) {
        float* row = S.data() + static_cast<size_t>(i) * rg.m;
        kernels::softmax(row, rg.m);
        kernels::add_f32(acc.data(), row, rg.m);
      }
    }
  });
  const float inv_g = 1.0f / static_cast<float>(G);
  for (int qh = 0; qh < H; ++qh) {
    const int kvh = qh / G;
    const Range rg = r[static_cast<size_t>(kvh)];
    std::vector<float>& o = *out[static_cast<size_t>(kvh)];
    if (rg.m == 0) continue;
    KVS_ASSERT(o.size() >= static_cast<size_t>(rg.s0 + rg.m));
    const std::vector<float>& p = part[static_cast<size_t>(qh)];
    for (int32_t j = 0; j < rg.m; ++j) o[static_cast<size_t>(rg.s0 + j)] += p[static_cast<size_t>(j)] * inv_g;
  }
}

std::vector<std::vector<float>> StatsCollector::chunk_attention(const KvCache& cache, int layer) const {
  const int Hkv = layout_.n_head_kv;
  std::vector<std::vector<float>> a(static_cast<size_t>(Hkv));
  if (req_.chunk_attention == 0) return a;
  std::vector<std::vector<float>*> ptr(static_cast<size_t>(Hkv));
  for (int kvh = 0; kvh < Hkv; ++kvh) {
    a[static_cast<size_t>(kvh)] = heads_[idx(layer, kvh)].chunk_attn;
    a[static_cast<size_t>(kvh)].resize(static_cast<size_t>(cache.len(layer, kvh)), 0.0f);
    ptr[static_cast<size_t>(kvh)] = &a[static_cast<size_t>(kvh)];
  }
  if (shape_.press_skips(layer)) {  // a local layer beside global ones: not collected (see collect)
    for (auto& x : a) std::fill(x.begin(), x.end(), 0.0f);
    return a;
  }
  chunk_scores(cache, layer, chunks_[static_cast<size_t>(layer)], ptr);
  return a;
}

void StatsCollector::collect_grams(const LayerView& v) {
  const int H = shape_.n_head, D = shape_.head_dim;
  const float* src = req_.query_gram == QueryGram::PreRope ? v.q_pre_rope : v.q;
  KVS_ASSERT(src != nullptr);
  // Per head: the batch's Gram in float through BLAS (T x D x D), accumulated in double.
  pool_->parallel_for(H, [&](int64_t b, int64_t e) {
    std::vector<float> g(static_cast<size_t>(D) * D);
    for (int64_t qh = b; qh < e; ++qh) {
      Gram& gr = grams_[static_cast<size_t>(v.layer * H + qh)];
      // rows of head qh: src + t*H*D + qh*D, leading dimension H*D
      cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, D, v.n_tok, 1.0f, src + qh * D, H * D, 0.0f, g.data(), D);
      for (int i = 0; i < D; ++i)
        for (int j = i; j < D; ++j) {
          gr.gram[static_cast<size_t>(i) * D + j] += g[static_cast<size_t>(i) * D + j];
          if (j != i) gr.gram[static_cast<size_t>(j) * D + i] += g[static_cast<size_t>(i) * D + j];
        }
      for (int t = 0; t < v.n_tok; ++t) {
        const float* q = src + (static_cast<size_t>(t) * H + qh) * D;
        for (int d = 0; d < D; ++d) gr.sum[static_cast<size_t>(d)] += q[d];
      }
      gr.count += v.n_tok;
    }
  });
}

void StatsCollector::collect_attention(const LayerView& v) {
  const int Hkv = shape_.n_head_kv, G = shape_.n_head / shape_.n_head_kv;
  const KvCache& c = *v.cache;
  {
    // Per-thread partial sums/maxima for this batch, reduced into the per-slot arrays after.
    const int nth = pool_->size();
    std::vector<std::vector<std::vector<float>>> psum(static_cast<size_t>(nth)), pmax(static_cast<size_t>(nth)),
        pqh(static_cast<size_t>(nth));
    for (int t = 0; t < nth; ++t) {
      psum[t].resize(static_cast<size_t>(Hkv));
      pmax[t].resize(static_cast<size_t>(Hkv));
      pqh[t].resize(static_cast<size_t>(Hkv));
      for (int kvh = 0; kvh < Hkv; ++kvh) {
        const size_t len = static_cast<size_t>(c.len(v.layer, kvh));
        if (req_.col_sum) psum[t][kvh].assign(len, 0.0f);
        if (req_.col_max) pmax[t][kvh].assign(len, 0.0f);
        if (req_.col_sum_query_heads) pqh[t][kvh].assign(len * static_cast<size_t>(G), 0.0f);
      }
    }
    for_each_prob_tile(c, v.layer, shape_, v.q, v.pos, v.lse, v.n_tok, 0, *pool_, [&](const ProbTile& t) {
      for (int i = 0; i < t.nt; ++i) {
        const float* row = t.p + static_cast<size_t>(i) * t.ld;
        if (req_.col_sum) {
          float* cs = psum[t.thread][t.kvh].data() + t.k0;
          for (int32_t j = 0; j < t.nk; ++j) cs[j] += row[j];
        }
        if (req_.col_max) {
          float* cm = pmax[t.thread][t.kvh].data() + t.k0;
          for (int32_t j = 0; j < t.nk; ++j) cm[j] = std::max(cm[j], row[j]);
        }
        if (req_.col_sum_query_heads) {
          float* cq = pqh[t.thread][t.kvh].data() + static_cast<size_t>(t.k0) * G + (t.qh - t.kvh * G);
          for (int32_t j = 0; j < t.nk; ++j) cq[static_cast<size_t>(j) * G] += row[j];
        }
      }
    });
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      Head& h = heads_[idx(v.layer, kvh)];
      for (int t = 0; t < nth; ++t) {
        if (req_.col_sum)
          for (size_t j = 0; j < h.col_sum.size(); ++j) h.col_sum[j] += psum[t][kvh][j];
        if (req_.col_max)
          for (size_t j = 0; j < h.col_max.size(); ++j) h.col_max[j] = std::max(h.col_max[j], pmax[t][kvh][j]);
        if (req_.col_sum_query_heads)
          for (size_t j = 0; j < h.col_sum_qh.size(); ++j) h.col_sum_qh[j] += pqh[t][kvh][j];
      }
    }
  }
}

void StatsCollector::sync_head(Head& h, const HeadCache& c) {
  const int64_t d = c.slid - h.slid;
  if (d <= 0) return;
  const size_t D = static_cast<size_t>(shape_.head_dim);
  auto drop = [&](std::vector<float>& a, size_t width) {
    const size_t n = std::min(a.size(), static_cast<size_t>(d) * width);
    a.erase(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n));
  };
  drop(h.col_sum, 1);
  drop(h.col_sum_qh, static_cast<size_t>(shape_.n_head / shape_.n_head_kv));
  drop(h.col_max, 1);
  drop(h.chunk_attn, 1);
  drop(h.k_pre, D);
  h.slid = c.slid;
}

void StatsCollector::sync(const KvCache& cache) {
  for (int layer = 0; layer < layout_.n_layer; ++layer)
    for (int kvh = 0; kvh < layout_.n_head_kv; ++kvh) sync_head(heads_[idx(layer, kvh)], cache.head(layer, kvh));
}

void StatsCollector::apply_edit(const CacheEdit& edit) {
  const int D = shape_.head_dim;
  KVS_ASSERT(edit.heads.size() == heads_.size());
  for (size_t i = 0; i < heads_.size(); ++i) {
    const HeadEdit& e = edit.heads[i];
    if (!e.active) continue;
    Head& h = heads_[i];
    auto remap = [&](std::vector<float>& a, size_t width) {
      if (a.empty()) return;
      std::vector<float> out(e.keep.size() * width);
      for (size_t j = 0; j < e.keep.size(); ++j) {
        const size_t src = static_cast<size_t>(e.keep[j]) * width;
        if (src + width <= a.size()) std::copy(a.begin() + src, a.begin() + src + width, out.begin() + j * width);
      }
      a = std::move(out);
    };
    remap(h.col_sum, 1);
    remap(h.col_sum_qh, static_cast<size_t>(shape_.n_head / shape_.n_head_kv));
    remap(h.col_max, 1);
    remap(h.k_pre, static_cast<size_t>(D));
    remap(h.chunk_attn, 1);
  }
}

}  // namespace kvs
