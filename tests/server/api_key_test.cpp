// An API key no client could send is refused at start-up (a usage error, exit 1),
// and --api-key-file gives the key without showing it in `ps`.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <regex>

#include "cli_process.h"
#include "core/error.h"
#include "server/request_guard.h"
#include "server_test_util.h"

namespace kvs {
namespace {

TEST(ApiKey, UnsendableKeysRefused) {
  for (const std::string& bad : std::vector<std::string>{"   ", "\t", " key", "key ", "ke\x01y", std::string("ke\0y", 4)}) {
    EXPECT_NE(server::api_key_problem(bad), "") << "'" << bad << "'";
    server::GuardOptions g;
    g.api_key = bad;
    EXPECT_THROW(server::RequestGuard{g}, Error) << "'" << bad << "'";
  }
  EXPECT_EQ(server::api_key_problem("s3cret key-with inner space"), "");
  EXPECT_EQ(server::api_key_problem(""), "is empty");
}

class ServeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(test::kvshrink_binary())) GTEST_SKIP() << "no kvshrink binary";
  }
};

TEST_F(ServeCli, UnusableKeysAreUsageErrors) {
  test::TempDir dir("serve_api_key");
  const std::string blank = dir.str() + "/blank.key", missing = dir.str() + "/missing.key";
  { std::ofstream(blank) << "   \nsecond line\n"; }
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  const std::vector<Case> cases = {
      {{"--api-key", "   "}, "--api-key is only whitespace"},
      {{"--api-key", " k "}, "--api-key begins or ends with whitespace"},
      {{"--api-key-file", blank}, "the key is only whitespace"},
      {{"--api-key-file", missing}, "missing.key"},
      {{"--api-key", "k", "--api-key-file", blank}, "not both"},
  };
  int i = 0;
  for (const Case& c : cases) {
    std::vector<std::string> args = {"serve", "-m", test::stories_gguf(), "--port", "0"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const test::ProcResult r = test::run_kvshrink(args, dir.str(), "case" + std::to_string(i++), 30);
    EXPECT_EQ(r.exit_code, 1) << c.says << ": " << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("listening"), std::string::npos) << r.err;
  }
}

// The key from a file: required on requests, absent from the command line the process shows.
TEST_F(ServeCli, KeyFileIsUsedAndNotOnTheCommandLine) {
  test::TempDir dir("serve_api_key_file");
  const std::string key = "file-key-8f3a91";
  const std::string path = dir.str() + "/api.key";
  { std::ofstream(path) << key << "\n"; }
  const std::string err_path = dir.str() + "/serve.stderr";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(err, 2);
    const std::string bin = test::kvshrink_binary(), model = test::stories_gguf();
    ::execl(bin.c_str(), bin.c_str(), "serve", "-m", model.c_str(), "--port", "0", "-t", "1", "--api-key-file",
            path.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ASSERT_GT(pid, 0);
  int port = 0;
  const std::regex listening(R"(listening on http://[^:]+:(\d+))");
  for (int i = 0; i < 600 && port == 0; ++i) {
    std::smatch m;
    const std::string err = test::read_all(err_path);
    if (std::regex_search(err, m, listening)) port = std::stoi(m[1]);
    else std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (port > 0) {
    const std::string cmdline = test::read_all("/proc/" + std::to_string(pid) + "/cmdline");
    EXPECT_EQ(cmdline.find(key), std::string::npos);
    const std::string get = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n";
    EXPECT_EQ(test::raw_status(test::raw_exchange(port, get + "\r\n")), 401);
    EXPECT_EQ(test::raw_status(test::raw_exchange(port, get + "Authorization: Bearer " + key + "x\r\n\r\n")), 401);
    EXPECT_EQ(test::raw_status(test::raw_exchange(port, get + "Authorization: Bearer " + key + "\r\n\r\n")), 200);
    EXPECT_NE(test::read_all(err_path).find("API key required"), std::string::npos);
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_GT(port, 0) << "the server did not start: " << test::read_all(err_path);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << test::read_all(err_path);
}

}  // namespace
}  // namespace kvs
