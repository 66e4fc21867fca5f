// core/mapped_file's map_huge_pages (kept with the kernel tests: it exists for the weight
// streaming the matmul kernels do): contents and addresses unchanged, the mapping still readable
// and released by MappedFile, small ranges left alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/mapped_file.h"

namespace kvs {
namespace {

std::string write_file(size_t bytes) {
  const std::string path = ::testing::TempDir() + "huge_pages_" + std::to_string(::getpid()) + ".bin";
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size()));
  return path;
}

TEST(HugePages, MovesTheAlignedInteriorInPlace) {
  const size_t bytes = (9u << 20) + 12345;
  const std::string path = write_file(bytes);
  {
    MappedFile f(path);
    const std::vector<uint8_t> before(f.data(), f.data() + f.size());
    const uint8_t* p = f.data() + 1000;  // an unaligned range inside the mapping
    const size_t moved = map_huge_pages(p, f.size() - 2000);
#if defined(__linux__)
    EXPECT_GE(moved, size_t{6} << 20);  // at least three whole 2 MiB pages of the ~9 MiB
    EXPECT_EQ(moved % (size_t{2} << 20), 0u);
#endif
    ASSERT_EQ(f.size(), before.size());
    EXPECT_EQ(std::memcmp(f.data(), before.data(), before.size()), 0);
  }  // MappedFile unmaps the whole range, moved part included
  std::remove(path.c_str());
}

TEST(HugePages, LeavesRangesWithoutAWholeHugePage) {
  const std::string path = write_file(3u << 20);
  MappedFile f(path);
  EXPECT_EQ(map_huge_pages(f.data() + 4096, (size_t{2} << 20) - 4096), 0u);  // shorter than 2 MiB
  EXPECT_EQ(map_huge_pages(nullptr, 100), 0u);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kvs
