// Helpers of the server tests: the bundled stories260K model, an in-process server on a free
// loopback port, JSON requests through httplib's client and raw bytes through a plain socket.
#pragma once
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <nlohmann/json.hpp>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cmath>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "model/model.h"
#include "server/server.h"

#include "test_data.h"

namespace kvs::test {

inline std::string stories_gguf() { return test_data("models/stories260K/stories260K.gguf"); }

// A test suite whose tests share one Model of stories260K, loaded once for the suite
// (`class MySuite : public test::StoriesModelSuite {};`, then TEST_F(MySuite, ...) uses model_).
class StoriesModelSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = Model::load(stories_gguf()).release(); }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  inline static Model* model_ = nullptr;
};

// A short story context (about 80 tokens) for the stored-context tests.
inline constexpr const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she "
    "saw a big, red ball. She wanted to play with it, but it was too high. Lily asked her mom to help her. Her mom "
    "said, \"Let's go to the park and play with the ball.\" Lily was very happy.";

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name) {
    path = std::filesystem::path(KVS_BINARY_DIR) / "test_tmp" / (name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

inline server::ServeOptions test_options() {
  server::ServeOptions o;
  o.engine.n_threads = 2;
  o.http.port = 0;  // any free port, loopback
  o.http.shutdown_grace_s = 2;
  o.http.limits.ctx_size = 512;
  o.http.limits.max_prompt_tokens = 400;
  o.http.limits.max_tokens = 256;
  o.scheduler.parallel = 4;
  o.scheduler.max_queue = 8;
  o.scheduler.queue_timeout_s = 30;
  o.scheduler.prefill_chunk = 32;
  return o;
}

// A server running in a thread of this process.
struct TestServer {
  const Model& model;
  std::unique_ptr<server::Server> srv;
  std::thread th;
  TestServer(const Model& m, const server::ServeOptions& o) : model(m), srv(std::make_unique<server::Server>(m, o)) {
    th = std::thread([this] { srv->run(); });
    // listen_after_bind starts accepting at once; wait until /health answers.
    for (int i = 0; i < 200; ++i) {
      httplib::Client c("127.0.0.1", port());
      if (auto r = c.Get("/health"); r && r->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~TestServer() {
    srv->stop();
    th.join();
  }
  int port() const { return srv->port(); }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port());
    c.set_read_timeout(60, 0);
    return c;
  }
};

// One server with test_options() on stories260K, started by the suite's first test and shared
// by its tests (`class MySuite : public test::StoriesServerSuite {};`, then srv()).
class StoriesServerSuite : public StoriesModelSuite {
 protected:
  void SetUp() override {
    if (!server_) server_ = new TestServer(*model_, test_options());
  }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
    StoriesModelSuite::TearDownTestSuite();
  }
  const TestServer& srv() const { return *server_; }
  inline static TestServer* server_ = nullptr;
};

struct Reply {
  int status = 0;
  nlohmann::json json;
  std::string body;
};

inline Reply post(const TestServer& s, const std::string& path, const std::string& body,
                  const httplib::Headers& h = {}) {
  httplib::Client c = s.client();
  auto r = c.Post(path.c_str(), h, body, "application/json");
  Reply out;
  if (!r) return out;
  out.status = r->status;
  out.body = r->body;
  out.json = nlohmann::json::parse(r->body, nullptr, false);
  return out;
}
inline Reply post(const TestServer& s, const std::string& path, const nlohmann::json& body) {
  return post(s, path, body.dump());
}
inline Reply get(const TestServer& s, const std::string& path, const httplib::Headers& h = {}) {
  httplib::Client c = s.client();
  auto r = c.Get(path.c_str(), h);
  Reply out;
  if (!r) return out;
  out.status = r->status;
  out.body = r->body;
  out.json = nlohmann::json::parse(r->body, nullptr, false);
  return out;
}
inline Reply del(const TestServer& s, const std::string& path) {
  httplib::Client c = s.client();
  auto r = c.Delete(path.c_str());
  Reply out;
  if (!r) return out;
  out.status = r->status;
  out.body = r->body;
  out.json = nlohmann::json::parse(r->body, nullptr, false);
  return out;
}

// A socket connected to the server.
inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

// True once `resp` holds a whole response with a Content-Length body.
inline bool raw_complete(const std::string& resp) {
  const auto end = resp.find("\r\n\r\n");
  if (end == std::string::npos) return false;
  std::string head = resp.substr(0, end);
  for (char& ch : head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const auto p = head.find("\r\ncontent-length:");
  if (p == std::string::npos) return false;
  const size_t len = std::strtoull(head.c_str() + p + 17, nullptr, 10);
  return resp.size() >= end + 4 + len;
}

// Sends raw bytes, reads until a whole response came (or the server closes, or 30 s pass): a
// server that keeps the connection alive after an error does not hold the test.
inline std::string raw_exchange(int port, const std::string& bytes) {
  const int fd = connect_to(port);
  if (fd < 0) return {};
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  while (!raw_complete(out)) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

// A socket connected to the server from a given loopback address (127.0.0.0/8 is all loopback
// on Linux: tests play several clients).
inline int connect_from(int port, const std::string& local_ip) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in l{};
  l.sin_family = AF_INET;
  inet_pton(AF_INET, local_ip.c_str(), &l.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&l), sizeof l) != 0) {
    ::close(fd);
    return -1;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads from `fd` until a whole response came, the server closed, or `seconds` passed.
inline std::string read_response(int fd, double seconds) {
  std::string out;
  char buf[4096];
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int>(seconds * 1000));
  while (!raw_complete(out)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// The value of a response header (case-insensitive name), "" if absent.
inline std::string raw_header(const std::string& resp, const std::string& name) {
  const size_t end = resp.find("\r\n\r\n");
  std::string head = resp.substr(0, end), lname = name;
  for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (char& c : lname) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t p = head.find("\r\n" + lname + ":");
  if (p == std::string::npos) return "";
  size_t b = p + 3 + lname.size();
  while (b < head.size() && head[b] == ' ') ++b;
  return resp.substr(b, std::min(head.find("\r\n", b), head.size()) - b);
}

// A JSON POST as raw bytes (Host: 127.0.0.1, application/json unless `extra` says otherwise).
inline std::string raw_post(const std::string& path, const std::string& body, const std::string& extra = "",
                            const std::string& content_type = "application/json") {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" +
         (content_type.empty() ? std::string() : "Content-Type: " + content_type + "\r\n") + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// The status code of a raw HTTP response ("HTTP/1.1 400 Bad Request" -> 400), 0 if none.
inline int raw_status(const std::string& resp) {
  if (resp.rfind("HTTP/1.", 0) != 0 || resp.size() < 12) return 0;
  return std::atoi(resp.substr(9, 3).c_str());
}
inline nlohmann::json raw_body_json(const std::string& resp) {
  const auto p = resp.find("\r\n\r\n");
  if (p == std::string::npos) return nlohmann::json();
  return nlohmann::json::parse(resp.substr(p + 4), nullptr, false);
}

// Parses a Prometheus text line "name{...} value" or "name value". A metric that is not there
// fails the test (a renamed metric must not pass a "less than" check) and reads as NaN, which
// every comparison refuses.
inline bool has_metric(const std::string& text, const std::string& name_and_labels) {
  for (size_t p = 0; (p = text.find(name_and_labels, p)) != std::string::npos; p += name_and_labels.size()) {
    const size_t after = p + name_and_labels.size();
    if ((p == 0 || text[p - 1] == '\n') && after < text.size() && text[after] == ' ') return true;
  }
  return false;
}
inline double metric(const std::string& text, const std::string& name_and_labels) {
  for (size_t p = 0; (p = text.find(name_and_labels, p)) != std::string::npos; p += name_and_labels.size()) {
    const size_t after = p + name_and_labels.size();
    if ((p == 0 || text[p - 1] == '\n') && after < text.size() && text[after] == ' ') return std::atof(text.c_str() + after + 1);
  }
  ADD_FAILURE() << "no metric '" << name_and_labels << "' in /metrics";
  return std::nan("");
}

// The error object is OpenAI's shape.
inline void expect_error_shape(const nlohmann::json& j, const std::string& ctx) {
  ASSERT_TRUE(j.is_object()) << ctx;
  ASSERT_TRUE(j.contains("error")) << ctx << ": " << j.dump();
  const auto& e = j["error"];
  EXPECT_TRUE(e.contains("message") && e["message"].is_string()) << ctx;
  EXPECT_TRUE(e.contains("type") && e["type"].is_string()) << ctx;
  EXPECT_TRUE(e.contains("param")) << ctx;
  EXPECT_TRUE(e.contains("code")) << ctx;
}

}  // namespace kvs::test
