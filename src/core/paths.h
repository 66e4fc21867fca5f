// Checks on paths before they are opened: opening a FIFO for reading blocks until a writer comes
// (forever, for a model path), and a device has no end. Every reader of model files and saved
// caches refuses anything but a regular file (symlinks are followed) with a kvs::Error naming
// the path, what it was meant to be and what it is.
#pragma once
#include <string>

namespace kvs {

// "a regular file", "a directory", "a FIFO", "a character device", "a block device", "a socket",
// "missing", "unreadable (REASON)".
std::string describe_path_type(const std::string& path);

// Throws "PATH: WHAT must be a regular file, but it is a FIFO" (or missing, a directory, ...).
void require_regular_file(const std::string& path, const std::string& what);
// Throws unless `path` is a directory.
void require_directory(const std::string& path, const std::string& what);
// For an existing path: a regular file, or a directory when `dir_ok`; missing paths pass (the
// caller reports them its own way).
void require_regular_if_present(const std::string& path, const std::string& what, bool dir_ok = false);

// kvshrink's files beside its binary: `<dir of the running executable>/../share/kvshrink` (an
// install's prefix/share/kvshrink, or the build tree's share/kvshrink, which the build lays out the
// same way). No source or build path is compiled in, so a binary moved with its share/ folder works.
std::string share_dir();

}  // namespace kvs
