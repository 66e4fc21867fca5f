// Fixed-size page allocator for the KV cache (after vLLM v1's BlockPool): a free list with
// reference counts, pages carved out of lazily allocated chunks. Allocation state is plain
// metadata; running out of pages is a return value (-1), not an exception.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace kvs {

class PagePool {
 public:
  // page_bytes: bytes per page. max_bytes: cap on bytes of pages in use (0 = no cap).
  // chunk_pages: pages per backing allocation; 0 = as many as fill whole 2 MiB huge pages
  // (pages_filling_huge_pages), so that a chunk's allocation, which is rounded up to 2 MiB, holds
  // less than one page of slack.
  explicit PagePool(size_t page_bytes, size_t max_bytes = 0, int32_t chunk_pages = 0);
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  // A page with refcount 1, or -1 when the cap would be exceeded or memory is exhausted.
  int32_t alloc();
  // True if n more pages could be allocated now (used to plan appends before applying them).
  bool can_alloc(size_t n) const;
  void retain(int32_t id);
  void release(int32_t id);  // refcount 0 -> back on the free list (reused first)
  int32_t refcount(int32_t id) const { return refs_[static_cast<size_t>(id)]; }

  uint8_t* data(int32_t id) {
    return chunks_[static_cast<size_t>(id / chunk_pages_)].get() + static_cast<size_t>(id % chunk_pages_) * page_bytes_;
  }

  const uint8_t* data(int32_t id) const {
    return chunks_[static_cast<size_t>(id / chunk_pages_)].get() + static_cast<size_t>(id % chunk_pages_) * page_bytes_;
  }

  size_t page_bytes() const { return page_bytes_; }
  size_t max_bytes() const { return max_bytes_; }
  void set_max_bytes(size_t b) { max_bytes_ = b; }
  size_t pages_in_use() const { return in_use_; }
  size_t bytes_in_use() const { return in_use_ * page_bytes_; }
  size_t high_water_bytes() const { return high_water_ * page_bytes_; }
  void reset_high_water() { high_water_ = in_use_; }
  // Bytes of backing memory currently allocated (the chunks' allocations, each rounded up to a
  // multiple of 2 MiB), pages in use or free.
  size_t bytes_reserved() const;
  int32_t chunk_pages() const { return chunk_pages_; }
  // The chunk an automatic pool uses: the most pages of page_bytes that fit in one 2 MiB huge page
  // (or, for pages of 2 MiB or more, one page).
  static int32_t pages_filling_huge_pages(size_t page_bytes);
  // What a chunk of `bytes` bytes is allocated as: rounded up to a multiple of 2 MiB (2 MiB-aligned).
  static size_t chunk_allocation_bytes(size_t bytes);
  // Returns fully free chunks to the OS. Page ids stay valid identifiers.
  void trim();

 private:
  bool grow();

  size_t page_bytes_;
  size_t max_bytes_;
  int32_t chunk_pages_;
  struct ChunkFree {
    void operator()(uint8_t* p) const;
  };
  using Chunk = std::unique_ptr<uint8_t, ChunkFree>;
  static Chunk new_chunk(size_t bytes);
  std::vector<Chunk> chunks_;  // [n_chunks][chunk_pages * page_bytes]
  std::vector<int32_t> chunk_used_;                 // pages in use per chunk
  std::vector<int32_t> refs_;                       // [n_pages]
  std::vector<int32_t> free_;                       // free page ids (LIFO)
  size_t in_use_ = 0;
  size_t high_water_ = 0;
};

}  // namespace kvs
