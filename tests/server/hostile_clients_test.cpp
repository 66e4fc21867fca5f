// The server against hostile clients over raw sockets (issue 23): bodies over the limit whatever
// their framing, slow and idle clients that must not keep /health or real requests out, caps on
// connections per client and in total, lying or malformed Content-Length answered at once,
// request lines and headers that never end. Limits are small here (test_options + the
// overrides below) so that every case takes a fraction of a second.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <thread>
#include <vector>

#include "server_test_util.h"

namespace kvs {
namespace {

using nlohmann::json;
using test::Reply;

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class HostileClients : public test::StoriesModelSuite {
 protected:
  static server::ServeOptions options() {
    server::ServeOptions o = test::test_options();
    o.http.limits.max_body_bytes = 64 << 10;
    o.http.connections.max_connections = 24;
    o.http.connections.max_connections_per_client = 0;
    o.http.connections.idle_timeout_s = 0.5;
    o.http.connections.header_timeout_s = 0.6;
    o.http.connections.body_timeout_s = 0.6;
    return o;
  }
};

// GET /health on a fresh connection; its latency in seconds, or -1 when it failed (`got` then
// says what came back, for the failure message).
double health_latency(int port, std::string* got = nullptr) {
  const auto t = Clock::now();
  const int fd = test::connect_to(port);
  if (fd < 0) {
    if (got) *got = "connect failed: " + std::string(std::strerror(errno));
    return -1;
  }
  const std::string req = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  const std::string r = test::read_response(fd, 5);
  ::close(fd);
  if (got) *got = r.substr(0, 400);
  return test::raw_status(r) == 200 ? since(t) : -1;
}

// Defect 1: a chunked body is capped like a Content-Length one (before: read whole, RSS +164 MB
// for 100 MB). 64 MiB offered in 16 KiB chunks to a 64 KiB limit: 413, and the server stops
// reading long before the end.
TEST_F(HostileClients, ChunkedBodyOverTheLimitIs413AndNotRead) {
  test::TestServer s(*model_, options());
  const int fd = test::connect_to(s.port());
  ASSERT_GE(fd, 0);
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  const std::string chunk = "4000\r\n" + std::string(16 << 10, ' ') + "\r\n";
  const timeval tv{0, 200000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  size_t sent = 0;
  for (int i = 0; i < 4096; ++i) {  // 64 MiB
    const ssize_t n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  const std::string r = test::read_response(fd, 5);
  ::close(fd);
  EXPECT_EQ(test::raw_status(r), 413) << r.substr(0, 300);
  EXPECT_EQ(test::raw_body_json(r)["error"]["code"], "request_too_large");
  EXPECT_LT(sent, size_t{32} << 20) << "the server went on reading a body it had refused";
  // The same with a Content-Length: refused from the header, before any body byte.
  const std::string over = test::raw_exchange(
      s.port(), "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                "Content-Length: 100000000\r\n\r\n");
  EXPECT_EQ(test::raw_status(over), 413);
  const std::string text = test::get(s, "/metrics").body;
  EXPECT_EQ(test::metric(text, "kvshrink_http_body_bytes"), 0);
  // A chunked body under the limit still works (and keeps the connection).
  const std::string body = json{{"prompt", "Hi"}, {"max_tokens", 2}}.dump();
  char len[16];
  std::snprintf(len, sizeof len, "%zx", body.size());
  const std::string ok = test::raw_exchange(
      s.port(), "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                "Transfer-Encoding: chunked\r\n\r\n" + std::string(len) + "\r\n" + body + "\r\n0\r\n\r\n");
  EXPECT_EQ(test::raw_status(ok), 200) << ok;
}

// Defect 9: an over-limit, malformed or conflicting Content-Length is answered at once (before:
// after draining the declared body for 30 s), and a lying one (more than is sent) within the
// body timeout, not the old 30 s read timeout (issue 29 item 6: the old test sent an honest one).
TEST_F(HostileClients, BadContentLengthAnsweredAtOnce) {
  server::ServeOptions o = options();
  o.http.connections.body_timeout_s = 30;  // a lying body is answered when it stalls (header timeout)
  test::TestServer s(*model_, o);
  struct Case {
    std::string headers;
    int status;
  };
  const std::vector<Case> cases = {
      {"Content-Length: 999999999999\r\n", 413},
      {"Content-Length: abc\r\n", 400},
      {"Content-Length: -5\r\n", 400},
      {"Content-Length: 5\r\nContent-Length: 6\r\n", 400},
      {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", 400},
      {"Transfer-Encoding: gzip\r\n", 400},
  };
  for (const Case& c : cases) {
    const auto t = Clock::now();
    const int fd = test::connect_to(s.port());
    const std::string req =
        "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" + c.headers + "\r\n";
    ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    const std::string r = test::read_response(fd, 5);  // the client sends no body and waits
    ::close(fd);
    EXPECT_EQ(test::raw_status(r), c.status) << c.headers << " -> " << r.substr(0, 300);
    EXPECT_LT(since(t), 5.0) << c.headers << ": not answered at once";  // generous: a loaded machine
    test::expect_error_shape(test::raw_body_json(r), c.headers);
  }
  // A lying Content-Length: 1000 announced, 10 sent, the connection left open: answered once the
  // body has stalled for the header timeout (0.6 s), not at the 30 s body deadline.
  const auto t = Clock::now();
  const int fd = test::connect_to(s.port());
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Content-Length: 1000\r\n\r\n{\"prompt\":";
  ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
  const std::string r = test::read_response(fd, 5);
  ::close(fd);
  EXPECT_EQ(test::raw_status(r), 408) << r.substr(0, 300);
  EXPECT_EQ(test::raw_body_json(r)["error"]["code"], "request_timeout");
  EXPECT_GE(since(t), 0.5);
  EXPECT_LT(since(t), 5.0);
  // A request with no length at all has no body (RFC 9112 6.3): answered, not waited on.
  const auto t2 = Clock::now();
  const std::string del = test::raw_exchange(s.port(), "DELETE /v1/contexts/ctx_none HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  EXPECT_EQ(test::raw_status(del), 404) << del;
  EXPECT_LT(since(t2), 5.0);
  EXPECT_EQ(test::post(s, "/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 1}}).status, 200);
}

// Defect 2: slow clients (a byte at a time) and idle sockets, more of them than the connection
// cap, do not take the server down: /health keeps answering quickly, and each of them gets a
// reply (408 when its time is up, 503 when evicted to make room), never silence.
TEST_F(HostileClients, SlowAndIdleClientsDoNotBlockHealth) {
  test::TestServer s(*model_, options());
  const int port = s.port();
  std::atomic<bool> stop{false};
  std::atomic<int> connected{0};
  std::vector<std::future<int>> slow;
  for (int i = 0; i < 30; ++i) {  // 30 > the cap of 24
    slow.push_back(std::async(std::launch::async, [port, &stop, &connected] {
      const int fd = test::connect_to(port);
      ++connected;
      if (fd < 0) return -1;
      const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: ";
      std::string got;
      for (size_t k = 0; !stop; k = (k + 1) % req.size()) {
        if (::send(fd, &req[k], 1, MSG_NOSIGNAL) != 1) break;
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 50) > 0) break;  // the server answered (or closed)
      }
      got = test::read_response(fd, 3);
      ::close(fd);
      return test::raw_status(got);
    }));
  }
  // The probes start once every attacker is connected: /health must get through the slow and idle
  // sockets already there. (A probe that races attackers still arriving can be the oldest waiting
  // connection when the 25th arrives after it, and evicted: seen under ASan on a loaded machine.)
  while (connected < 30) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::vector<int> idle;
  for (int i = 0; i < 30; ++i) idle.push_back(test::connect_to(port));
  for (int k = 0; k < 10; ++k) {
    std::string got;
    const double l = health_latency(port, &got);
    EXPECT_GE(l, 0) << "/health did not answer 200 (probe " << k << "): " << got;
    EXPECT_LT(l, 3.0) << "/health answered slowly under slow and idle clients";
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // A real request gets through too.
  EXPECT_EQ(test::post(s, "/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 2}}).status, 200);
  stop = true;
  for (auto& f : slow) {
    const int st = f.get();
    EXPECT_TRUE(st == 408 || st == 503) << "a slow client got " << st;
  }
  int replied = 0;
  for (int fd : idle) {
    const std::string r = test::read_response(fd, 3);
    replied += test::raw_status(r) == 408 || test::raw_status(r) == 503;
    ::close(fd);
  }
  EXPECT_EQ(replied, 30) << "idle connections must be told why they are closed";
  const std::string text = test::get(s, "/metrics").body;
  EXPECT_GT(test::metric(text, "kvshrink_http_connections_evicted_total") +
                test::metric(text, "kvshrink_http_timeouts_total{phase=\"headers\"}"),
            0);
}

// Defect 2: a request line or headers that never end (the cap on their bytes) and one that comes
// too slowly (the header deadline counts from the first byte, so a byte every 100 ms is no way
// around it).
TEST_F(HostileClients, EndlessHeadersRefused) {
  test::TestServer s(*model_, options());
  const std::string big = test::raw_exchange(
      s.port(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + std::string(100 << 10, 'a') + "\r\n\r\n");
  EXPECT_EQ(test::raw_status(big), 431) << big.substr(0, 200);
  // A request line over its 8 KiB: 414 for an over-long target, as documented.
  const std::string line = test::raw_exchange(s.port(), "GET /" + std::string(100 << 10, 'a'));
  EXPECT_EQ(test::raw_status(line), 414) << line.substr(0, 200);
  const auto t = Clock::now();
  const int fd = test::connect_to(s.port());
  const std::string req = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  std::string r;
  for (char c : req + std::string(100, 'x')) {
    if (::send(fd, &c, 1, MSG_NOSIGNAL) != 1) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) > 0) break;
  }
  r = test::read_response(fd, 3);
  ::close(fd);
  EXPECT_EQ(test::raw_status(r), 408) << r;
  EXPECT_LT(since(t), 5.0);
}

// Defect 2: the per-client cap answers 503 with Retry-After at once; other clients get in.
TEST_F(HostileClients, PerClientConnectionCap) {
  server::ServeOptions o = options();
  o.http.connections.max_connections_per_client = 4;
  o.http.connections.idle_timeout_s = 5;
  test::TestServer s(*model_, o);
  std::vector<int> mine;
  for (int i = 0; i < 4; ++i) mine.push_back(test::connect_from(s.port(), "127.0.0.5"));
  for (int fd : mine) ASSERT_GE(fd, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const int fifth = test::connect_from(s.port(), "127.0.0.5");
  ASSERT_GE(fifth, 0);
  const std::string r = test::read_response(fifth, 2);
  ::close(fifth);
  EXPECT_EQ(test::raw_status(r), 503) << r;
  EXPECT_EQ(test::raw_header(r, "Retry-After"), "1");
  EXPECT_EQ(test::raw_body_json(r)["error"]["code"], "too_many_connections");
  // Another address is not affected.
  const int other = test::connect_from(s.port(), "127.0.0.6");
  const std::string h = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  ::send(other, h.data(), h.size(), MSG_NOSIGNAL);
  EXPECT_EQ(test::raw_status(test::read_response(other, 2)), 200);
  ::close(other);
  for (int fd : mine) ::close(fd);
  EXPECT_GT(test::metric(test::get(s, "/metrics").body, "kvshrink_http_connections_rejected_total{reason=\"per_client\"}"), 0);
}

// Past the per-client cap (one address holding many idle connections: loopback,
// or everything behind one proxy) /health still answers; any other request from that address
// gets 503 too_many_connections, and a silent extra connection gets it within a second.
TEST_F(HostileClients, HealthAnswersPastThePerClientCap) {
  server::ServeOptions o = options();
  o.http.connections.max_connections = 128;
  o.http.connections.max_connections_per_client = 8;
  o.http.connections.idle_timeout_s = 5;
  test::TestServer s(*model_, o);
  const std::string addr = "127.0.0.9";
  std::vector<int> idle;
  for (int i = 0; i < 60; ++i) {  // 8 under the cap, then more than the probe slots over it
    const int fd = test::connect_from(s.port(), addr);
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string health = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  for (int k = 0; k < 9; ++k) {
    const int fd = test::connect_from(s.port(), addr);
    ASSERT_GE(fd, 0);
    ::send(fd, health.data(), health.size(), MSG_NOSIGNAL);
    const std::string r = test::read_response(fd, 5);
    ::close(fd);
    EXPECT_EQ(test::raw_status(r), 200) << "probe " << k << ": " << r.substr(0, 300);
  }
  // Other requests from the address over its cap: 503 with Retry-After, at once.
  const auto t = Clock::now();
  const int fd = test::connect_from(s.port(), addr);
  const std::string models = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  ::send(fd, models.data(), models.size(), MSG_NOSIGNAL);
  const std::string r = test::read_response(fd, 5);
  ::close(fd);
  EXPECT_EQ(test::raw_status(r), 503) << r.substr(0, 300);
  EXPECT_EQ(test::raw_body_json(r)["error"]["code"], "too_many_connections");
  EXPECT_EQ(test::raw_header(r, "Retry-After"), "1");
  EXPECT_LT(since(t), 2.0);
  // The extra idle connections were told (503 within the probe wait), the 8 under the cap were not.
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  int told = 0;
  for (int f : idle) {
    pollfd p{f, POLLIN, 0};
    if (::poll(&p, 1, 0) > 0 && test::raw_status(test::read_response(f, 1)) == 503) ++told;
    ::close(f);
  }
  EXPECT_EQ(told, 52);
  // Another address is not affected, and /metrics counts the refusals as per-client ones.
  const Reply m = test::get(s, "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_GE(test::metric(m.body, "kvshrink_http_connections_rejected_total{reason=\"per_client\"}"), 52);
}

// Defect 4: with the queue full, admission answers 429 and Retry-After whatever the connection
// settings (before: 64 HTTP threads < 16 running + 64 queued, so 120 clients never saw a 429).
TEST_F(HostileClients, FullQueueAnswers429WithRetryAfter) {
  server::ServeOptions o = options();
  o.scheduler.parallel = 1;
  o.scheduler.max_queue = 2;
  o.scheduler.step_delay_ms = 5;
  o.http.connections.max_connections = 64;
  o.http.connections.idle_timeout_s = 5;
  test::TestServer s(*model_, o);
  std::vector<std::future<std::string>> rs;
  for (int i = 0; i < 12; ++i)
    rs.push_back(std::async(std::launch::async, [&s] {
      return test::raw_exchange(s.port(), test::raw_post("/v1/completions",
                                                         json{{"prompt", "Hi"}, {"max_tokens", 40}, {"ignore_eos", true}}.dump(),
                                                         "Connection: close\r\n"));
    }));
  int ok = 0, busy = 0;
  for (auto& f : rs) {
    const std::string r = f.get();
    if (test::raw_status(r) == 200) ++ok;
    if (test::raw_status(r) == 429) {
      ++busy;
      EXPECT_EQ(test::raw_body_json(r)["error"]["code"], "queue_full");
      const int after = std::atoi(test::raw_header(r, "Retry-After").c_str());
      EXPECT_GE(after, 1) << r;
      EXPECT_LE(after, 60) << r;
    }
  }
  // At least the queue's 2 are served; the third is only when the scheduler has taken the first
  // off the queue before the third arrives (not so under ASan on a loaded machine: seen 2 of 12).
  EXPECT_GE(ok, 2);
  EXPECT_GE(busy, 1) << "a full queue must answer 429";
  EXPECT_EQ(ok + busy, 12);
}

}  // namespace
}  // namespace kvs
