#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kvcache/page_pool.h"

namespace kvs {

constexpr size_t kHuge = size_t{2} << 20;

TEST(PagePool, AllocReleaseRefcountAndReuse) {
  PagePool pool(1024, 0, 4);
  int32_t a = pool.alloc(), b = pool.alloc();
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
  EXPECT_EQ(pool.pages_in_use(), 2u);
  pool.retain(a);
  EXPECT_EQ(pool.refcount(a), 2);
  pool.release(a);
  EXPECT_EQ(pool.pages_in_use(), 2u);
  pool.release(a);
  EXPECT_EQ(pool.pages_in_use(), 1u);
  // The freed page is handed out again first.
  EXPECT_EQ(pool.alloc(), a);
  for (int i = 0; i < 10; ++i) pool.alloc();  // grows past one chunk
  EXPECT_EQ(pool.pages_in_use(), 12u);
  EXPECT_EQ(pool.high_water_bytes(), 12u * 1024);
  // Three chunks of 4 pages, each allocation rounded up to a 2 MiB huge page.
  EXPECT_EQ(pool.bytes_reserved(), 3u * kHuge);
}

TEST(PagePool, CapIsAReturnValue) {
  PagePool pool(100, 300);
  EXPECT_GE(pool.alloc(), 0);
  EXPECT_GE(pool.alloc(), 0);
  EXPECT_GE(pool.alloc(), 0);
  EXPECT_FALSE(pool.can_alloc(1));
  EXPECT_EQ(pool.alloc(), -1);
  pool.release(1);
  EXPECT_TRUE(pool.can_alloc(1));
  EXPECT_EQ(pool.alloc(), 1);
}

TEST(PagePool, TrimReturnsEmptyChunks) {
  PagePool pool(256, 0, 2);
  std::vector<int32_t> ids;
  for (int i = 0; i < 6; ++i) ids.push_back(pool.alloc());
  EXPECT_EQ(pool.bytes_reserved(), 3u * kHuge);  // 3 chunks of 2 pages
  for (int i = 2; i < 6; ++i) pool.release(ids[i]);
  pool.trim();
  EXPECT_EQ(pool.bytes_reserved(), 1u * kHuge);
  int32_t id = pool.alloc();  // comes back usable
  pool.data(id)[255] = 7;
  EXPECT_EQ(pool.bytes_reserved(), 2u * kHuge);
}

// An automatic pool's chunks fill whole 2 MiB huge pages (a chunk's allocation is rounded up to
// 2 MiB and backed whole once touched), for the page sizes the KV types make: rows of head dim
// 64 / 128 in pages of 32 / 128 tokens, K and V (F32 4 / F16 2 / Q8_0 34 / 32 / Q4_0 18 / 32
// bytes a value).
TEST(PagePool, AutomaticChunksFillWholeHugePages) {
  // Worked out by hand: a Q8_0 page of 32 tokens at head dim 64 is 2 x 32 x 68 = 4,352 bytes;
  // 2 MiB / 4,352 = 481.9, so 481 pages, 2,093,312 bytes of 2,097,152. (A fixed 256 pages held
  // 1,114,112 bytes in a 2 MiB allocation.) Q4_0: 2 x 32 x 36 = 2,304 bytes, 910 pages.
  EXPECT_EQ(PagePool(4352).chunk_pages(), 481);
  EXPECT_EQ(PagePool(2304).chunk_pages(), 910);
  EXPECT_EQ(PagePool(8192).chunk_pages(), 256);   // F16, head dim 64, 32 tokens
  EXPECT_EQ(PagePool(3u << 20).chunk_pages(), 1);  // a page beyond a huge page: one per chunk
  for (int D : {64, 128})
    for (int P : {32, 128})
      for (double bytes_per_value : {4.0, 2.0, 34.0 / 32, 18.0 / 32}) {
        const size_t page = static_cast<size_t>(2 * P * D * bytes_per_value);
        PagePool pool(page);
        const int32_t a = pool.alloc();
        const size_t reserved = pool.bytes_reserved();
        EXPECT_EQ(reserved % kHuge, 0u) << page;
        // Less than one page of slack per chunk.
        EXPECT_LT(reserved - static_cast<size_t>(pool.chunk_pages()) * page, page) << page;
        // The chunk starts on a huge page and its pages are contiguous.
        EXPECT_EQ(reinterpret_cast<uintptr_t>(pool.data(a)) % kHuge, 0u) << page;
        if (pool.chunk_pages() > 1) {
          const int32_t b = pool.alloc();
          EXPECT_EQ(pool.data(b), pool.data(a) + page) << page;
        }
      }
}

}  // namespace kvs
