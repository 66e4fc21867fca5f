// The .kvc trailing checksum is part of the file format: files written by earlier builds must
// keep loading. It is FNV-1a 64 (core/hash.h) with the project's own initial value
// 1469598103934665603 (not FNV's standard offset basis), so the values are pinned here.
#include <gtest/gtest.h>

#include <string_view>

#include "core/hash.h"
#include "kvcache/cache_file.h"

namespace kvs {
namespace {

uint64_t sum(std::string_view s) { return cache_file_checksum(s.data(), s.size()); }

TEST(CacheFileChecksum, IsThePinnedFnv1a) {
  EXPECT_EQ(sum(""), 0x14650fb0739d0383ull);
  EXPECT_EQ(sum("a"), 0x44bd8ad473cd9906ull);
  EXPECT_EQ(sum("foobar"), 0x88fad7c0a8ff07f2ull);
  EXPECT_EQ(sum("foobar"), fnv1a("foobar"));
  EXPECT_EQ(kFnv1aInit, 1469598103934665603ull);
}

}  // namespace
}  // namespace kvs
