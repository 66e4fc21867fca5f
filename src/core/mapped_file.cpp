#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/paths.h"

namespace kvs {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  // Checked before opening (a FIFO's open blocks until a writer comes), then again on the open
  // descriptor (O_NONBLOCK: the path may have been swapped for a FIFO in between).
  require_regular_file(path, "the file");
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail("{}: cannot stat: {}", path, std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: the file must be a regular file, but it changed while being opened", path);
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail("{}: cannot mmap {} bytes: {}", path, size_, std::strerror(e));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() { reset(); }

void MappedFile::reset() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)), data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    reset();
    path_ = std::move(o.path_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail("{}: read error", path);
  return ss.str();
}

}  // namespace kvs

namespace kvs {
size_t resident_bytes(const void* p, size_t n) {
  if (p == nullptr || n == 0) return 0;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n + page - 1) & ~(page - 1);
  size_t npages = (end - begin) / page;
  std::vector<unsigned char> vec(npages);
  if (::mincore(reinterpret_cast<void*>(begin), end - begin, vec.data()) != 0) return n;
  size_t res = 0;
  for (size_t i = 0; i < npages; ++i)
    if (vec[i] & 1) res += page;
  return res < n ? res : n;
}
}  // namespace kvs

namespace kvs {
size_t map_huge_pages(const void* p, size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE) && defined(MREMAP_FIXED)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t b = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t e = (reinterpret_cast<uintptr_t>(p) + n) & ~(kHuge - 1);
  if (p == nullptr || e <= b) return 0;
  const size_t len = e - b;
  // A 2 MiB-aligned anonymous region of len bytes: over-allocate, trim both ends.
  void* r = ::mmap(nullptr, len + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (r == MAP_FAILED) return 0;
  const uintptr_t rb = reinterpret_cast<uintptr_t>(r), a = (rb + kHuge - 1) & ~(kHuge - 1);
  if (a > rb) ::munmap(r, a - rb);
  if (rb + len + kHuge > a + len) ::munmap(reinterpret_cast<void*>(a + len), rb + len + kHuge - (a + len));
  void* dst = reinterpret_cast<void*>(a);
  ::madvise(dst, len, MADV_HUGEPAGE);  // best effort: without THP the copy is plain pages
  std::memcpy(dst, reinterpret_cast<const void*>(b), len);
  if (::mprotect(dst, len, PROT_READ) != 0 ||
      ::mremap(dst, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, reinterpret_cast<void*>(b)) == MAP_FAILED) {
    ::munmap(dst, len);
    return 0;
  }
  return len;
#else
  (void)p;
  (void)n;
  return 0;
#endif
}
}  // namespace kvs
