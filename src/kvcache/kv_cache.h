// The KV cache of one sequence: for every (layer, KV head) its own list of pages, token positions
// and (for merging methods) merge mass. Heads may hold different token sets and lengths; evicting
// frees whole pages back to the shared PagePool, so compression saves real memory.
//
// Page layout (one page = page_tokens slots of one (layer, kv head)):
//   K rows [page_tokens][head_dim] then V rows [page_tokens][head_dim], in the cache dtype
//   (F32, F16, or GGUF's Q8_0 / Q4_0 blocks of 32 values along head_dim: 34 / 18 bytes each).
// Slots within a head are ordered by position (appends have increasing positions; edits keep
// the relative order). Keys are stored after RoPE; evicted tokens keep their original position.
//
// Sharing: fork() shares pages by reference count; any write to a shared page copies it first.
// Planning (pages_needed_*, CacheEdit construction) never mutates; append()/apply() do.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "kvcache/page_pool.h"

namespace kvs {

struct KvLayout {
  int n_layer = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  DType dtype = DType::F32;  // F32, F16, Q8_0 or Q4_0 (quantised: blocks of 32 along head_dim)
  int page_tokens = 32;

  size_t row_bytes() const { return dtype_row_bytes(dtype, head_dim); }
  size_t page_bytes() const { return 2 * static_cast<size_t>(page_tokens) * row_bytes(); }
  int n_heads_total() const { return n_layer * n_head_kv; }
};

struct HeadCache {
  std::vector<int32_t> pages;  // page ids, ceil(len / page_tokens) of them
  std::vector<int32_t> pos;    // [len] token position of each slot
  std::vector<float> mass;     // [len] merge mass, or empty meaning 1 for every slot
  int64_t slid = 0;            // slots dropped from the front by a sliding window (drop_pages_before) so far:
                               // per-slot statistics kept beside the cache drop as many (StatsCollector::sync)
  int32_t len() const { return static_cast<int32_t>(pos.size()); }
};

// A planned edit of one (layer, kv head): optional row overwrites (by current slot), then keep
// exactly the slots in `keep` (ascending, unique), dropping the rest.
struct RowWrite {
  int32_t slot = 0;
  std::vector<float> k, v;  // [head_dim] each; empty = leave that part unchanged
  float mass = 1.0f;
};
struct HeadEdit {
  bool active = false;  // false = leave this head untouched
  std::vector<int32_t> keep;
  std::vector<RowWrite> writes;
};
struct CacheEdit {
  std::vector<HeadEdit> heads;  // [n_layer * n_head_kv], index layer * n_head_kv + kv_head
  explicit CacheEdit(const KvLayout& l) : heads(static_cast<size_t>(l.n_heads_total())) {}
  HeadEdit& at(const KvLayout& l, int layer, int kvh) { return heads[static_cast<size_t>(layer * l.n_head_kv + kvh)]; }
};

class KvCache {
 public:
  KvCache(PagePool& pool, const KvLayout& layout);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // A cache sharing every page with this one (copy-on-write).
  std::unique_ptr<KvCache> fork() const;
  void clear();

  const KvLayout& layout() const { return layout_; }
  PagePool& pool() const { return *pool_; }

  // ---- append -------------------------------------------------------------------------------
  // Pages that appending n_tok tokens to every head of every layer would allocate (plan).
  size_t pages_needed_for_append(int n_tok) const;
  // Appends n_tok tokens to every KV head of `layer`. k, v: [n_tok][n_head_kv][head_dim] floats
  // (post-RoPE keys); pos: [n_tok] increasing and greater than every position already held.
  // Returns false, changing nothing, if the pool cannot supply the pages.
  bool append(int layer, int n_tok, const float* k, const float* v, const int32_t* pos);
  // append() in two halves, for callers that write the rows elsewhere (a batched decode step
  // writes them inside its attention section, each by the task that reads that head: see
  // AttnJob::k_new). append_slots reserves the next n_tok slots of every KV head of `layer` (pages,
  // a shared last page copied first, positions) without writing their rows; returns false,
  // changing nothing, if the pool cannot supply the pages. write_slot then writes one slot's K and
  // V rows (k, v: [head_dim] floats); calls for different (layer, head, slot) may run on different
  // threads at once, as long as nothing else changes the cache meanwhile. Until every reserved
  // slot is written its rows hold whatever the page held.
  bool append_slots(int layer, int n_tok, const int32_t* pos);
  void write_slot(int layer, int kvh, int32_t slot, const float* k, const float* v);
  // write_slot for the last n_tok slots of every KV head of `layer` (k, v: [n_tok][n_head_kv]
  // [head_dim] floats, as append takes them): append's second half, on one thread.
  void write_slots(int layer, int n_tok, const float* k, const float* v);
  // Asks the memory system for what append_slots(layer, ...) reads (a hint, changes nothing): each
  // head's bookkeeping and the ends of its position and page lists, last touched a whole step
  // earlier and by then evicted. A batched step calls it for every sequence a section before
  // append_slots, so that those misses overlap that section instead of stalling one by one.
  void prefetch_append_slots(int layer) const;

  // Fills an empty head with rows (k, v: [n][head_dim], pos increasing, mass optional); used to
  // load a saved cache. Returns false if the pool cannot supply the pages.
  bool load_head(int layer, int kvh, const float* k, const float* v, const int32_t* pos, int32_t n, const float* mass);
  // The same from rows already in the cache's type (layout().row_bytes() bytes each, at any
  // alignment): k_rows, v_rows [n][row_bytes], copied as they are (a .kvc file of the cache's
  // own type: no conversion, the blocks bit for bit).
  bool load_head_rows(int layer, int kvh, const uint8_t* k_rows, const uint8_t* v_rows, const int32_t* pos, int32_t n,
                      const float* mass);
  void set_n_past(int32_t n) { n_past_ = n; }

  // ---- edits --------------------------------------------------------------------------------
  // Pages `edit` would allocate at its peak (copies of shared pages it writes or compacts),
  // counting pages freed by earlier heads of the same edit as reusable (plan; no mutation).
  size_t pages_needed_for_edit(const CacheEdit& edit) const;
  // Applies row writes then keeps the listed slots of every active head; frees emptied pages.
  // Atomic: the pages are planned first; if the pool cannot supply them, returns false and the
  // cache is exactly as it was. Malformed edits (slots out of range, keep not ascending) assert.
  bool apply(const CacheEdit& edit);

  // ---- sliding-window layers ----------------------------------------------------------------
  // Frees the leading pages of every KV head of `layer` whose slots all hold positions < min_pos
  // (whole pages only, so that slot s stays in page s / page_tokens): a local layer keeps at most
  // its window plus the pages in use. Returns the slots dropped.
  int64_t drop_pages_before(int layer, int32_t min_pos);
  // Moves a head out (leaving it empty) and back, pages and all: compression hides the local
  // layers from allocators this way (press.cpp). Nothing is allocated or freed.
  HeadCache take_head(int layer, int kvh);
  void put_head(int layer, int kvh, HeadCache h);

  // ---- reads --------------------------------------------------------------------------------
  const HeadCache& head(int layer, int kvh) const { return heads_[idx(layer, kvh)]; }
  int32_t len(int layer, int kvh) const { return head(layer, kvh).len(); }
  // Raw row pointers in the cache dtype (inline: the decode attention asks for one per page and
  // pass, and an out-of-line call with the row size looked up each time was a visible share of a
  // Q8_0 decode task's time).
  const uint8_t* k_row(int layer, int kvh, int32_t slot) const { return slot_ptr(head(layer, kvh), slot, false); }
  const uint8_t* v_row(int layer, int kvh, int32_t slot) const { return slot_ptr(head(layer, kvh), slot, true); }
  // Rows [begin, end) of a head converted to float: K, V as [end-begin][head_dim].
  void gather(int layer, int kvh, int32_t begin, int32_t end, float* K, float* V) const;
  void read_k(int layer, int kvh, int32_t slot, float* out) const;
  void read_v(int layer, int kvh, int32_t slot, float* out) const;

  // ---- accounting ---------------------------------------------------------------------------
  // Next position to use (1 + the largest position ever appended; eviction does not lower it).
  int32_t n_past() const { return n_past_; }
  // Tokens held per (layer, head) summed over all heads.
  size_t total_slots() const;
  // Largest length of any head.
  int32_t max_len() const;
  // Pages referenced by this sequence (shared pages counted in every sequence that holds them).
  size_t pages_held() const;
  size_t bytes_held() const { return pages_held() * layout_.page_bytes(); }
  size_t bytes_held(int layer) const;
  // Bytes the held slots occupy (no page rounding): total_slots * 2 * row_bytes.
  size_t bytes_of_slots() const { return total_slots() * 2 * layout_.row_bytes(); }

 private:
  size_t idx(int layer, int kvh) const { return static_cast<size_t>(layer * layout_.n_head_kv + kvh); }
  // load_head*: pages and positions (and mass) of an empty head for n slots; nullptr when the pool
  // has no room for them.
  HeadCache* prepare_load(int layer, int kvh, const int32_t* pos, int32_t n, const float* mass);
  uint8_t* slot_ptr(HeadCache& h, int32_t slot, bool v);
  const uint8_t* slot_ptr(const HeadCache& h, int32_t slot, bool v) const {
    const int P = layout_.page_tokens;
    const uint8_t* page = pool_->data(h.pages[static_cast<size_t>(slot / P)]);
    return page + (static_cast<size_t>(v ? P : 0) + static_cast<size_t>(slot % P)) * row_bytes_;
  }
  bool make_page_exclusive(HeadCache& h, size_t page_index);
  // Releases pages ids[n - 1] .. ids[0], in that order (kv_cache.cpp says why).
  void release_pages(const int32_t* ids, size_t n);
  struct HeadPlan {
    size_t alloc = 0, freed = 0;  // pages allocated / returned to the free list
    bool copy_compaction = false;
  };
  HeadPlan plan_head(const HeadCache& h, const HeadEdit& e) const;
  void check_edit(const HeadCache& h, const HeadEdit& e) const;
  void apply_head(HeadCache& h, const HeadEdit& e);
  void write_row(uint8_t* dst, const float* src) const;
  void read_row(const uint8_t* src, float* dst) const;

  PagePool* pool_;
  KvLayout layout_;
  size_t row_bytes_;  // layout_.row_bytes(), fixed with the layout
  std::vector<HeadCache> heads_;  // [n_layer * n_head_kv]
  int32_t n_past_ = 0;
};

}  // namespace kvs
