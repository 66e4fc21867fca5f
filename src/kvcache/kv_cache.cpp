#include "kvcache/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/ops.h"

namespace kvs {

KvCache::KvCache(PagePool& pool, const KvLayout& layout)
    : pool_(&pool), layout_(layout), row_bytes_(layout.row_bytes()), heads_(static_cast<size_t>(layout.n_heads_total())) {
  KVS_ASSERT(layout.dtype == DType::F32 || layout.dtype == DType::F16 || layout.dtype == DType::Q8_0 ||
             layout.dtype == DType::Q4_0);
  KVS_ASSERT(layout.head_dim % dtype_info(layout.dtype).block_size == 0);
  KVS_ASSERT(pool.page_bytes() == layout.page_bytes());
}

KvCache::~KvCache() { clear(); }

// Pages go back last first: the pool's free list hands out the most recently released page first,
// so a cache built after this one was freed gets these pages in their old (ascending) order, and a
// head's run of pages again lies front to back in memory, the order the decode attention streams
// them in. Released first to last, a rebuilt cache's runs ran backwards, which streams slower from
// DRAM (docs/benchmarks/issue25-server-step-2-2026-11-29.md, "Decode attention: keys and values page by page").
void KvCache::release_pages(const int32_t* ids, size_t n) {
  for (size_t i = n; i-- > 0;) pool_->release(ids[i]);
}

void KvCache::clear() {
  for (auto h = heads_.rbegin(); h != heads_.rend(); ++h) {
    release_pages(h->pages.data(), h->pages.size());
    *h = HeadCache{};
  }
  n_past_ = 0;
}

std::unique_ptr<KvCache> KvCache::fork() const {
  auto c = std::make_unique<KvCache>(*pool_, layout_);
  c->heads_ = heads_;
  c->n_past_ = n_past_;
  for (const auto& h : heads_)
    for (int32_t p : h.pages) pool_->retain(p);
  return c;
}

uint8_t* KvCache::slot_ptr(HeadCache& h, int32_t slot, bool v) {
  return const_cast<uint8_t*>(static_cast<const KvCache*>(this)->slot_ptr(static_cast<const HeadCache&>(h), slot, v));
}

// Rows are stored in the cache type (kernels' quantize_row / dequantize_row: F32 copied, F16
// converted, Q8_0 / Q4_0 quantised block by block along head_dim as GGUF's, an f16 scale per 32
// values): a merged or rewritten row is re-quantised.
void KvCache::write_row(uint8_t* dst, const float* src) const {
  kernels::quantize_row(layout_.dtype, src, dst, layout_.head_dim);
}
void KvCache::read_row(const uint8_t* src, float* dst) const {
  kernels::dequantize_row(layout_.dtype, src, dst, layout_.head_dim);
}
void KvCache::read_k(int layer, int kvh, int32_t slot, float* out) const { read_row(k_row(layer, kvh, slot), out); }
void KvCache::read_v(int layer, int kvh, int32_t slot, float* out) const { read_row(v_row(layer, kvh, slot), out); }

void KvCache::gather(int layer, int kvh, int32_t begin, int32_t end, float* K, float* V) const {
  const HeadCache& h = head(layer, kvh);
  const int D = layout_.head_dim, P = layout_.page_tokens;
  // A page's rows are contiguous, and so are their blocks (row_bytes is a whole number of blocks):
  // one conversion per run of slots within a page.
  for (int32_t s = begin; s < end;) {
    const int32_t e = std::min(end, (s / P + 1) * P);
    const int64_t n = static_cast<int64_t>(e - s) * D;
    if (K) kernels::dequantize_row(layout_.dtype, slot_ptr(h, s, false), K + static_cast<size_t>(s - begin) * D, n);
    if (V) kernels::dequantize_row(layout_.dtype, slot_ptr(h, s, true), V + static_cast<size_t>(s - begin) * D, n);
    s = e;
  }
}

size_t KvCache::pages_needed_for_append(int n_tok) const {
  const int P = layout_.page_tokens;
  size_t n = 0;
  for (const auto& h : heads_) {
    const int32_t len = h.len();
    const size_t have = h.pages.size();
    const size_t need = static_cast<size_t>((len + n_tok + P - 1) / P);
    n += need - std::min(need, have);
    // A shared, partially filled last page is copied on write.
    if (len % P != 0 && n_tok > 0 && pool_->refcount(h.pages.back()) > 1) n += 1;
  }
  return n;
}

bool KvCache::make_page_exclusive(HeadCache& h, size_t pi) {
  const int32_t old = h.pages[pi];
  if (pool_->refcount(old) == 1) return true;
  const int32_t fresh = pool_->alloc();
  if (fresh < 0) return false;
  std::memcpy(pool_->data(fresh), pool_->data(old), layout_.page_bytes());
  pool_->release(old);
  h.pages[pi] = fresh;
  return true;
}

bool KvCache::append(int layer, int n_tok, const float* k, const float* v, const int32_t* pos) {
  if (!append_slots(layer, n_tok, pos)) return false;
  write_slots(layer, n_tok, k, v);
  return true;
}

void KvCache::write_slots(int layer, int n_tok, const float* k, const float* v) {
  const int H = layout_.n_head_kv, D = layout_.head_dim;
  for (int kvh = 0; kvh < H; ++kvh) {
    const int32_t first = len(layer, kvh) - n_tok;
    for (int t = 0; t < n_tok; ++t) {
      const size_t off = (static_cast<size_t>(t) * H + kvh) * D;
      write_slot(layer, kvh, first + t, k + off, v + off);
    }
  }
}

bool KvCache::append_slots(int layer, int n_tok, const int32_t* pos) {
  KVS_ASSERT(layer >= 0 && layer < layout_.n_layer && n_tok >= 0);
  if (n_tok == 0) return true;
  const int P = layout_.page_tokens, H = layout_.n_head_kv;
  // Plan: count pages this layer needs.
  size_t need = 0;
  for (int kvh = 0; kvh < H; ++kvh) {
    const HeadCache& h = heads_[idx(layer, kvh)];
    const int32_t len = h.len();
    need += static_cast<size_t>((len + n_tok + P - 1) / P) - h.pages.size();
    if (len % P != 0 && pool_->refcount(h.pages.back()) > 1) need += 1;
    KVS_ASSERT(len == 0 || pos[0] > h.pos.back());
  }
  if (!pool_->can_alloc(need)) return false;
  // Apply: the pages (a shared last page copied first, so that the new rows' page is this
  // cache's own) and the positions; the rows are write_slot's.
  for (int kvh = 0; kvh < H; ++kvh) {
    HeadCache& h = heads_[idx(layer, kvh)];
    if (h.len() % P != 0 && !make_page_exclusive(h, h.pages.size() - 1)) return false;
    for (int t = 0; t < n_tok; ++t) {
      if (h.len() % P == 0) {
        const int32_t id = pool_->alloc();
        if (id < 0) return false;  // cannot happen after can_alloc, unless the OS refuses memory
        h.pages.push_back(id);
      }
      h.pos.push_back(pos[t]);
      if (!h.mass.empty()) h.mass.push_back(1.0f);
    }
  }
  n_past_ = std::max(n_past_, pos[n_tok - 1] + 1);
  return true;
}

void KvCache::prefetch_append_slots(int layer) const {
  for (int kvh = 0; kvh < layout_.n_head_kv; ++kvh) {
    const HeadCache& h = heads_[idx(layer, kvh)];
    if (h.pos.empty()) continue;
    __builtin_prefetch(&h.pos.back());
    __builtin_prefetch(&h.pages.back());
    if (!h.mass.empty()) __builtin_prefetch(&h.mass.back());
  }
}

void KvCache::write_slot(int layer, int kvh, int32_t slot, const float* k, const float* v) {
  HeadCache& h = heads_[idx(layer, kvh)];
  KVS_ASSERT(slot >= 0 && slot < h.len() && pool_->refcount(h.pages[static_cast<size_t>(slot / layout_.page_tokens)]) == 1);
  write_row(slot_ptr(h, slot, false), k);
  write_row(slot_ptr(h, slot, true), v);
}

HeadCache* KvCache::prepare_load(int layer, int kvh, const int32_t* pos, int32_t n, const float* mass) {
  HeadCache& h = heads_[idx(layer, kvh)];
  KVS_ASSERT(h.len() == 0);
  const int P = layout_.page_tokens;
  const size_t pages = static_cast<size_t>((n + P - 1) / P);
  if (!pool_->can_alloc(pages)) return nullptr;
  for (size_t i = 0; i < pages; ++i) h.pages.push_back(pool_->alloc());
  h.pos.assign(pos, pos + n);
  if (mass) h.mass.assign(mass, mass + n);
  if (n > 0) n_past_ = std::max(n_past_, pos[n - 1] + 1);
  return &h;
}

bool KvCache::load_head(int layer, int kvh, const float* k, const float* v, const int32_t* pos, int32_t n,
                        const float* mass) {
  HeadCache* h = prepare_load(layer, kvh, pos, n, mass);
  if (!h) return false;
  const size_t D = static_cast<size_t>(layout_.head_dim);
  for (int32_t s = 0; s < n; ++s) {
    write_row(slot_ptr(*h, s, false), k + s * D);
    write_row(slot_ptr(*h, s, true), v + s * D);
  }
  return true;
}

bool KvCache::load_head_rows(int layer, int kvh, const uint8_t* k_rows, const uint8_t* v_rows, const int32_t* pos,
                             int32_t n, const float* mass) {
  HeadCache* h = prepare_load(layer, kvh, pos, n, mass);
  if (!h) return false;
  const size_t rb = layout_.row_bytes();
  for (int32_t s = 0; s < n; ++s) {
    std::memcpy(slot_ptr(*h, s, false), k_rows + s * rb, rb);
    std::memcpy(slot_ptr(*h, s, true), v_rows + s * rb, rb);
  }
  return true;
}

void KvCache::check_edit(const HeadCache& h, const HeadEdit& e) const {
  const int32_t len = h.len();
  for (const RowWrite& w : e.writes) {
    KVS_ASSERT(w.slot >= 0 && w.slot < len);
    KVS_ASSERT(w.k.empty() || static_cast<int>(w.k.size()) == layout_.head_dim);
    KVS_ASSERT(w.v.empty() || static_cast<int>(w.v.size()) == layout_.head_dim);
  }
  for (size_t i = 0; i < e.keep.size(); ++i) {
    KVS_ASSERT(e.keep[i] >= 0 && e.keep[i] < len);
    KVS_ASSERT(i == 0 || e.keep[i] > e.keep[i - 1]);
  }
}

// Pages one head's edit allocates (`alloc`) and returns to the free list (`freed`), in the order
// apply_head() does it: copies of shared pages that are written, then either an in-place
// compaction (frees the exclusive pages past the new end) or, when a page the compaction writes
// into is still shared, a copy into fresh pages (then every exclusive old page is freed).
KvCache::HeadPlan KvCache::plan_head(const HeadCache& h, const HeadEdit& e) const {
  const int P = layout_.page_tokens;
  HeadPlan plan;
  std::vector<bool> copied(h.pages.size(), false);  // shared pages a row write makes exclusive
  for (const RowWrite& w : e.writes) {
    const size_t pi = static_cast<size_t>(w.slot / P);
    if (!copied[pi] && pool_->refcount(h.pages[pi]) > 1) {
      copied[pi] = true;
      plan.alloc++;
    }
  }
  const int32_t n = static_cast<int32_t>(e.keep.size());
  if (n == h.len()) return plan;
  const size_t new_pages = static_cast<size_t>((n + P - 1) / P);
  auto exclusive = [&](size_t pi) { return copied[pi] || pool_->refcount(h.pages[pi]) == 1; };
  bool shared = false;
  for (size_t pi = 0; pi < new_pages && !shared; ++pi) shared = !exclusive(pi);
  plan.copy_compaction = shared;
  if (shared) {
    plan.alloc += new_pages;
    for (size_t pi = 0; pi < h.pages.size(); ++pi) plan.freed += exclusive(pi);
  } else {
    for (size_t pi = new_pages; pi < h.pages.size(); ++pi) plan.freed += exclusive(pi);
  }
  return plan;
}

size_t KvCache::pages_needed_for_edit(const CacheEdit& edit) const {
  KVS_ASSERT(edit.heads.size() == heads_.size());
  // Heads are edited one after the other: pages freed by one head can serve the next.
  int64_t held = 0, peak = 0;
  for (size_t i = 0; i < heads_.size(); ++i) {
    if (!edit.heads[i].active) continue;
    const HeadPlan p = plan_head(heads_[i], edit.heads[i]);
    held += static_cast<int64_t>(p.alloc);
    peak = std::max(peak, held);
    held -= static_cast<int64_t>(p.freed);
  }
  return static_cast<size_t>(peak);
}

void KvCache::apply_head(HeadCache& h, const HeadEdit& e) {
  const int P = layout_.page_tokens;
  const int32_t len = h.len();
  // Row overwrites (merging). Planned: make_page_exclusive cannot fail here.
  for (const RowWrite& w : e.writes) {
    const bool ok = make_page_exclusive(h, static_cast<size_t>(w.slot / P));
    KVS_ASSERT(ok);
    if (!w.k.empty()) write_row(slot_ptr(h, w.slot, false), w.k.data());
    if (!w.v.empty()) write_row(slot_ptr(h, w.slot, true), w.v.data());
    if (h.mass.empty() && w.mass != 1.0f) h.mass.assign(static_cast<size_t>(len), 1.0f);
    if (!h.mass.empty()) h.mass[static_cast<size_t>(w.slot)] = w.mass;
  }
  const auto& keep = e.keep;
  const int32_t n = static_cast<int32_t>(keep.size());
  if (n == len) return;  // nothing dropped (keep is then exactly 0..len-1)
  const size_t new_pages = static_cast<size_t>((n + P - 1) / P);
  bool shared = false;
  for (size_t pi = 0; pi < new_pages && !shared; ++pi) shared = pool_->refcount(h.pages[pi]) > 1;
  const size_t rb = layout_.row_bytes();
  if (!shared) {
    // In place: destination slot i <= source slot keep[i], so a forward pass is safe.
    for (int32_t i = 0; i < n; ++i) {
      if (keep[i] == i) continue;
      std::memcpy(slot_ptr(h, i, false), slot_ptr(h, keep[i], false), rb);
      std::memcpy(slot_ptr(h, i, true), slot_ptr(h, keep[i], true), rb);
    }
    release_pages(h.pages.data() + new_pages, h.pages.size() - new_pages);
    h.pages.resize(new_pages);
  } else {
    // Copy into fresh pages, then drop the old (shared) ones.
    HeadCache nh;
    for (size_t pi = 0; pi < new_pages; ++pi) {
      const int32_t id = pool_->alloc();
      KVS_ASSERT(id >= 0);  // planned
      nh.pages.push_back(id);
    }
    for (int32_t i = 0; i < n; ++i) {
      std::memcpy(slot_ptr(nh, i, false), slot_ptr(h, keep[i], false), rb);
      std::memcpy(slot_ptr(nh, i, true), slot_ptr(h, keep[i], true), rb);
    }
    release_pages(h.pages.data(), h.pages.size());
    h.pages = std::move(nh.pages);
  }
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) pos[i] = h.pos[static_cast<size_t>(keep[i])];
  h.pos = std::move(pos);
  if (!h.mass.empty()) {
    std::vector<float> mass(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) mass[i] = h.mass[static_cast<size_t>(keep[i])];
    h.mass = std::move(mass);
  }
}

bool KvCache::apply(const CacheEdit& edit) {
  KVS_ASSERT(edit.heads.size() == heads_.size());
  for (size_t i = 0; i < heads_.size(); ++i)
    if (edit.heads[i].active) check_edit(heads_[i], edit.heads[i]);
  // Plan first: either every page the edit needs can be had, or nothing is written.
  if (!pool_->can_alloc(pages_needed_for_edit(edit))) return false;
  for (size_t i = 0; i < heads_.size(); ++i)
    if (edit.heads[i].active) apply_head(heads_[i], edit.heads[i]);
  return true;
}

int64_t KvCache::drop_pages_before(int layer, int32_t min_pos) {
  const size_t P = static_cast<size_t>(layout_.page_tokens);
  int64_t dropped = 0;
  for (int kvh = 0; kvh < layout_.n_head_kv; ++kvh) {
    HeadCache& h = heads_[idx(layer, kvh)];
    size_t np = 0;  // leading full pages whose last (largest) position is < min_pos
    while ((np + 1) * P <= h.pos.size() && h.pos[(np + 1) * P - 1] < min_pos) ++np;
    if (np == 0) continue;
    release_pages(h.pages.data(), np);
    h.pages.erase(h.pages.begin(), h.pages.begin() + static_cast<std::ptrdiff_t>(np));
    h.pos.erase(h.pos.begin(), h.pos.begin() + static_cast<std::ptrdiff_t>(np * P));
    if (!h.mass.empty()) h.mass.erase(h.mass.begin(), h.mass.begin() + static_cast<std::ptrdiff_t>(np * P));
    h.slid += static_cast<int64_t>(np * P);
    dropped += static_cast<int64_t>(np * P);
  }
  return dropped;
}

HeadCache KvCache::take_head(int layer, int kvh) {
  HeadCache h = std::move(heads_[idx(layer, kvh)]);
  heads_[idx(layer, kvh)] = HeadCache{};
  return h;
}

void KvCache::put_head(int layer, int kvh, HeadCache h) {
  KVS_ASSERT(heads_[idx(layer, kvh)].pages.empty());
  heads_[idx(layer, kvh)] = std::move(h);
}

size_t KvCache::total_slots() const {
  size_t n = 0;
  for (const auto& h : heads_) n += h.pos.size();
  return n;
}

int32_t KvCache::max_len() const {
  int32_t m = 0;
  for (const auto& h : heads_) m = std::max(m, h.len());
  return m;
}

size_t KvCache::pages_held() const {
  size_t n = 0;
  for (const auto& h : heads_) n += h.pages.size();
  return n;
}

size_t KvCache::bytes_held(int layer) const {
  size_t n = 0;
  for (int kvh = 0; kvh < layout_.n_head_kv; ++kvh) n += head(layer, kvh).pages.size();
  return n * layout_.page_bytes();
}

}  // namespace kvs
