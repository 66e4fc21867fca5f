#include "core/paths.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace kvs {
namespace {

// stat(2) (follows symlinks); returns errno, 0 on success.
int stat_path(const std::string& path, struct stat* st) { return ::stat(path.c_str(), st) == 0 ? 0 : errno; }

std::string describe_mode(mode_t m) {
  if (S_ISREG(m)) return "a regular file";
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::string describe_path_type(const std::string& path) {
  struct stat st {};
  const int e = stat_path(path, &st);
  if (e == ENOENT || e == ENOTDIR) return "missing";
  if (e != 0) return std::string("unreadable (") + std::strerror(e) + ")";
  return describe_mode(st.st_mode);
}

void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  const int e = stat_path(path, &st);
  if (e != 0) fail("{}: cannot open {}: {}", path, what, std::strerror(e));
  if (!S_ISREG(st.st_mode)) fail("{}: {} must be a regular file, but it is {}", path, what, describe_mode(st.st_mode));
}

void require_directory(const std::string& path, const std::string& what) {
  struct stat st {};
  const int e = stat_path(path, &st);
  if (e != 0) fail("{}: cannot open {}: {}", path, what, std::strerror(e));
  if (!S_ISDIR(st.st_mode)) fail("{}: {} must be a directory, but it is {}", path, what, describe_mode(st.st_mode));
}

void require_regular_if_present(const std::string& path, const std::string& what, bool dir_ok) {
  struct stat st {};
  const int e = stat_path(path, &st);
  if (e == ENOENT || e == ENOTDIR) return;
  if (e != 0) fail("{}: cannot open {}: {}", path, what, std::strerror(e));
  if (S_ISREG(st.st_mode) || (dir_ok && S_ISDIR(st.st_mode))) return;
  fail("{}: {} must be a regular file{}, but it is {}", path, what, dir_ok ? " or a directory" : "",
       describe_mode(st.st_mode));
}

std::string share_dir() {
  // /proc/self/exe names the running binary (symlinks resolved); the Python module's "executable" is
  // the interpreter, so for it this is the interpreter's prefix/share/kvshrink (an installed layout).
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  const std::filesystem::path exe(std::string(buf, static_cast<size_t>(n)));
  return (exe.parent_path().parent_path() / "share" / "kvshrink").string();
}

}  // namespace kvs
