// libFuzzer target for the .kvc (saved compressed context) reader: parse_cache_header and
// load_cache (src/kvcache/cache_file.cpp, header_fields.cpp) into a small page pool whose layout
// is derived from the header, then every row of every head is read back.
//
// Input: a .kvc file WITHOUT its trailing 8-byte checksum; the target appends the right one, so
// mutations explore the header schema and the body instead of dying at the checksum. (The seeds
// in fuzz/corpus/kvc/ are saved files with the checksum cut off; fuzz_make_seeds writes them.)
// kvs::Error is the expected outcome for malformed input; a crash, sanitizer report, abort or a
// loaded cache that breaks the reader's promises is a bug. See docs/fuzzing.md.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/fp16.h"
#include "kvcache/cache_file.h"
#include "kvcache/kv_cache.h"
#include "kvcache/page_pool.h"

namespace {

volatile uint8_t g_sink;

#define FUZZ_CHECK(cond)                                                                   \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      std::fprintf(stderr, "fuzz_kvc: check failed: %s (line %d)\n", #cond, __LINE__);     \
      std::abort();                                                                        \
    }                                                                                      \
  } while (0)

// What load_cache promises about a cache it accepted.
void check_loaded(const kvs::KvCache& c, const kvs::CacheHeaderLayout& h) {
  const kvs::KvLayout& l = c.layout();
  FUZZ_CHECK(c.n_past() == h.n_past);
  FUZZ_CHECK(c.total_slots() == h.slots);
  size_t slots = 0;
  for (int layer = 0; layer < l.n_layer; ++layer) {
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      const kvs::HeadCache& hc = c.head(layer, kvh);
      FUZZ_CHECK(hc.mass.empty() || hc.mass.size() == hc.pos.size());
      for (int32_t s = 0; s < hc.len(); ++s) {
        FUZZ_CHECK(hc.pos[s] >= 0 && hc.pos[s] < h.n_past);
        FUZZ_CHECK(s == 0 || hc.pos[s] > hc.pos[s - 1]);
        if (!hc.mass.empty()) FUZZ_CHECK(std::isfinite(hc.mass[s]) && hc.mass[s] > 0);
        // Read every element of the row in the pool's dtype: ASan catches a row outside its page,
        // and every value must be finite.
        for (const uint8_t* row : {c.k_row(layer, kvh, s), c.v_row(layer, kvh, s)}) {
          for (int d = 0; d < l.head_dim; ++d) {
            float x;
            if (l.dtype == kvs::DType::F16) {
              uint16_t b;
              std::memcpy(&b, row + 2 * d, 2);
              x = kvs::fp16_to_fp32(b);
            } else {
              std::memcpy(&x, row + 4 * d, 4);
            }
            FUZZ_CHECK(std::isfinite(x));
          }
        }
      }
      slots += static_cast<size_t>(hc.len());
    }
  }
  FUZZ_CHECK(slots == h.slots);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The file = input + checksum(input).
  std::vector<uint8_t> file(data, data + size);
  const uint64_t sum = kvs::cache_file_checksum(data, size);
  const auto* sb = reinterpret_cast<const uint8_t*>(&sum);
  file.insert(file.end(), sb, sb + 8);

  kvs::CacheHeaderLayout h;
  try {
    const nlohmann::json header = kvs::parse_cache_header(file.data(), file.size(), "fuzz.kvc");
    h = kvs::check_cache_header(header, "fuzz.kvc");  // parse_cache_header already checked it
  } catch (const kvs::Error&) {
    return 0;
  }
  FUZZ_CHECK(h.n_layer >= 1 && h.n_head_kv >= 1 && h.head_dim >= 1 && h.n_past >= 0);
  // A matching layout, with small pages (several per head) and, for odd-sized inputs, the other
  // storage dtype, so the conversion on load is exercised too. The pool is capped at 64 MiB: a
  // header may describe more than that, which must end in the "memory cap" error. Its chunks are
  // the engine's (whole 2 MiB huge pages): with a fixed 16 small pages per 2 MiB allocation, the
  // cap's worth of pages would have needed thousands of them.
  kvs::KvLayout layout = h.layout(4);
  if (size % 2 == 1) layout.dtype = layout.dtype == kvs::DType::F16 ? kvs::DType::F32 : kvs::DType::F16;
  kvs::PagePool pool(layout.page_bytes(), size_t{64} << 20);
  try {
    kvs::LoadedCache lc = kvs::load_cache(file.data(), file.size(), "fuzz.kvc", pool, layout);
    FUZZ_CHECK(lc.cache != nullptr);
    check_loaded(*lc.cache, h);
    g_sink = static_cast<uint8_t>(lc.meta.size());
  } catch (const kvs::Error&) {
  }
  // Every page is back in the pool once the cache is gone.
  FUZZ_CHECK(pool.pages_in_use() == 0);
  return 0;
}
