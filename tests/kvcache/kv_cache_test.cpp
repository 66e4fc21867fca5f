#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/fp16.h"
#include "kvcache/kv_cache.h"

namespace kvs {
namespace {

KvLayout layout(DType t = DType::F32) {
  KvLayout l;
  l.n_layer = 2;
  l.n_head_kv = 3;
  l.head_dim = 8;
  l.dtype = t;
  l.page_tokens = 4;
  return l;
}

// k value encodes (layer, head, pos, dim) so that moves can be checked exactly.
float kval(int layer, int h, int pos, int d) { return layer * 1000 + h * 100 + pos + d * 0.125f; }
float vval(int layer, int h, int pos, int d) { return -kval(layer, h, pos, d); }

void fill(KvCache& c, int n, int start = 0) {
  const auto& l = c.layout();
  std::vector<float> k(static_cast<size_t>(n) * l.n_head_kv * l.head_dim), v(k.size());
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int layer = 0; layer < l.n_layer; ++layer) {
    for (int t = 0; t < n; ++t) {
      pos[t] = start + t;
      for (int h = 0; h < l.n_head_kv; ++h)
        for (int d = 0; d < l.head_dim; ++d) {
          k[(t * l.n_head_kv + h) * l.head_dim + d] = kval(layer, h, start + t, d);
          v[(t * l.n_head_kv + h) * l.head_dim + d] = vval(layer, h, start + t, d);
        }
    }
    ASSERT_TRUE(c.append(layer, n, k.data(), v.data(), pos.data()));
  }
}

void expect_rows(const KvCache& c, int layer, int h) {
  const auto& hc = c.head(layer, h);
  const int D = c.layout().head_dim;
  std::vector<float> k(D), v(D);
  for (int32_t s = 0; s < hc.len(); ++s) {
    c.read_k(layer, h, s, k.data());
    c.read_v(layer, h, s, v.data());
    for (int d = 0; d < D; ++d) {
      ASSERT_EQ(k[d], kval(layer, h, hc.pos[s], d)) << "slot " << s;
      ASSERT_EQ(v[d], vval(layer, h, hc.pos[s], d));
    }
  }
}

}  // namespace

TEST(KvCache, AppendAndAccounting) {
  auto l = layout();
  PagePool pool(l.page_bytes());
  KvCache c(pool, l);
  EXPECT_EQ(c.pages_needed_for_append(10), 6u * 3);
  fill(c, 10);
  EXPECT_EQ(c.n_past(), 10);
  EXPECT_EQ(c.total_slots(), 60u);
  EXPECT_EQ(c.pages_held(), 18u);  // 6 heads x ceil(10/4)
  EXPECT_EQ(pool.pages_in_use(), 18u);
  EXPECT_EQ(c.bytes_held(), 18 * l.page_bytes());
  EXPECT_EQ(c.bytes_of_slots(), 60 * 2 * 8 * 4u);
  EXPECT_EQ(c.pages_needed_for_append(2), 0u);
  EXPECT_EQ(c.pages_needed_for_append(3), 6u);
  fill(c, 3, 10);
  for (int layer = 0; layer < 2; ++layer)
    for (int h = 0; h < 3; ++h) expect_rows(c, layer, h);
  c.clear();
  EXPECT_EQ(pool.pages_in_use(), 0u);
}

TEST(KvCache, F16StorageRoundsRows) {
  auto l = layout(DType::F16);
  PagePool pool(l.page_bytes());
  KvCache c(pool, l);
  fill(c, 5);
  std::vector<float> k(8);
  c.read_k(1, 2, 3, k.data());
  for (int d = 0; d < 8; ++d) EXPECT_EQ(k[d], fp16_to_fp32(fp32_to_fp16(kval(1, 2, 3, d))));
}

TEST(KvCache, EvictPerHeadFreesPagesAndKeepsPositions) {
  auto l = layout();
  PagePool pool(l.page_bytes());
  KvCache c(pool, l);
  fill(c, 16);  // 4 pages per head
  CacheEdit e(l);
  e.at(l, 0, 0) = {true, {0, 5, 6, 15}, {}};  // 4 tokens -> 1 page
  e.at(l, 1, 2) = {true, {1}, {}};             // 1 token -> 1 page
  e.at(l, 0, 1) = {true, {}, {}};              // empty head
  ASSERT_TRUE(c.apply(e));
  EXPECT_EQ(c.len(0, 0), 4);
  EXPECT_EQ(c.head(0, 0).pos, (std::vector<int32_t>{0, 5, 6, 15}));
  EXPECT_EQ(c.len(1, 2), 1);
  EXPECT_EQ(c.len(0, 1), 0);
  EXPECT_EQ(c.len(0, 2), 16);
  EXPECT_EQ(c.pages_held(), 1u + 1u + 0u + 3 * 4u);
  EXPECT_EQ(pool.pages_in_use(), c.pages_held());
  for (int layer = 0; layer < 2; ++layer)
    for (int h = 0; h < 3; ++h) expect_rows(c, layer, h);
  EXPECT_EQ(c.n_past(), 16);  // eviction does not move the next position
  fill(c, 2, 16);
  EXPECT_EQ(c.head(0, 0).pos.back(), 17);
  expect_rows(c, 0, 0);
}

TEST(KvCache, ForkSharesPagesAndCopiesOnWrite) {
  auto l = layout();
  PagePool pool(l.page_bytes());
  KvCache c(pool, l);
  fill(c, 6);  // 2 pages per head, last one half full
  const size_t base = pool.pages_in_use();
  {
    auto f = c.fork();
    EXPECT_EQ(pool.pages_in_use(), base);  // nothing copied yet
    fill(*f, 1, 6);                        // writes into the shared last page -> copied
    EXPECT_EQ(pool.pages_in_use(), base + 6);
    EXPECT_EQ(c.len(0, 0), 6);
    EXPECT_EQ(f->len(0, 0), 7);
    CacheEdit e(l);
    e.at(l, 1, 1) = {true, {1, 2, 4}, {}};
    ASSERT_TRUE(f->apply(e));
    EXPECT_EQ(f->head(1, 1).pos, (std::vector<int32_t>{1, 2, 4}));
    EXPECT_EQ(c.len(1, 1), 6);
    for (int layer = 0; layer < 2; ++layer)
      for (int h = 0; h < 3; ++h) {
        expect_rows(c, layer, h);
        expect_rows(*f, layer, h);
      }
  }
  EXPECT_EQ(pool.pages_in_use(), base);  // the fork's pages are all returned
  for (int h = 0; h < 3; ++h) expect_rows(c, 1, h);
}

// append_slots then write_slot (a batched decode step's appends, written by its attention tasks)
// leave a cache byte for byte as append does: one token at a time from empty through the page
// boundaries at 4 and 8, the rows written in reverse order (heads, then layers), and on a fork
// whose last page is shared (the reservation copies it; the original's rows stay as they were).
// The F32 rows are also checked against the values put in (kval / vval). At the cap,
// append_slots refuses and changes nothing. prefetch_append_slots (a hint) runs before every
// reservation (with ASan: it reads nothing it should not).
TEST(KvCache, AppendSlotsThenWriteSlotMatchAppend) {
  for (DType t : {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0}) {
    auto l = layout(t);
    l.head_dim = 64;  // Q8_0 rows of two blocks (68 bytes: not line-aligned)
    PagePool pool(l.page_bytes());
    KvCache ref(pool, l), c(pool, l);
    const int Hkv = l.n_head_kv, D = l.head_dim;
    const size_t rb = l.row_bytes();
    auto same = [&](const KvCache& a, const KvCache& b) {
      for (int layer = 0; layer < l.n_layer; ++layer)
        for (int h = 0; h < Hkv; ++h) {
          ASSERT_EQ(a.head(layer, h).pos, b.head(layer, h).pos);
          for (int32_t s = 0; s < a.len(layer, h); ++s) {
            ASSERT_EQ(std::memcmp(a.k_row(layer, h, s), b.k_row(layer, h, s), rb), 0) << "K slot " << s;
            ASSERT_EQ(std::memcmp(a.v_row(layer, h, s), b.v_row(layer, h, s), rb), 0) << "V slot " << s;
          }
        }
    };
    auto reserve_and_write = [&](KvCache& x, int start) {
      std::vector<float> k(static_cast<size_t>(Hkv) * D), v(k.size());
      const int32_t pos = start;
      for (int layer = 0; layer < l.n_layer; ++layer) x.prefetch_append_slots(layer);  // a hint: changes nothing
      for (int layer = 0; layer < l.n_layer; ++layer) ASSERT_TRUE(x.append_slots(layer, 1, &pos));
      for (int layer = l.n_layer - 1; layer >= 0; --layer)
        for (int h = Hkv - 1; h >= 0; --h) {
          for (int d = 0; d < D; ++d) {
            k[static_cast<size_t>(h) * D + d] = kval(layer, h, start, d);
            v[static_cast<size_t>(h) * D + d] = vval(layer, h, start, d);
          }
          x.write_slot(layer, h, x.len(layer, h) - 1, k.data() + h * D, v.data() + h * D);
        }
    };
    for (int n = 0; n < 9; ++n) {
      const size_t p0 = pool.pages_in_use();
      fill(ref, 1, n);
      const size_t p1 = pool.pages_in_use();
      reserve_and_write(c, n);
      EXPECT_EQ(pool.pages_in_use() - p1, p1 - p0);  // as many pages as the append took
      EXPECT_EQ(c.n_past(), n + 1);
      same(ref, c);
    }
    auto f = c.fork();  // 9 tokens: the last page (one row) shared
    const size_t shared = pool.pages_in_use();
    reserve_and_write(*f, 9);
    EXPECT_EQ(pool.pages_in_use(), shared + static_cast<size_t>(l.n_layer) * Hkv);  // the copies
    fill(ref, 1, 9);
    same(ref, *f);
    EXPECT_EQ(c.len(1, 2), 9);
    if (t == DType::F32)
      for (int layer = 0; layer < 2; ++layer)
        for (int h = 0; h < 3; ++h) {
          expect_rows(c, layer, h);
          expect_rows(*f, layer, h);
        }
    // At the cap: the 13th token needs fresh pages (slot 12 starts a page); none are left.
    for (int n = 10; n < 12; ++n) reserve_and_write(*f, n);
    pool.set_max_bytes(pool.bytes_in_use());
    const int32_t p12 = 12;
    EXPECT_FALSE(f->append_slots(0, 1, &p12));
    EXPECT_EQ(f->len(0, 0), 12);
    EXPECT_EQ(f->n_past(), 12);
  }
}

TEST(KvCache, RowWritesSetValuesAndMass) {
  auto l = layout();
  PagePool pool(l.page_bytes());
  KvCache c(pool, l);
  fill(c, 5);
  CacheEdit e(l);
  RowWrite w;
  w.slot = 2;
  w.k.assign(8, 1.5f);
  w.v.assign(8, -2.5f);
  w.mass = 3.0f;
  e.at(l, 0, 0) = {true, {0, 2, 4}, {w}};
  ASSERT_TRUE(c.apply(e));
  std::vector<float> k(8), v(8);
  c.read_k(0, 0, 1, k.data());
  c.read_v(0, 0, 1, v.data());
  EXPECT_EQ(k[3], 1.5f);
  EXPECT_EQ(v[7], -2.5f);
  EXPECT_EQ(c.head(0, 0).mass, (std::vector<float>{1.0f, 3.0f, 1.0f}));
}

TEST(KvCache, AppendFailsCleanlyAtTheCap) {
  auto l = layout();
  PagePool pool(l.page_bytes(), 6 * l.page_bytes());
  KvCache c(pool, l);
  fill(c, 4);  // 6 pages: at the cap
  std::vector<float> k(3 * 8, 0.f), v(3 * 8, 0.f);
  int32_t p = 4;
  EXPECT_FALSE(c.append(0, 1, k.data(), v.data(), &p));
  EXPECT_EQ(c.len(0, 0), 4);
  EXPECT_EQ(pool.pages_in_use(), 6u);
}

// Compaction of shared pages and row writes into shared pages need fresh pages; at the cap, apply
// refuses the whole edit and the cache is exactly as it was (no head half-edited, no row written).
TEST(KvCache, ApplyAtTheCapLeavesTheCacheUnchanged) {
  auto l = layout();
  PagePool pool(l.page_bytes());
  KvCache c(pool, l);
  fill(c, 16);  // 4 pages per head, 24 pages
  auto f = c.fork();
  pool.set_max_bytes(pool.bytes_in_use() + 2 * l.page_bytes());  // two spare pages
  CacheEdit e(l);
  RowWrite w;
  w.slot = 0;
  w.k.assign(8, 9.0f);
  w.v.assign(8, 9.0f);
  w.mass = 2.0f;
  // Head (0, 0): the write copies page 0 (1), the compaction into 2 pages still shares page 1 so
  // it copies into 2 fresh pages (peak 3), then frees the page-0 copy; head (1, 1): 1 fresh page.
  e.at(l, 0, 0) = {true, {0, 1, 2, 3, 4}, {w}};
  e.at(l, 1, 1) = {true, {3}, {}};
  EXPECT_EQ(c.pages_needed_for_edit(e), 3u);
  const size_t in_use = pool.pages_in_use();
  EXPECT_FALSE(c.apply(e));
  EXPECT_EQ(pool.pages_in_use(), in_use);
  EXPECT_EQ(c.len(0, 0), 16);
  EXPECT_EQ(c.len(1, 1), 16);
  EXPECT_TRUE(c.head(0, 0).mass.empty());
  for (int layer = 0; layer < 2; ++layer)
    for (int h = 0; h < 3; ++h) {
      expect_rows(c, layer, h);
      expect_rows(*f, layer, h);
    }
  // With room for the peak it applies, and the fork still reads its own rows.
  pool.set_max_bytes(pool.bytes_in_use() + 3 * l.page_bytes());
  ASSERT_TRUE(c.apply(e));
  EXPECT_EQ(c.head(0, 0).pos, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(c.head(1, 1).pos, (std::vector<int32_t>{3}));
  for (int h = 0; h < 3; ++h) expect_rows(*f, 0, h);
}

// Pages an earlier head's in-place compaction frees serve a later head's copy: the plan counts
// the peak, not the sum.
TEST(KvCache, EditPlanReusesPagesFreedByEarlierHeads) {
  auto l = layout();
  PagePool pool(l.page_bytes());
  KvCache c(pool, l);
  fill(c, 16);
  auto f = c.fork();
  // Make head (0, 0) exclusive: the fork drops it; then c owns its 4 pages alone.
  CacheEdit drop(l);
  drop.at(l, 0, 0) = {true, {}, {}};
  ASSERT_TRUE(f->apply(drop));
  pool.set_max_bytes(pool.bytes_in_use());  // no spare page at all
  CacheEdit e(l);
  e.at(l, 0, 0) = {true, {0}, {}};      // in place: frees 3 pages
  e.at(l, 0, 1) = {true, {0, 1}, {}};   // shared: needs 1 fresh page, frees none (still the fork's)
  EXPECT_EQ(c.pages_needed_for_edit(e), 0u);
  EXPECT_TRUE(c.apply(e));
  expect_rows(c, 0, 0);
  expect_rows(c, 0, 1);
  expect_rows(*f, 0, 1);
}

}  // namespace kvs

namespace kvs {
namespace {

// Each head's page ids, in order.
std::vector<std::vector<int32_t>> page_ids(const KvCache& c) {
  std::vector<std::vector<int32_t>> ids;
  for (int layer = 0; layer < c.layout().n_layer; ++layer)
    for (int h = 0; h < c.layout().n_head_kv; ++h) ids.push_back(c.head(layer, h).pages);
  return ids;
}

bool ascending_run(const std::vector<int32_t>& p) {
  for (size_t i = 1; i < p.size(); ++i)
    if (p[i] != p[i - 1] + 1) return false;
  return true;
}

}  // namespace

// Freed pages come back in their old order: a cache built after another was cleared gets each head's
// pages as the same ascending run of ids (consecutive in memory: the order the decode attention
// streams them in), not reversed; and pages freed by eviction or by sliding are handed out
// first to last as well.
TEST(KvCache, FreedPagesComeBackInAscendingRuns) {
  auto l = layout();
  PagePool pool(l.page_bytes());
  auto a = std::make_unique<KvCache>(pool, l);
  fill(*a, 16);  // 4 pages per head, each head's appended together
  const auto before = page_ids(*a);
  for (const auto& p : before) EXPECT_TRUE(ascending_run(p));
  a->clear();
  KvCache b(pool, l);
  fill(b, 16);
  EXPECT_EQ(page_ids(b), before);
  expect_rows(b, 1, 2);
  // Eviction frees a head's last three pages: the next head to grow takes them first to last.
  CacheEdit e(l);
  e.at(l, 0, 0) = {true, {0, 1, 2, 3}, {}};
  ASSERT_TRUE(b.apply(e));
  KvCache c(pool, l);
  std::vector<float> k(static_cast<size_t>(12) * l.n_head_kv * l.head_dim, 1.0f), v(k.size(), 2.0f);
  std::vector<int32_t> pos(12);
  for (int i = 0; i < 12; ++i) pos[i] = i;
  ASSERT_TRUE(c.append(0, 12, k.data(), v.data(), pos.data()));  // head 0 of layer 0 first: 3 pages
  EXPECT_EQ(c.head(0, 0).pages, std::vector<int32_t>(before[0].begin() + 1, before[0].end()));
}

}  // namespace kvs
