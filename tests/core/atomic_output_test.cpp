// core/atomic_output: files and staged folders reach their target whole or not at all; concurrent
// writers leave one complete output; temporaries of dead runs are removed; output checks.
#include "core/atomic_output.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) {
    path = fs::path(testing::TempDir()) / ("kvs_atomic_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& f) const { return (path / f).string(); }
};

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Entries of `dir` whose names carry the temporary tag.
std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(kTempTag) != std::string::npos) out.push_back(e.path().filename().string());
  return out;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A pid that is certainly not running: a child that has exited and been reaped.
long dead_pid() {
  const pid_t c = ::fork();
  if (c == 0) ::_exit(0);
  int st = 0;
  ::waitpid(c, &st, 0);
  return static_cast<long>(c);
}

struct HookGuard {
  ~HookGuard() { detail::set_output_fault_hook({}); }
};

}  // namespace

TEST(AtomicOutput, WritesReplacesAndLeavesNoTemporary) {
  TempDir d("basic");
  write_file_atomic(d / "a.bin", std::string_view("first"));
  EXPECT_EQ(slurp(d / "a.bin"), "first");
  write_file_atomic(d / "a.bin", std::string_view("second, longer"));
  EXPECT_EQ(slurp(d / "a.bin"), "second, longer");
  // Zero-length writes (null data) are fine: this was a memcpy from null (UBSan).
  {
    AtomicOutput f(d / "empty.bin");
    f.write(nullptr, 0);
    f.write_zeros(0);
    f.commit();
  }
  EXPECT_TRUE(fs::exists(d / "empty.bin"));
  EXPECT_EQ(fs::file_size(d / "empty.bin"), 0u);
  EXPECT_TRUE(temporaries(d.path).empty());
}

TEST(AtomicOutput, FailureBeforeCommitKeepsTheOldFile) {
  TempDir d("fail");
  write_file_atomic(d / "out", std::string_view("old"));
  try {
    AtomicOutput f(d / "out");
    f.write("new new new", 11);
    EXPECT_EQ(temporaries(d.path).size(), 1u);
    throw std::runtime_error("interrupted");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(slurp(d / "out"), "old");
  EXPECT_TRUE(temporaries(d.path).empty());
  // A failure at the moment of the rename (test hook) also leaves the old file and no temporary.
  HookGuard g;
  detail::set_output_fault_hook([](const std::string& p) {
    if (p.ends_with("out")) throw Error("injected");
  });
  EXPECT_NE(error_of([&] { write_file_atomic(d / "out", std::string_view("newer")); }), "");
  EXPECT_EQ(slurp(d / "out"), "old");
  EXPECT_TRUE(temporaries(d.path).empty());
}

TEST(AtomicOutput, TemporaryNamesAreUniqueAndParsed) {
  const std::string a = detail::temp_name_beside("/x/model.gguf"), b = detail::temp_name_beside("/x/model.gguf");
  EXPECT_NE(a, b);
  EXPECT_TRUE(a.starts_with("/x/.model.gguf.kvshrink-tmp.")) << a;
  EXPECT_EQ(detail::temp_owner_pid(fs::path(a).filename().string()), static_cast<long>(::getpid()));
  EXPECT_EQ(detail::temp_owner_pid(".m.gguf.kvshrink-tmp.123.4.00ab"), 123);
  for (const char* bad : {"m.gguf.kvshrink-tmp.123.4.00ab", ".m.kvshrink-tmp.x.4.00ab", ".m.kvshrink-tmp.12.4.",
                          ".m.kvshrink-tmp.12.4.zz", ".m.kvshrink-tmp.12", ".m.gguf.tmp.123.4", "model.gguf"})
    EXPECT_EQ(detail::temp_owner_pid(bad), -1) << bad;
}

// Two writers of one output, many times over, with a reader watching: every read sees one of the
// two complete contents (never an empty or mixed file), and no temporary is left.
TEST(AtomicOutput, ConcurrentWritersLeaveOneCompleteFile) {
  TempDir d("concurrent");
  const std::string out = d / "ctx.kvc";
  const std::string A(3 << 20, 'A'), B(2 << 20, 'B');
  write_file_atomic(out, A);
  std::atomic<bool> stop{false};
  std::atomic<int> bad{0}, reads{0};
  std::thread reader([&] {
    while (!stop) {
      const std::string s = slurp(out);
      if (s != A && s != B) ++bad;
      ++reads;
    }
  });
  auto writer = [&](const std::string& content) {
    for (int i = 0; i < 20; ++i) write_file_atomic(out, content);
  };
  std::thread wa(writer, A), wb(writer, B);
  wa.join();
  wb.join();
  stop = true;
  reader.join();
  EXPECT_EQ(bad.load(), 0) << "of " << reads.load() << " reads";
  const std::string final_content = slurp(out);
  EXPECT_TRUE(final_content == A || final_content == B);
  EXPECT_TRUE(temporaries(d.path).empty());
}

// The same with two processes (distinct pids in the temporary names).
TEST(AtomicOutput, ConcurrentProcessesLeaveOneCompleteFile) {
  TempDir d("processes");
  const std::string out = d / "m.gguf";
  const std::string A(1 << 20, 'a'), B(1 << 19, 'b');
  pid_t kids[2];
  for (int k = 0; k < 2; ++k) {
    kids[k] = ::fork();
    if (kids[k] == 0) {
      try {
        for (int i = 0; i < 10; ++i) write_file_atomic(out, k == 0 ? A : B);
      } catch (...) {
        ::_exit(1);
      }
      ::_exit(0);
    }
  }
  for (pid_t k : kids) {
    int st = 0;
    ::waitpid(k, &st, 0);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  const std::string s = slurp(out);
  EXPECT_TRUE(s == A || s == B) << s.size() << " bytes";
  EXPECT_TRUE(temporaries(d.path).empty());
}

TEST(AtomicOutput, StaleTemporariesOfDeadRunsAreRemoved) {
  TempDir d("stale");
  const long dead = dead_pid();
  const std::string stale_file = d / fmt::format(".m.gguf.kvshrink-tmp.{}.0.0badf00d", dead);
  const std::string stale_dir = d / fmt::format(".hf.kvshrink-tmp.{}.3.00c0ffee", dead);
  const std::string live = d / fmt::format(".m.gguf.kvshrink-tmp.{}.7.12345678", static_cast<long>(::getpid()));
  const std::string other = d / ".m.gguf.tmp.1.2";  // not ours: never touched
  std::ofstream(stale_file) << "partial";
  fs::create_directories(fs::path(stale_dir) / "sub");
  std::ofstream(fs::path(stale_dir) / "config.json") << "{}";
  std::ofstream(live) << "being written";
  std::ofstream(other) << "x";
  write_file_atomic(d / "m.gguf", std::string_view("model"));
  EXPECT_FALSE(fs::exists(stale_file));
  EXPECT_FALSE(fs::exists(stale_dir));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
  EXPECT_EQ(remove_stale_temporaries(d.path.string()), 0u);
}

TEST(AtomicDir, SwapsAWholeFolderAndDropsFilesOfTheOldOutput) {
  TempDir d("dir");
  const std::string out = d / "hf";
  {
    AtomicDir a(out, "config.json");
    a.write_file("config.json", "{\"v\": 1}");
    a.write_file("tokenizer.json", "old tokenizer");
    EXPECT_FALSE(fs::exists(out));  // nothing visible before commit
    a.commit();
  }
  EXPECT_EQ(slurp(out + "/config.json"), "{\"v\": 1}");
  {
    AtomicDir b(out + "/", "config.json");  // a trailing slash names the same folder
    b.write_file("config.json", "{\"v\": 2}");
    b.write_file("tokenizer.model", "new tokenizer");
    b.commit();
  }
  EXPECT_EQ(slurp(out + "/config.json"), "{\"v\": 2}");
  EXPECT_TRUE(fs::exists(out + "/tokenizer.model"));
  EXPECT_FALSE(fs::exists(out + "/tokenizer.json"));  // the old conversion's file is gone
  EXPECT_TRUE(temporaries(d.path).empty());
}

TEST(AtomicDir, FailureInTheMiddleKeepsTheOldFolder) {
  TempDir d("dir_fail");
  const std::string out = d / "hf";
  {
    AtomicDir a(out, "config.json");
    a.write_file("config.json", "old config");
    a.write_file("model.safetensors", "old weights");
    a.commit();
  }
  HookGuard g;
  for (const char* where : {"model.safetensors", "hf"}) {  // a file of the folder; the swap itself
    SCOPED_TRACE(where);
    detail::set_output_fault_hook([where](const std::string& p) {
      if (fs::path(p).filename() == where) throw Error(std::string("injected failure at ") + where);
    });
    const std::string err = error_of([&] {
      AtomicDir b(out, "config.json");
      b.write_file("config.json", "new config");
      b.write_file("model.safetensors", "new weights");
      b.commit();
    });
    EXPECT_NE(err.find("injected"), std::string::npos) << err;
    EXPECT_EQ(slurp(out + "/config.json"), "old config");
    EXPECT_EQ(slurp(out + "/model.safetensors"), "old weights");
    EXPECT_TRUE(temporaries(d.path).empty());
  }
}

TEST(AtomicDir, ConcurrentWritersLeaveOneConsistentFolder) {
  TempDir d("dir_concurrent");
  const std::string out = d / "hf";
  auto writer = [&](char tag) {
    for (int i = 0; i < 15; ++i) {
      AtomicDir a(out, "config.json");
      a.write_file("config.json", std::string(100, tag));
      a.write_file("model.safetensors", std::string(100000, tag));
      a.commit();
    }
  };
  std::thread ta(writer, 'x'), tb(writer, 'y');
  ta.join();
  tb.join();
  const std::string c = slurp(out + "/config.json"), m = slurp(out + "/model.safetensors");
  ASSERT_EQ(c.size(), 100u);
  ASSERT_EQ(m.size(), 100000u);
  EXPECT_EQ(c, std::string(100, c[0]));
  EXPECT_EQ(m, std::string(100000, c[0]));  // both files from the same writer
  EXPECT_TRUE(temporaries(d.path).empty());
}

TEST(AtomicOutput, OutputPathsAreCheckedBeforeWork) {
  TempDir d("checks");
  fs::create_directories(d / "adir");
  std::ofstream(d / "afile") << "x";
  fs::create_directories(d / "stuff");
  std::ofstream(d / "stuff/notes.txt") << "mine";
  EXPECT_NE(error_of([&] { check_output_file(d / "adir", "-o"); }).find("is a directory"), std::string::npos);
  EXPECT_NE(error_of([&] { check_output_file(d / "missing/x.gguf", "-o"); }).find("missing"), std::string::npos);
  EXPECT_NE(error_of([&] { check_output_file("", "-o"); }).find("empty"), std::string::npos);
  EXPECT_NE(error_of([&] { check_output_file(d / "new/", "-o"); }).find("directory"), std::string::npos);
  EXPECT_EQ(error_of([&] { check_output_file(d / "afile", "-o"); }), "");
  EXPECT_EQ(error_of([&] { check_output_file(d / "new.gguf", "-o"); }), "");
  EXPECT_NE(error_of([&] { check_output_dir(d / "afile", "-o"); }).find("is a regular file"), std::string::npos);
  EXPECT_NE(error_of([&] { check_output_dir(d / "stuff", "-o", "config.json"); }).find("without config.json"),
            std::string::npos);
  EXPECT_EQ(error_of([&] { check_output_dir(d / "adir", "-o", "config.json"); }), "");  // empty
  EXPECT_EQ(error_of([&] { check_output_dir(d / "a/b/c", "-o", "config.json"); }), "");  // parents created later
  EXPECT_NE(error_of([&] { check_output_dir(d / "afile/sub", "-o"); }), "");
  // AtomicDir refuses to replace a folder of other things.
  EXPECT_NE(error_of([&] { AtomicDir x(d / "stuff", "config.json"); }), "");
  EXPECT_TRUE(fs::exists(d / "stuff/notes.txt"));
  // AtomicOutput refuses a directory target.
  EXPECT_NE(error_of([&] { AtomicOutput x(d / "adir"); }).find("directory"), std::string::npos);
}

}  // namespace kvs
