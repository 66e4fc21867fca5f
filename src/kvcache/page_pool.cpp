#include "kvcache/page_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <new>

#include "core/error.h"

namespace kvs {

// Chunks are 2 MiB-aligned and advised as transparent huge pages: decode attention walks pages
// scattered over the pool, and with 4 KiB pages every KV page costs TLB misses. A huge page is
// backed whole once touched, so a chunk's allocation is what the process holds: an automatic pool
// sizes its chunks to fill whole huge pages (a fixed page count per chunk left most of each huge
// page unused with quantized pages; docs/benchmarks/issue25-kv-quant.md).
constexpr size_t kHugePage = size_t{2} << 20;

void PagePool::ChunkFree::operator()(uint8_t* p) const { std::free(p); }

size_t PagePool::chunk_allocation_bytes(size_t bytes) { return (bytes + kHugePage - 1) / kHugePage * kHugePage; }

int32_t PagePool::pages_filling_huge_pages(size_t page_bytes) {
  KVS_ASSERT(page_bytes > 0);
  return page_bytes >= kHugePage ? 1 : static_cast<int32_t>(kHugePage / page_bytes);
}

PagePool::Chunk PagePool::new_chunk(size_t bytes) {
  const size_t rounded = chunk_allocation_bytes(bytes);
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p != nullptr) ::madvise(p, rounded, MADV_HUGEPAGE);
  return Chunk(static_cast<uint8_t*>(p));
}

PagePool::PagePool(size_t page_bytes, size_t max_bytes, int32_t chunk_pages)
    : page_bytes_(page_bytes),
      max_bytes_(max_bytes),
      chunk_pages_(chunk_pages > 0 ? chunk_pages : pages_filling_huge_pages(page_bytes)) {
  KVS_ASSERT(page_bytes_ > 0 && chunk_pages_ > 0);
}

bool PagePool::grow() {
  const size_t c = chunks_.size();
  Chunk mem = new_chunk(static_cast<size_t>(chunk_pages_) * page_bytes_);
  if (!mem) return false;
  chunks_.push_back(std::move(mem));
  chunk_used_.push_back(0);
  const int32_t first = static_cast<int32_t>(c) * chunk_pages_;
  refs_.resize(refs_.size() + static_cast<size_t>(chunk_pages_), 0);
  // Push in reverse so the lowest id is handed out first.
  for (int32_t i = chunk_pages_ - 1; i >= 0; --i) free_.push_back(first + i);
  return true;
}

bool PagePool::can_alloc(size_t n) const {
  if (max_bytes_ == 0) return true;
  return (in_use_ + n) * page_bytes_ <= max_bytes_;
}

int32_t PagePool::alloc() {
  if (!can_alloc(1)) return -1;
  // Skip ids whose chunk was trimmed; re-create the chunk lazily.
  while (true) {
    if (free_.empty() && !grow()) return -1;
    const int32_t id = free_.back();
    const size_t c = static_cast<size_t>(id / chunk_pages_);
    if (!chunks_[c]) {
      chunks_[c] = new_chunk(static_cast<size_t>(chunk_pages_) * page_bytes_);
      if (!chunks_[c]) return -1;
    }
    free_.pop_back();
    refs_[static_cast<size_t>(id)] = 1;
    chunk_used_[c]++;
    ++in_use_;
    high_water_ = std::max(high_water_, in_use_);
    return id;
  }
}

void PagePool::retain(int32_t id) {
  KVS_ASSERT(id >= 0 && static_cast<size_t>(id) < refs_.size() && refs_[static_cast<size_t>(id)] > 0);
  refs_[static_cast<size_t>(id)]++;
}

void PagePool::release(int32_t id) {
  KVS_ASSERT(id >= 0 && static_cast<size_t>(id) < refs_.size() && refs_[static_cast<size_t>(id)] > 0);
  if (--refs_[static_cast<size_t>(id)] == 0) {
    free_.push_back(id);
    chunk_used_[static_cast<size_t>(id / chunk_pages_)]--;
    --in_use_;
  }
}

size_t PagePool::bytes_reserved() const {
  const size_t live = static_cast<size_t>(std::count_if(chunks_.begin(), chunks_.end(), [](const Chunk& c) { return c != nullptr; }));
  return live * chunk_allocation_bytes(static_cast<size_t>(chunk_pages_) * page_bytes_);
}

void PagePool::trim() {
  for (size_t c = 0; c < chunks_.size(); ++c)
    if (chunks_[c] && chunk_used_[c] == 0) chunks_[c].reset();
  // Prefer pages of live chunks: move ids of trimmed chunks to the bottom of the free stack.
  std::stable_partition(free_.begin(), free_.end(),
                        [&](int32_t id) { return !chunks_[static_cast<size_t>(id / chunk_pages_)]; });
}

}  // namespace kvs
