// The memory budget for request bodies bounds what they cost, parsing included.
// Before, the 256 MiB budget counted raw bytes only, and 34-100 refused 8 MB requests pushed the
// server to ~1 GiB (a body is copied by the JSON lexer, the DOM and the request: ~4x). Here many
// clients send bodies at the limit at once; the server's peak RSS must stay within the budget
// (plus a fixed allowance), every client gets an answer, and the budget is all given back.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "server/body_budget.h"
#include "server_test_util.h"

namespace kvs {
namespace {

using nlohmann::json;

// VmRSS of this process in bytes.
size_t rss_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return static_cast<size_t>(std::stoull(line.substr(6))) * 1024;
  return 0;
}

// Sends `bytes` in pieces, stopping as soon as the server answers (a refusal comes before the
// body is read); returns the response.
std::string send_until_answered(int port, const std::string& head, const std::string& body) {
  const int fd = test::connect_to(port);
  if (fd < 0) return {};
  ::send(fd, head.data(), head.size(), MSG_NOSIGNAL);
  size_t off = 0;
  while (off < body.size()) {
    pollfd p{fd, POLLIN | POLLOUT, 0};
    if (::poll(&p, 1, 5000) <= 0) break;
    if (p.revents & (POLLIN | POLLERR | POLLHUP)) break;  // answered (or closed)
    const ssize_t n = ::send(fd, body.data() + off, std::min<size_t>(body.size() - off, 64 << 10), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0 && errno != EAGAIN) break;
    if (n > 0) off += static_cast<size_t>(n);
  }
  const std::string r = test::read_response(fd, 30);
  ::close(fd);
  return r;
}

class BodyBudgetMemory : public test::StoriesModelSuite {};

TEST_F(BodyBudgetMemory, ConcurrentLargeRefusedBodiesStayWithinTheBudget) {
#ifdef __SANITIZE_ADDRESS__
  // ASan's redzones and freed-memory quarantine hold several times what the program allocates, so
  // an RSS bound means nothing there (the cost accounting itself is checked in BodyBudget.*).
  GTEST_SKIP() << "RSS bound not meaningful under AddressSanitizer (its quarantine holds freed memory)";
#endif
  server::ServeOptions o = test::test_options();
  o.http.limits.max_body_bytes = size_t{8} << 20;
  o.http.connections.max_body_buffer_bytes = size_t{96} << 20;
  o.http.connections.max_connections = 64;
  test::TestServer s(*model_, o);
  // A prompt of ~8 MB: refused (over --max-prompt-tokens) after it is parsed, as in the review.
  const std::string body = json{{"prompt", std::string(8'000'000, 'a')}, {"max_tokens", 1}}.dump();
  const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  // The cost charged for one such body is more than a quarter of the budget: two fit at a time.
  const size_t cost = server::BodyBudget::cost_of(body.size(), o.http.limits.max_json_values());
  ASSERT_GT(cost * 4, o.http.connections.max_body_buffer_bytes);
  ASSERT_LE(cost * 2, o.http.connections.max_body_buffer_bytes);

  std::atomic<bool> done{false};
  std::atomic<size_t> peak{0};
  const size_t start = rss_bytes();
  std::thread sampler([&] {
    while (!done) {
      const size_t r = rss_bytes();
      if (r > peak) peak = r;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  int busy = 0, refused = 0, other = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<std::future<std::string>> rs;
    for (int i = 0; i < 16; ++i)
      rs.push_back(std::async(std::launch::async, [&] { return send_until_answered(s.port(), head, body); }));
    for (auto& f : rs) {
      const std::string r = f.get();
      const int st = test::raw_status(r);
      const json j = test::raw_body_json(r);
      if (st == 503 && j["error"]["code"] == "server_busy") {
        ++busy;
        EXPECT_EQ(test::raw_header(r, "Retry-After"), "1");
      } else if (st == 400 && j["error"]["code"] == "context_length_exceeded") {
        ++refused;
      } else {
        ++other;
        ADD_FAILURE() << "unexpected answer: " << r.substr(0, 300);
      }
    }
  }
  done = true;
  sampler.join();
  EXPECT_EQ(other, 0);
  EXPECT_GE(refused, 3) << "bodies that fit the budget are parsed and answered";
  EXPECT_GE(busy, 1) << "the budget never filled: the test did not load the server";
  const double growth_mib = (static_cast<double>(peak.load()) - static_cast<double>(start)) / 1048576.0;
  // The budget, plus what the server's threads and buffers hold besides bodies.
  EXPECT_LT(growth_mib, 96 + 48) << "peak RSS grew " << growth_mib << " MiB under a 96 MiB body budget";
  std::printf("peak RSS growth %.1f MiB (budget 96 MiB), %d parsed, %d refused with 503\n", growth_mib, refused, busy);
  EXPECT_EQ(test::metric(test::get(s, "/metrics").body, "kvshrink_http_body_bytes"), 0);
  // The server still serves.
  EXPECT_EQ(test::post(s, "/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 1}}).status, 200);
}

// The charge covers the 4 copies of a body and a node per value, and never overflows the budget.
TEST(BodyBudget, CostAndAccounting) {
  EXPECT_EQ(server::BodyBudget::cost_of(0, 100), 0u);
  EXPECT_EQ(server::BodyBudget::cost_of(1000, 100), 4000u + 128u * 100u);
  EXPECT_EQ(server::BodyBudget::cost_of(10, 100), 40u + 128u * 10u);
  server::BodyBudget b(1000);
  EXPECT_TRUE(b.try_take(600));
  EXPECT_FALSE(b.try_take(401));
  EXPECT_EQ(b.held(), 600u);
  EXPECT_TRUE(b.try_take(400));
  EXPECT_FALSE(b.try_take(1));
  EXPECT_FALSE(b.try_take(SIZE_MAX));
  b.give_back(1000);
  EXPECT_EQ(b.held(), 0u);
}

}  // namespace
}  // namespace kvs
