// Starting and stopping (issue 23, defects 5 and 6): a second server on a taken port refuses to
// start (before: SO_REUSEPORT let both listen, the kernel splitting connections between them);
// stop() (SIGTERM in `kvshrink serve`) closes the door, lets in-flight requests finish within the
// grace period, then fails the rest with 503 — a stream gets an error event and [DONE] — and
// returns (before: streams were cut with neither, and requests delayed exit by up to 86 s).
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "core/error.h"
#include "server_test_util.h"

namespace kvs {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

class Lifecycle : public test::StoriesModelSuite {};

TEST_F(Lifecycle, TakenPortRefused) {
  server::ServeOptions o = test::test_options();
  test::TestServer a(*model_, o);
  o.http.port = a.port();
  try {
    server::Server b(*model_, o);
    ADD_FAILURE() << "a second server started on a taken port";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in use"), std::string::npos) << e.what();
  }
  // A port another program listens on (a plain socket, no SO_REUSEPORT).
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  o.http.port = ntohs(addr.sin_port);
  EXPECT_THROW(server::Server(*model_, o), Error);
  ::close(fd);
  // Once free, the port can be taken again at once (SO_REUSEADDR: connections in TIME_WAIT).
  server::Server again(*model_, o);
  EXPECT_EQ(again.port(), o.http.port);
}

TEST_F(Lifecycle, StopFinishesOrFailsInFlightRequests) {
  server::ServeOptions o = test::test_options();
  o.scheduler.parallel = 2;
  o.scheduler.step_delay_ms = 10;
  o.http.limits.max_tokens = 400;
  o.http.shutdown_grace_s = 0.5;
  auto srv = std::make_unique<server::Server>(*model_, o);
  const int port = srv->port();
  std::thread th([&] { srv->run(); });
  const std::string long_body = json{{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"ignore_eos", true}}.dump();
  // A stream, a plain request and one waiting in the queue.
  const int fd = test::connect_to(port);
  ASSERT_GE(fd, 0);
  const std::string sreq = test::raw_post(
      "/v1/completions", json{{"prompt", "Once upon a time"}, {"max_tokens", 400}, {"ignore_eos", true}, {"stream", true}}.dump());
  ::send(fd, sreq.data(), sreq.size(), MSG_NOSIGNAL);
  std::string streamed;
  char buf[4096];
  while (streamed.find("data: ") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    streamed.append(buf, static_cast<size_t>(n));
  }
  auto plain = std::async(std::launch::async, [&] {
    return test::raw_exchange(port, test::raw_post("/v1/completions", long_body));
  });
  auto queued = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    return test::raw_exchange(port, test::raw_post("/v1/completions", long_body));
  });
  bool queued_one = false;
  for (int i = 0; i < 1500 && !queued_one; ++i) {  // up to 30 s on a loaded machine
    const std::string m = test::raw_exchange(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    // Two running (the stream and the plain request) and one waiting: the third.
    queued_one = m.find("\nkvshrink_sequences_queued 1\n") != std::string::npos &&
                 m.find("\nkvshrink_sequences_running 2\n") != std::string::npos;
    if (!queued_one) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(queued_one) << "the third request never waited in the queue";
  const auto t0 = Clock::now();
  srv->stop();
  // The stream ends with an error event, [DONE] and the chunked terminator.
  for (;;) {  // until the server closes the connection
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    streamed.append(buf, static_cast<size_t>(n));
  }
  EXPECT_EQ(streamed.substr(streamed.size() - 5), "0\r\n\r\n") << "the chunked stream is not terminated";
  ::close(fd);
  EXPECT_NE(streamed.find("\"code\":\"shutting_down\""), std::string::npos) << streamed.substr(streamed.size() - 400);
  EXPECT_NE(streamed.find("data: [DONE]"), std::string::npos);
  const std::string p = plain.get(), q = queued.get();
  EXPECT_EQ(test::raw_status(p), 503) << p;
  EXPECT_EQ(test::raw_body_json(p)["error"]["code"], "shutting_down");
  EXPECT_EQ(test::raw_status(q), 503) << "[" << q << "] plain: " << p.substr(0, 200) << " stream tail: " << streamed.substr(streamed.size() > 300 ? streamed.size() - 300 : 0);
  th.join();
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_GE(took, 0.4);
  EXPECT_LT(took, 8.0) << "stop() must return within the grace period plus a little (2 s; loaded machines)";
  EXPECT_LT(test::connect_to(port), 0) << "still accepting connections after stop";
  srv.reset();
}

TEST_F(Lifecycle, StopLetsShortRequestsFinish) {
  server::ServeOptions o = test::test_options();
  o.scheduler.step_delay_ms = 10;
  o.http.shutdown_grace_s = 5;
  auto srv = std::make_unique<server::Server>(*model_, o);
  const int port = srv->port();
  std::thread th([&] { srv->run(); });
  // About 0.3 s of work, well within the grace: it completes; an idle keep-alive connection
  // is closed at once and does not hold the stop.
  const int idle = test::connect_to(port);
  auto r = std::async(std::launch::async, [&] {
    return test::raw_exchange(port, test::raw_post("/v1/completions",
                                                   json{{"prompt", "Hi"}, {"max_tokens", 30}, {"ignore_eos", true}}.dump()));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto t0 = Clock::now();
  srv->stop();
  const std::string got = r.get();
  EXPECT_EQ(test::raw_status(got), 200) << got;
  EXPECT_EQ(test::raw_header(got, "Connection"), "close");
  th.join();
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 4.5) << "within the 5 s grace";
  char c;
  EXPECT_EQ(::recv(idle, &c, 1, 0), 0) << "the idle connection is closed";
  ::close(idle);
}

}  // namespace
}  // namespace kvs
