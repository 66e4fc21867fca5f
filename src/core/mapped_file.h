// Read-only memory-mapped file. Errors name the path and the OS reason.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace kvs {

class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);  // throws kvs::Error
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void reset();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) file into a string; throws kvs::Error naming the path.
std::string read_file(const std::string& path);

}  // namespace kvs

namespace kvs {
// Bytes of [p, p+n) currently resident in RAM (mincore on the covering pages; for anonymous
// heap memory that was written, all of it). Used to report a model's resident weight bytes.
size_t resident_bytes(const void* p, size_t n);
}  // namespace kvs

namespace kvs {
// Moves the 2 MiB-aligned interior of [p, p+n) -- part of a read-only mapping the caller owns,
// e.g. a model's tensor data -- into anonymous transparent huge pages at the same addresses
// (copy, then mremap over the original pages), so pointers into it stay valid. Streaming reads
// of weights then take one TLB entry per 2 MiB instead of per 4 KiB (decode reads every weight
// once per token). The range stays read-only; munmap of the enclosing mapping
// releases it. Costs a copy of the range and, while the file stays in the page cache, that much
// extra memory. Must run before other threads read the range. Returns the bytes moved (0 where
// unsupported, for a range under 2 MiB, or on any failure, leaving the mapping as it was).
size_t map_huge_pages(const void* p, size_t n);
}  // namespace kvs
