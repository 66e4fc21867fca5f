// Running a program (the kvshrink binary built beside the tests, chromium) from a test: argv
// without a shell, stdin from /dev/null, stdout/stderr captured through files in a folder, killed
// after a timeout.
#pragma once
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace kvs::test {

inline std::string kvshrink_binary() { return (std::filesystem::path(KVS_BINARY_DIR) / "tools" / "kvshrink").string(); }

inline std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The full path of `name` on $PATH, or "" when absent.
inline std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    const std::filesystem::path p = std::filesystem::path(dir.empty() ? "." : dir) / name;
    if (::access(p.c_str(), X_OK) == 0) return p.string();
  }
  return {};
}

struct ProcResult {
  int exit_code = -1;  // -1: killed by a signal or the timeout
  int signal = 0;      // the signal that ended it (SIGKILL after a timeout), else 0
  bool timed_out = false;
  std::string out, err;
};

// argv[0] is the program's path. Output files go to `dir` (named after `tag`).
inline ProcResult run_process(const std::vector<std::string>& argv_s, const std::string& dir, const std::string& tag,
                              int timeout_s = 60) {
  const std::string out_path = dir + "/" + tag + ".stdout", err_path = dir + "/" + tag + ".stderr";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int in = ::open("/dev/null", O_RDONLY);
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) ::_exit(127);
    ::dup2(in, 0), ::dup2(out, 1), ::dup2(err, 2);
    ::setpgid(0, 0);  // its own group: a timeout kills chromium's children too
    std::vector<std::string> copy = argv_s;
    std::vector<char*> argv;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ProcResult r;
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = read_all(out_path);
  r.err = read_all(err_path);
  return r;
}

// kvshrink with `args`.
inline ProcResult run_kvshrink(const std::vector<std::string>& args, const std::string& dir, const std::string& tag,
                               int timeout_s = 60) {
  std::vector<std::string> a = {kvshrink_binary()};
  a.insert(a.end(), args.begin(), args.end());
  return run_process(a, dir, tag, timeout_s);
}

}  // namespace kvs::test
