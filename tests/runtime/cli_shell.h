// The kvshrink command line run through the shell, for the CLI tests of tests/runtime.
#pragma once
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace kvs::test {

inline std::string kvshrink_bin() { return (std::filesystem::path(KVS_BINARY_DIR) / "tools" / "kvshrink").string(); }

// Runs `env kvshrink args` through the shell (stdin from /dev/null), stdout and stderr into
// `out`; returns the exit code (-1 when it did not exit normally).
inline int kvshrink_shell(const std::string& args, std::string& out, const std::string& env = "") {
  const std::string cmd = env + " '" + kvshrink_bin() + "' " + args + " 2>&1 < /dev/null";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return -1;
  out.clear();
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  const int st = ::pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace kvs::test
