// A real redis-server (Debian's package, installed by scripts/setup) started by a test on a free
// loopback port, in its own directory; stopped (or killed, paused, restarted) by the test.
#pragma once
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "server/redis_client.h"

namespace kvs::test {

inline std::string redis_server_binary() {
  for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server"})
    if (::access(p, X_OK) == 0) return p;
  return "";
}

// A loopback port nobody listens on now.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

struct RedisProcess {
  std::string dir;
  int port = 0;
  bool aof = false;
  std::string password;
  pid_t pid = -1;

  RedisProcess(std::string dir_, bool aof_ = false, std::string password_ = "")
      : dir(std::move(dir_)), port(free_port()), aof(aof_), password(std::move(password_)) {
    std::filesystem::create_directories(dir);
    start();
  }
  ~RedisProcess() { stop(SIGKILL); }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port); }

  void start() {
    const std::string bin = redis_server_binary();
    ASSERT_FALSE(bin.empty()) << "redis-server is not installed (scripts/setup installs it)";
    std::vector<std::string> args = {bin, "--port", std::to_string(port), "--bind", "127.0.0.1", "--dir", dir,
                                     "--save", "", "--appendonly", aof ? "yes" : "no", "--appendfsync", "always",
                                     "--logfile", dir + "/redis.log"};
    if (!password.empty()) args.insert(args.end(), {"--requirepass", password});
    pid = ::fork();
    if (pid == 0) {
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    // Ready when it answers PING (NOAUTH counts: it is up).
    server::RedisOptions o;
    o.timeout = std::chrono::milliseconds(200);
    o.retry = std::chrono::milliseconds(0);
    o.password = password;
    server::RedisClient c(server::parse_redis_url(url()), o);
    for (int i = 0; i < 300; ++i) {
      try {
        c.command({"PING"});
        return;
      } catch (const server::RedisError& e) {
        if (!e.connection()) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ADD_FAILURE() << "redis-server on port " << port << " did not answer";
  }
  void stop(int sig = SIGTERM) {
    if (pid <= 0) return;
    ::kill(pid, SIGCONT);
    ::kill(pid, sig);
    int st = 0;
    ::waitpid(pid, &st, 0);
    pid = -1;
  }
  void pause() { ::kill(pid, SIGSTOP); }
  void resume() { ::kill(pid, SIGCONT); }
  // A client for the test's own checks.
  std::unique_ptr<server::RedisClient> client() const {
    server::RedisOptions o;
    o.password = password;
    o.retry = std::chrono::milliseconds(0);
    return std::make_unique<server::RedisClient>(server::parse_redis_url(url()), o);
  }
};

}  // namespace kvs::test
