#include "runtime/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kvcache/kv_rows.h"
#include "core/error.h"
#include "core/memory_cap.h"
#include "kernels/ops.h"

namespace kvs {

Engine::Engine(const Model& model, const EngineParams& p)
    : model_(model), params_(p), pool_(p.n_threads), backend_(backend::open_backend(backend::Device::cpu(), pool_)) {
  const HParams& hp = model.hp;
  layout_.n_layer = hp.n_layer;
  layout_.n_head_kv = hp.n_head_kv;
  layout_.head_dim = hp.head_dim;
  layout_.dtype = p.kv_dtype;
  layout_.page_tokens = p.page_tokens;
  if (!kv_dtype_supported(p.kv_dtype))
    fail("KV cache type {} is not supported (use {})", dtype_name(p.kv_dtype), kv_dtype_names());
  if (hp.head_dim % dtype_info(p.kv_dtype).block_size != 0)
    fail("KV cache type {} stores blocks of {} values along head_dim; this model's head_dim is {} (use f16)",
         dtype_name(p.kv_dtype), dtype_info(p.kv_dtype).block_size, hp.head_dim);
  if (p.page_tokens <= 0 || p.page_tokens > 4096) fail("page size {} tokens is out of range 1..4096", p.page_tokens);
  if (params_.n_batch <= 0) params_.n_batch = 512;
  page_pool_ = std::make_unique<PagePool>(layout_.page_bytes(), p.kv_max_bytes);
}

Engine::~Engine() = default;

AttnShape Engine::attn_shape() const {
  const HParams& hp = model_.hp;
  AttnShape s{hp.n_head, hp.n_head_kv, hp.head_dim, hp.attn_scale(), params_.llamacpp_numerics};
  s.softcap = hp.attn_softcap;
  s.n_swa = hp.n_swa;
  s.swa_period = hp.swa_period;
  return s;
}

std::unique_ptr<StatsCollector> Engine::new_stats(const StatsRequest& req) {
  if (!req.any()) return nullptr;
  return std::make_unique<StatsCollector>(layout_, attn_shape(), model_.hp.n_embd, req, pool_);
}

arch::Runtime Engine::runtime() { return {model_, *backend_, pool_, attn_, attn_shape()}; }

void Engine::project_queries(int layer, const float* hidden, int n, const float* rope_cs, bool rope_shared, float* q_out) {
  if (n <= 0) return;
  probe_xn_.resize(static_cast<size_t>(n) * model_.hp.n_embd);
  arch::project_queries(runtime(), layer, hidden, n, rope_cs, rope_shared, q_out, probe_xn_.data());
}

void Engine::project_attn_input_queries(int layer, const float* attn_in, int n, const float* rope_cs, bool rope_shared,
                                        float* q_out) {
  if (n <= 0) return;
  arch::project_attn_input_queries(runtime(), layer, attn_in, n, rope_cs, rope_shared, q_out);
}

std::vector<float> Engine::forward(KvCache& cache, std::span<const int32_t> tokens, Logits mode,
                                   LayerObserver* observer) {
  ForwardHooks hooks;
  hooks.observer = observer;
  return forward(cache, tokens, mode, hooks);
}

std::vector<float> Engine::forward(KvCache& cache, std::span<const int32_t> tokens, Logits mode, const ForwardHooks& hooks) {
  if (static_cast<int64_t>(cache.n_past()) + static_cast<int64_t>(tokens.size()) > INT32_MAX)
    fail("token positions would pass {} (cache at position {}, {} new tokens)", INT32_MAX, cache.n_past(), tokens.size());
  std::vector<int32_t> pos(tokens.size());
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = cache.n_past() + static_cast<int32_t>(i);
  return forward_at(cache, tokens, pos, mode, hooks);
}

std::vector<float> Engine::forward_at(KvCache& cache, std::span<const int32_t> tokens, std::span<const int32_t> pos,
                                      Logits mode, const ForwardHooks& hooks) {
  const int n = static_cast<int>(tokens.size());
  KVS_ASSERT(pos.size() == tokens.size());
  const int V = model_.hp.n_vocab;
  for (int i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= V) fail("token id {} at index {} is outside the vocabulary (0..{})", tokens[i], i, V - 1);
    if ((i > 0 && pos[i] <= pos[i - 1]) || (i == 0 && pos[0] < cache.n_past()))
      fail("token positions must increase and start at or after {} (got {} at index {})", cache.n_past(), pos[i], i);
  }
  if (!page_pool_->can_alloc(cache.pages_needed_for_append(n)))
    fail_memory_cap("KV cache memory cap reached: {} tokens need {} more pages of {} bytes; {} of {} bytes in use", n,
         cache.pages_needed_for_append(n), layout_.page_bytes(), page_pool_->bytes_in_use(), page_pool_->max_bytes());
  std::vector<float> logits;
  if (mode == Logits::All) logits.resize(static_cast<size_t>(n) * V);
  if (mode == Logits::Last && n > 0) logits.resize(static_cast<size_t>(V));
  arch::Runtime rt = runtime();
  rt.shape.bf16_products = hooks.bf16_attention;
  if (hooks.rows && n > 0) {
    // A row selector sees the whole prefill before each layer: layer-major over n_batch chunks.
    const arch::LogitsRows m = mode == Logits::All ? arch::LogitsRows::All
                               : mode == Logits::Last ? arch::LogitsRows::Last
                                                      : arch::LogitsRows::None;
    std::vector<int32_t> alive_rows;
    const int alive = arch::forward_layer_major(rt, act_, cache, tokens.data(), pos.data(), n, params_.n_batch, m, hooks,
                                                logits.empty() ? nullptr : logits.data(), &alive_rows);
    if (mode == Logits::All) {
      logits.resize(static_cast<size_t>(alive) * V);
      if (hooks.logits_rows) hooks.logits_rows->insert(hooks.logits_rows->end(), alive_rows.begin(), alive_rows.end());
    }
    return logits;
  }
  size_t rows_out = 0;  // logits rows written (All)
  for (int b = 0; b < n; b += params_.n_batch) {
    const int nb = std::min(params_.n_batch, n - b);
    const bool last_chunk = b + nb == n;
    float* out = nullptr;
    arch::LogitsRows m = arch::LogitsRows::None;
    if (mode == Logits::All) {
      out = logits.data() + rows_out * V;
      m = arch::LogitsRows::All;
    } else if (mode == Logits::Last && last_chunk) {
      out = logits.data();
      m = arch::LogitsRows::Last;
    }
    const int alive = arch::forward_chunk(rt, act_, cache, tokens.data() + b, pos.data() + b, nb, m, hooks, out);
    if (mode == Logits::All) {
      rows_out += static_cast<size_t>(alive);
      if (hooks.logits_rows)
        for (int t = 0; t < alive; ++t) hooks.logits_rows->push_back(b + act_.row[static_cast<size_t>(t)]);
    }
  }
  if (mode == Logits::All) logits.resize(rows_out * V);
  return logits;
}

std::vector<std::span<const float>> Engine::forward_batch_spans(std::span<const BatchItem> items) {
  const int V = model_.hp.n_vocab;
  size_t pages = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const BatchItem& it = items[i];
    KVS_ASSERT(it.cache != nullptr);
    for (size_t j = i + 1; j < items.size(); ++j)
      if (items[j].cache == it.cache) fail("forward_batch: sequence {} appears twice in one batch", i);
    for (size_t t = 0; t < it.tokens.size(); ++t)
      if (it.tokens[t] < 0 || it.tokens[t] >= V)
        fail("token id {} of sequence {} is outside the vocabulary (0..{})", it.tokens[t], i, V - 1);
    if (static_cast<int64_t>(it.cache->n_past()) + static_cast<int64_t>(it.tokens.size()) > INT32_MAX)
      fail("token positions of sequence {} would pass {}", i, INT32_MAX);
    pages += it.cache->pages_needed_for_append(static_cast<int>(it.tokens.size()));
  }
  if (!page_pool_->can_alloc(pages))
    fail_memory_cap("KV cache memory cap reached: the batch needs {} more pages of {} bytes; {} of {} bytes in use", pages,
         layout_.page_bytes(), page_pool_->bytes_in_use(), page_pool_->max_bytes());
  std::vector<std::span<const float>> out(items.size());
  std::vector<size_t> done(items.size(), 0);  // tokens of each item already fed
  const arch::Runtime rt = runtime();
  std::vector<int32_t> tokens, pos;
  std::vector<arch::Segment> segs;
  std::vector<size_t> seg_item;
  std::vector<float>& logits = batch_logits_;
  for (;;) {
    // Pack up to n_batch rows: whole items where they fit, the rest of a long one in later passes.
    tokens.clear();
    pos.clear();
    segs.clear();
    seg_item.clear();
    for (size_t i = 0; i < items.size() && static_cast<int>(tokens.size()) < params_.n_batch; ++i) {
      const size_t left = items[i].tokens.size() - done[i];
      if (left == 0) continue;
      const size_t take = std::min(left, static_cast<size_t>(params_.n_batch) - tokens.size());
      arch::Segment sg{items[i].cache, static_cast<int>(tokens.size()), static_cast<int>(take), items[i].observer};
      for (size_t t = 0; t < take; ++t) {
        tokens.push_back(items[i].tokens[done[i] + t]);
        pos.push_back(items[i].cache->n_past() + static_cast<int32_t>(t));
      }
      segs.push_back(sg);
      seg_item.push_back(i);
    }
    if (segs.empty()) break;
    logits.resize(segs.size() * static_cast<size_t>(V));
    arch::forward_segments(rt, act_, segs, tokens.data(), pos.data(), static_cast<int>(tokens.size()),
                           arch::LogitsRows::Last, nullptr, logits.data());
    for (size_t k = 0; k < segs.size(); ++k) done[seg_item[k]] += static_cast<size_t>(segs[k].n);
    // Another pass follows when an item has tokens left; it overwrites `logits`, so the rows of the
    // items this pass finished are copied aside first (rare: a step wider than n_batch rows).
    bool more = false;
    for (size_t i = 0; i < items.size(); ++i) more |= done[i] < items[i].tokens.size();
    for (size_t k = 0; k < segs.size(); ++k) {
      const size_t i = seg_item[k];
      if (done[i] != items[i].tokens.size() || !items[i].want_logits) continue;
      const float* row = logits.data() + k * static_cast<size_t>(V);
      if (more) {
        batch_early_.resize(items.size() * static_cast<size_t>(V));
        float* dst = batch_early_.data() + i * static_cast<size_t>(V);
        std::copy(row, row + V, dst);
        row = dst;
      }
      out[i] = std::span<const float>(row, static_cast<size_t>(V));
    }
  }
  return out;
}

void Engine::trim_batch_logits() {
  const size_t keep = static_cast<size_t>(kKeptLogitRows) * static_cast<size_t>(model_.hp.n_vocab);
  if (batch_logits_.capacity() > keep) std::vector<float>().swap(batch_logits_);
  std::vector<float>().swap(batch_early_);
}

std::vector<std::vector<float>> Engine::forward_batch(std::span<const BatchItem> items) {
  const std::vector<std::span<const float>> spans = forward_batch_spans(items);
  std::vector<std::vector<float>> out(items.size());
  for (size_t i = 0; i < items.size(); ++i) out[i].assign(spans[i].begin(), spans[i].end());
  trim_batch_logits();
  return out;
}

}  // namespace kvs
