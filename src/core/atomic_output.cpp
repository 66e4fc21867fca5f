#include "core/atomic_output.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/paths.h"

namespace kvs {
namespace fs = std::filesystem;

namespace {

constexpr size_t kBufSize = 1 << 20;
std::atomic<uint64_t> g_tmp_counter{0};

std::mutex g_hook_mu;
std::function<void(const std::string&)> g_fault_hook;

void run_fault_hook(const std::string& path) {
  std::function<void(const std::string&)> h;
  {
    std::lock_guard<std::mutex> lk(g_hook_mu);
    h = g_fault_hook;
  }
  if (h) h(path);
}

uint32_t random_u32() {
  static thread_local std::mt19937 rng{std::random_device{}() ^ static_cast<uint32_t>(::getpid())};
  return static_cast<uint32_t>(rng());
}

// Target path without trailing separators ("out/" -> "out").
std::string strip_trailing_slashes(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string parent_of(const std::string& path) {
  const fs::path p = fs::path(path).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

// fsync of a directory, so that a rename in it survives a crash. Some file systems refuse to
// fsync directories (EINVAL); that is not an error of ours.
void fsync_dir(const std::string& dir, const std::string& what) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) fail("{}: cannot open directory '{}' to sync it: {}", what, dir, std::strerror(errno));
  const int r = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  if (r != 0 && e != EINVAL && e != EROFS) fail("{}: fsync of directory '{}' failed: {}", what, dir, std::strerror(e));
}

// Start time of process `pid` in seconds since the epoch (from /proc), or -1 if unknown.
double process_start_time(long pid) {
  std::ifstream st(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(st, line)) return -1;
  const size_t rp = line.rfind(')');  // the command name may hold spaces and parentheses
  if (rp == std::string::npos) return -1;
  std::istringstream rest(line.substr(rp + 2));
  std::string field;
  unsigned long long start_ticks = 0;
  for (int i = 3; i <= 22 && rest >> field; ++i)  // field 22: starttime (clock ticks after boot)
    if (i == 22) start_ticks = std::strtoull(field.c_str(), nullptr, 10);
  if (start_ticks == 0) return -1;
  std::ifstream ps("/proc/stat");
  double btime = -1;
  while (std::getline(ps, line))
    if (line.rfind("btime ", 0) == 0) btime = std::strtod(line.c_str() + 6, nullptr);
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (btime < 0 || hz <= 0) return -1;
  return btime + static_cast<double>(start_ticks) / static_cast<double>(hz);
}

// Whether the temporary `path`, named with `pid`, may still belong to a running writer.
bool owner_may_be_alive(long pid, const struct stat& st) {
  if (pid == static_cast<long>(::getpid())) return true;  // ours (another thread's output)
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  // The pid runs; if that process started after the temporary was last changed, the pid was
  // reused and the writer is gone. (2 s of slack for clock granularity.)
  const double start = process_start_time(pid);
  return start < 0 || start <= static_cast<double>(st.st_ctime) + 2.0;
}

}  // namespace

// ---------------------------------------------------------------- names and stale temporaries

namespace detail {

std::string temp_name_beside(const std::string& target) {
  const fs::path t(strip_trailing_slashes(target));
  const std::string name = fmt::format(".{}{}{}.{}.{:08x}", t.filename().string(), kTempTag,
                                       static_cast<long>(::getpid()), g_tmp_counter.fetch_add(1), random_u32());
  return (t.parent_path() / name).string();
}

long temp_owner_pid(std::string_view name) {
  if (name.empty() || name[0] != '.') return -1;
  const size_t tag = name.rfind(kTempTag);
  if (tag == std::string_view::npos || tag == 0) return -1;
  std::string_view rest = name.substr(tag + kTempTag.size());  // "<pid>.<n>.<hex>"
  long pid = 0;
  size_t i = 0;
  for (; i < rest.size() && rest[i] >= '0' && rest[i] <= '9'; ++i) {
    pid = pid * 10 + (rest[i] - '0');
    if (pid > (1L << 31)) return -1;
  }
  if (i == 0 || i >= rest.size() || rest[i] != '.' || pid <= 0) return -1;
  size_t j = i + 1, k = j;
  while (k < rest.size() && rest[k] >= '0' && rest[k] <= '9') ++k;
  if (k == j || k >= rest.size() || rest[k] != '.') return -1;
  if (k + 1 == rest.size()) return -1;
  for (size_t m = k + 1; m < rest.size(); ++m)
    if (!std::isxdigit(static_cast<unsigned char>(rest[m]))) return -1;
  return pid;
}

void set_output_fault_hook(std::function<void(const std::string& path)> hook) {
  std::lock_guard<std::mutex> lk(g_hook_mu);
  g_fault_hook = std::move(hook);
}

}  // namespace detail

size_t remove_stale_temporaries(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const long pid = detail::temp_owner_pid(e->d_name);
    if (pid <= 0) continue;
    const std::string p = (fs::path(dir) / e->d_name).string();
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) continue;
    if (!owner_may_be_alive(pid, st)) stale.push_back(p);
  }
  ::closedir(d);
  size_t n = 0;
  for (const auto& p : stale) {
    std::error_code ec;
    if (fs::remove_all(p, ec) > 0 && !ec) ++n;
  }
  return n;
}

// ---------------------------------------------------------------- checks

void check_output_file(const std::string& path, const std::string& what) {
  if (path.empty()) fail("{}: the output path is empty", what);
  if (path.back() == '/') fail("{}: '{}' names a directory, but a file is expected", what, path);
  const std::string type = describe_path_type(path);
  if (type != "missing" && type != "a regular file")
    fail("{}: '{}' is {}; expected a regular file to write (or a new name)", what, path, type);
  const std::string parent = parent_of(path);
  const std::string ptype = describe_path_type(parent);
  if (ptype != "a directory")
    fail("{}: cannot write '{}': its directory '{}' is {}", what, path, parent,
         ptype == "missing" ? "missing" : ptype);
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    fail("{}: cannot write '{}': directory '{}' is not writable ({})", what, path, parent, std::strerror(errno));
}

void check_output_dir(const std::string& path_in, const std::string& what, const std::string& marker) {
  if (path_in.empty()) fail("{}: the output path is empty", what);
  const std::string path = strip_trailing_slashes(path_in);
  const std::string type = describe_path_type(path);
  if (type == "a directory") {
    if (!marker.empty()) {
      std::error_code ec;
      const bool empty = fs::is_empty(path, ec);
      if (ec) fail("{}: cannot read directory '{}': {}", what, path, ec.message());
      if (!empty && describe_path_type((fs::path(path) / marker).string()) != "a regular file")
        fail("{}: '{}' is a non-empty directory without {}; it would be replaced as a whole, so "
             "kvshrink only writes into a new or empty directory or one holding an earlier output",
             what, path, marker);
    }
  } else if (type != "missing") {
    fail("{}: '{}' is {}; expected a directory (or a new name)", what, path, type);
  }
  // The nearest existing ancestor must be a writable directory (missing parents are created).
  fs::path anc = fs::absolute(fs::path(path)).lexically_normal().parent_path();
  while (!anc.empty() && describe_path_type(anc.string()) == "missing" && anc != anc.parent_path())
    anc = anc.parent_path();
  const std::string atype = describe_path_type(anc.string());
  if (atype != "a directory") fail("{}: cannot create '{}': '{}' is {}", what, path, anc.string(), atype);
  if (::access(anc.c_str(), W_OK | X_OK) != 0)
    fail("{}: cannot write '{}': directory '{}' is not writable ({})", what, path, anc.string(), std::strerror(errno));
}

// ---------------------------------------------------------------- one file

AtomicOutput::AtomicOutput(std::string path) : path_(std::move(path)) {
  if (path_.empty()) fail("cannot write a file with an empty path");
  const std::string type = describe_path_type(path_);
  if (type != "missing" && type != "a regular file")
    fail("{}: cannot write: the path is {}, not a regular file", path_, type);
  const std::string parent = parent_of(path_);
  remove_stale_temporaries(parent);
  tmp_path_ = detail::temp_name_beside(path_);
  fd_ = ::open(tmp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) fail("{}: cannot create temporary file '{}': {}", path_, tmp_path_, std::strerror(errno));
  struct stat st {};
  if (type == "a regular file" && ::stat(path_.c_str(), &st) == 0)
    (void)::fchmod(fd_, st.st_mode & 07777);  // keep the permissions of the file replaced
  buf_.resize(kBufSize);
}

AtomicOutput::~AtomicOutput() {
  if (!committed_) discard();
}

void AtomicOutput::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_path_.empty()) ::unlink(tmp_path_.c_str());
}

void AtomicOutput::write_fd(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("{}: write failed: {}", path_, std::strerror(errno));
    }
    if (w == 0) fail("{}: write failed: no progress (device full?)", path_);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicOutput::flush_buffer() {
  if (buf_used_ > 0) write_fd(buf_.data(), buf_used_);
  buf_used_ = 0;
}

void AtomicOutput::write(const void* data, size_t n) {
  if (committed_ || fd_ < 0) fail("{}: write after commit", path_);
  if (n == 0) return;  // data may be null for an empty block
  written_ += n;
  if (n >= buf_.size()) {  // large blocks (tensor data) bypass the buffer
    flush_buffer();
    write_fd(data, n);
    return;
  }
  if (buf_used_ + n > buf_.size()) flush_buffer();
  std::memcpy(buf_.data() + buf_used_, data, n);
  buf_used_ += n;
}

void AtomicOutput::write_zeros(size_t n) {
  static const uint8_t zeros[4096] = {};
  while (n > 0) {
    const size_t k = n < sizeof(zeros) ? n : sizeof(zeros);
    write(zeros, k);
    n -= k;
  }
}

void AtomicOutput::commit() {
  if (committed_) return;
  if (fd_ < 0) fail("{}: commit after a failed write", path_);
  flush_buffer();
  if (::fsync(fd_) != 0) fail("{}: fsync failed: {}", path_, std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail("{}: close failed: {}", path_, std::strerror(errno));
  run_fault_hook(path_);
  if (std::rename(tmp_path_.c_str(), path_.c_str()) != 0)
    fail("{}: cannot rename '{}' into place: {}", path_, tmp_path_, std::strerror(errno));
  committed_ = true;
  fsync_dir(parent_of(path_), path_);
}

void write_file_atomic(const std::string& path, const void* data, size_t n) {
  AtomicOutput f(path);
  f.write(data, n);
  f.commit();
}

// ---------------------------------------------------------------- a folder

AtomicDir::AtomicDir(std::string dir, std::string marker) : dir_(strip_trailing_slashes(std::move(dir))) {
  check_output_dir(dir_, dir_, marker);
  const std::string parent = parent_of(dir_);
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) fail("{}: cannot create directory '{}': {}", dir_, parent, ec.message());
  remove_stale_temporaries(parent);
  staging_ = detail::temp_name_beside(dir_);
  if (::mkdir(staging_.c_str(), 0777) != 0)
    fail("{}: cannot create staging directory '{}': {}", dir_, staging_, std::strerror(errno));
  struct stat st {};
  if (::stat(dir_.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) (void)::chmod(staging_.c_str(), st.st_mode & 07777);
}

AtomicDir::~AtomicDir() {
  if (committed_) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

std::string AtomicDir::path(std::string_view name) const { return (fs::path(staging_) / name).string(); }

void AtomicDir::write_file(std::string_view name, std::string_view bytes) { write_file_atomic(path(name), bytes); }

void AtomicDir::commit() {
  if (committed_) return;
  fsync_dir(staging_, dir_);
  run_fault_hook(dir_);
  // Swap in. A concurrent writer may create or replace dir_ at any moment: retry on races.
  std::string old;  // where the previous output went, to be removed
  bool done = false;
  for (int attempt = 0; attempt < 8 && !done; ++attempt) {
    if (std::rename(staging_.c_str(), dir_.c_str()) == 0) {  // dir_ missing or an empty directory
      done = true;
      break;
    }
    if (errno != ENOTEMPTY && errno != EEXIST)
      fail("{}: cannot move the staged output '{}' into place: {}", dir_, staging_, std::strerror(errno));
    if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, dir_.c_str(), RENAME_EXCHANGE) == 0) {
      old = staging_;  // the previous output now sits at the staging name
      done = true;
      break;
    }
    if (errno == ENOENT) continue;  // dir_ vanished meanwhile: plain rename again
    if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
      fail("{}: cannot swap in the staged output '{}': {}", dir_, staging_, std::strerror(errno));
    // No atomic exchange here: move the old folder away, then the new one in.
    const std::string away = detail::temp_name_beside(dir_);
    if (std::rename(dir_.c_str(), away.c_str()) != 0) {
      if (errno == ENOENT) continue;
      fail("{}: cannot move the previous output aside: {}", dir_, std::strerror(errno));
    }
    if (std::rename(staging_.c_str(), dir_.c_str()) != 0) {
      const int e = errno;
      (void)std::rename(away.c_str(), dir_.c_str());  // put the old one back
      fail("{}: cannot move the staged output '{}' into place: {}", dir_, staging_, std::strerror(e));
    }
    old = away;
    done = true;
  }
  if (!done) fail("{}: cannot move the staged output into place: the directory keeps changing", dir_);
  committed_ = true;
  fsync_dir(parent_of(dir_), dir_);
  if (!old.empty()) {
    std::error_code ec;
    fs::remove_all(old, ec);  // a failure leaves a temporary that the next run removes
  }
}

}  // namespace kvs
