// The one way kvshrink writes outputs (model files, HF folders, saved caches).
//
// A file goes to a temporary beside the target, named
//   .<target name>.kvshrink-tmp.<pid>.<counter>.<random hex>
// every write, the fsync and the close are checked, then it is renamed over the target and the
// directory is fsynced. On any failure or exception before commit() the temporary is removed and
// the target is untouched. Two writers of one target never share a temporary: the last rename
// wins and the target always holds one complete output.
//
// A folder (a Hugging Face model: config.json, model.safetensors, tokenizer files) is staged as a
// whole in a temporary sibling folder with the same kind of name and swapped in by commit(): the
// old folder and the new one are exchanged atomically (renameat2 RENAME_EXCHANGE; where the file
// system lacks it: old renamed away, new renamed in), then the old one is removed. A reader sees
// the old output or the new one, never a mix, and no file of the old output survives.
//
// Temporaries left by killed runs (the name above, owner pid no longer running) are removed
// whenever kvshrink next writes into that directory. (The pid is checked on this machine: writers
// on other hosts or pid namespaces sharing the directory are not told apart; a temporary removed
// under a live writer makes that writer fail cleanly at its rename, never a mixed output.)
//
//   AtomicOutput f("model.gguf");  f.write(p, n);  f.commit();
//   write_file_atomic("doc.kvc", bytes.data(), bytes.size());
//   AtomicDir d("hf-out", "config.json");
//   write_safetensors(d.path("model.safetensors"), ...);  d.write_file("config.json", text);  d.commit();
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace kvs {

// The tag in every temporary name (files and staged folders).
inline constexpr std::string_view kTempTag = ".kvshrink-tmp.";

class AtomicOutput {
 public:
  // Removes stale temporaries beside `path`, then creates this writer's temporary. Throws
  // kvs::Error naming the path (an existing target that is not a regular file, a missing or
  // unwritable directory).
  explicit AtomicOutput(std::string path);
  ~AtomicOutput();  // removes the temporary unless committed
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;

  void write(const void* data, size_t n);  // buffered; throws kvs::Error naming the path
  void write_zeros(size_t n);
  uint64_t size() const { return written_; }  // bytes written so far
  // flush + fsync + close + rename over the target + fsync of the directory; throws kvs::Error.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_path_; }

 private:
  void flush_buffer();
  void write_fd(const void* data, size_t n);
  void discard() noexcept;

  std::string path_;
  std::string tmp_path_;
  int fd_ = -1;
  std::vector<uint8_t> buf_;
  size_t buf_used_ = 0;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// A whole file in one call (AtomicOutput + commit).
void write_file_atomic(const std::string& path, const void* data, size_t n);
inline void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, bytes.data(), bytes.size());
}

class AtomicDir {
 public:
  // Checks `dir` (check_output_dir with `marker`), removes stale temporaries beside it and
  // creates the staging folder (and the missing parents of `dir`).
  explicit AtomicDir(std::string dir, std::string marker = "");
  ~AtomicDir();  // removes the staging folder unless committed
  AtomicDir(const AtomicDir&) = delete;
  AtomicDir& operator=(const AtomicDir&) = delete;

  // Where a file named `name` is written before commit (inside the staging folder). Write it
  // with AtomicOutput or a writer built on it (write_safetensors, GgufWriter::write).
  std::string path(std::string_view name) const;
  void write_file(std::string_view name, std::string_view bytes);  // write_file_atomic(path(name))
  // fsync of the staging folder, swap into place, removal of the old folder, fsync of the parent.
  void commit();

  const std::string& dir() const { return dir_; }
  const std::string& staging() const { return staging_; }

 private:
  std::string dir_;
  std::string staging_;
  bool committed_ = false;
};

// Checks made before long work starts. `what` names the option ("-o", "--out").
// A file output: the path is not empty, does not end in '/', is a regular file if it exists, and
// its directory exists and is writable.
void check_output_file(const std::string& path, const std::string& what);
// A folder output: the path is a directory if it exists, and, when `marker` is given and the
// directory is not empty, holds `marker` (so that a folder of other things is never replaced);
// the nearest existing ancestor is a writable directory.
void check_output_dir(const std::string& path, const std::string& what, const std::string& marker = "");

// Removes the temporaries in `dir` whose owner process is gone (the pid in the name is not
// running, or was started after the temporary was last changed). Returns how many were removed.
// Errors are ignored (another run may remove the same entry).
size_t remove_stale_temporaries(const std::string& dir);

namespace detail {
// "<dir>/.<name of target>.kvshrink-tmp.<pid>.<n>.<hex>" beside `target`.
std::string temp_name_beside(const std::string& target);
// The pid in a temporary's file name, or -1 if `name` is not one.
long temp_owner_pid(std::string_view name);
// Test hook: called with each output's final path just before it is moved into place (a file
// inside a staged folder, then the folder itself); it may throw to simulate a failure there.
// Pass an empty function to remove it.
void set_output_fault_hook(std::function<void(const std::string& path)> hook);
}  // namespace detail

}  // namespace kvs
