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
