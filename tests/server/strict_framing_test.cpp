// Strict RFC 9112 framing over raw sockets: every shape RFC 9112 says to
// refuse gets a 400 (never a second request read from what a proxy would call a body), chunk sizes
// past the limit a 413 at once, and the line and head limits answer 414 / 431 exactly as
// docs/server.md states them.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "server/http_framing.h"
#include "server_test_util.h"

namespace kvs {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

class StrictFraming : public test::StoriesModelSuite {
 protected:
  static server::ServeOptions options() {
    server::ServeOptions o = test::test_options();
    o.http.limits.max_body_bytes = 64 << 10;
    o.http.connections.idle_timeout_s = 2;
    o.http.connections.header_timeout_s = 5;  // a refusal that waited for a timeout would show
    o.http.connections.body_timeout_s = 20;
    o.http.api_key = "KEY";
    return o;
  }
};

// Sends `bytes` on a fresh connection and reads until the server closes (or 5 s pass): every
// response the server wrote, so that a second one (a smuggled request) shows.
std::string exchange_until_close(int port, const std::string& bytes) {
  const int fd = test::connect_to(port);
  if (fd < 0) return {};
  ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  std::string out;
  char buf[4096];
  const auto until = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

int responses_in(const std::string& s) {
  int n = 0;
  for (size_t p = 0; (p = s.find("HTTP/1.1 ", p)) != std::string::npos; p += 9) ++n;
  return n;
}

const std::string kAuth = "Authorization: Bearer KEY\r\n";

std::string chunked_post(const std::string& framing) {
  return "POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\n" + kAuth +
         "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + framing;
}

// Each shape from the hostile review, on a fresh connection: one 400 in OpenAI's shape, at once,
// and the connection closed (nothing after it is read as a request).
TEST_F(StrictFraming, MalformedHeadsAndChunksAre400) {
  test::TestServer s(*model_, options());
  const std::string body = R"({"content":"Hello world"})";  // 25 bytes = 0x19
  struct Case {
    const char* name;
    std::string bytes;
    const char* code;
  };
  const std::vector<Case> cases = {
      {"space before colon (Content-Length)",
       "POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\n" + kAuth +
           "Content-Type: application/json\r\nContent-Length : 25\r\n\r\n" + body,
       "bad_request"},
      {"space before colon (Transfer-Encoding)",
       "POST /tokenize HTTP/1.1\r\nHost: 127.0.0.1\r\n" + kAuth +
           "Content-Type: application/json\r\nTransfer-Encoding : chunked\r\n\r\n19\r\n" + body + "\r\n0\r\n\r\n",
       "bad_request"},
      {"tab before colon", "GET /v1/models HTTP/1.1\r\nHost\t: 127.0.0.1\r\n" + kAuth + "\r\n", "bad_request"},
      {"line without colon", "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + kAuth + "Broken header\r\n\r\n",
       "bad_request"},
      {"obs-fold", "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + kAuth + "X-A: b\r\n  c\r\n\r\n", "bad_request"},
      {"whitespace before the first field", "GET /v1/models HTTP/1.1\r\n Host: 127.0.0.1\r\n" + kAuth + "\r\n",
       "bad_request"},
      {"NUL in the key", "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer KEY" + std::string(1, '\0') +
                             "garbage\r\n\r\n",
       "bad_request"},
      {"bare CR in a value", "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + kAuth + "X-A: b\rc\r\n\r\n",
       "bad_request"},
      {"other control byte in a value", "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + kAuth + "X-A: b\x01\r\n\r\n",
       "bad_request"},
      {"bare LF after a field", "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\n" + kAuth + "\r\n", "bad_request"},
      {"bare LF request line", "GET /v1/models HTTP/1.1\nHost: 127.0.0.1\r\n" + kAuth + "\r\n", "bad_request"},
      {"NUL in the target", "GET /v1/mod" + std::string(1, '\0') + "els HTTP/1.1\r\nHost: 127.0.0.1\r\n" + kAuth + "\r\n",
       "bad_request"},
      {"two spaces in the request line", "GET  /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + kAuth + "\r\n",
       "bad_request"},
      {"chunk size 0x19", chunked_post("0x19\r\n" + body + "\r\n0\r\n\r\n"), "bad_framing"},
      {"chunk size ' 19'", chunked_post(" 19\r\n" + body + "\r\n0\r\n\r\n"), "bad_framing"},
      {"chunk size '+19'", chunked_post("+19\r\n" + body + "\r\n0\r\n\r\n"), "bad_framing"},
      {"bare LF chunk framing", chunked_post("19\n" + body + "\n0\n\n"), "bad_framing"},
      {"bare LF after chunk data", chunked_post("19\r\n" + body + "\n0\r\n\r\n"), "bad_framing"},
      {"chunk longer than its size", chunked_post("18\r\n" + body + "\r\n0\r\n\r\n"), "bad_framing"},
      {"trailer fields", chunked_post("19\r\n" + body + "\r\n0\r\nX-T: 1\r\n\r\n"), "bad_framing"},
  };
  for (const Case& c : cases) {
    const auto t = Clock::now();
    const std::string r = exchange_until_close(s.port(), c.bytes);
    EXPECT_EQ(test::raw_status(r), 400) << c.name << " -> " << r.substr(0, 300);
    EXPECT_EQ(responses_in(r), 1) << c.name << " -> " << r;
    EXPECT_EQ(test::raw_body_json(r)["error"]["code"], c.code) << c.name << " -> " << r.substr(0, 400);
    test::expect_error_shape(test::raw_body_json(r), c.name);
    EXPECT_LT(since(t), 3.0) << c.name << ": not answered at once";
  }
  // The well-formed forms of the same requests pass: OWS around values, a chunk extension, hex
  // digits in either case, leading zeros.
  const std::string ok =
      test::raw_exchange(s.port(), chunked_post("0019;ext=\"v\"\r\n" + body + "\r\n0\r\n\r\n"));
  EXPECT_EQ(test::raw_status(ok), 200) << ok.substr(0, 300);
  const std::string ok2 = test::raw_exchange(
      s.port(), "GET /v1/models HTTP/1.1\r\nhost:127.0.0.1 \r\nAUTHORIZATION: \tBearer KEY\t\r\nX-Empty:\r\n\r\n");
  EXPECT_EQ(test::raw_status(ok2), 200) << ok2.substr(0, 300);
  // A percent escape in the key is three bytes, not a NUL that would cut the key short.
  const std::string pct =
      test::raw_exchange(s.port(), "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer KEY%00x\r\n\r\n");
  EXPECT_EQ(test::raw_status(pct), 401) << pct.substr(0, 300);
}

// The CL.0 desync: GET /health with "Content-Length : 100" and a second request as its body. A
// proxy that honours the malformed header forwards one request; the server must not answer two.
TEST_F(StrictFraming, MalformedContentLengthCannotSmuggleASecondRequest) {
  test::TestServer s(*model_, options());
  std::string second = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n" + kAuth + "X-P: ";
  second += std::string(100 - second.size() - 4, 'p') + "\r\n\r\n";
  ASSERT_EQ(second.size(), 100u);
  for (const char* cl : {"Content-Length : 100", "Content-Length\t: 100", "Content-Length :100"}) {
    const std::string r =
        exchange_until_close(s.port(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + std::string(cl) + "\r\n\r\n" + second);
    EXPECT_EQ(responses_in(r), 1) << cl << " -> " << r;
    EXPECT_EQ(test::raw_status(r), 400) << cl << " -> " << r.substr(0, 300);
    EXPECT_EQ(r.find("\"object\":\"list\""), std::string::npos) << "the smuggled request was answered: " << r;
  }
  // Pipelined well-formed requests are still each answered.
  const std::string two = exchange_until_close(
      s.port(), "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\nGET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(responses_in(two), 2) << two;
}

// A chunk size far past the body limit is a 413 as soon as it is read (before: the server
// waited for the chunk and answered 408 after the timeout).
TEST_F(StrictFraming, HugeChunkSizeIs413AtOnce) {
  test::TestServer s(*model_, options());
  for (const char* size : {"FFFFFFFFFFFF", "10001", "FFFFFFFFFFFFFFFFFFFFFFFF"}) {
    const auto t = Clock::now();
    const int fd = test::connect_to(s.port());
    const std::string req = chunked_post(std::string(size) + "\r\n{\"content\":");  // and then nothing
    ::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    const std::string r = test::read_response(fd, 8);
    ::close(fd);
    EXPECT_EQ(test::raw_status(r), 413) << size << " -> " << r.substr(0, 300);
    EXPECT_EQ(test::raw_body_json(r)["error"]["code"], "request_too_large") << size;
    EXPECT_LT(since(t), 2.0) << size << ": not answered at once";
  }
  // Chunks that add up past the limit (64 KiB here) are refused at the chunk that passes it.
  const std::string piece = "8000\r\n" + std::string(0x8000, ' ') + "\r\n";
  const std::string r = exchange_until_close(s.port(), chunked_post(piece + piece + "1\r\n"));
  EXPECT_EQ(test::raw_status(r), 413) << r.substr(0, 300);
}

// The documented limits, exactly: a request line of 8 KiB (CRLF included) is served, one
// byte more is 414; a header line likewise with 431; the whole head over 64 KiB is 431.
TEST_F(StrictFraming, LineAndHeadLimitsAsDocumented) {
  test::TestServer s(*model_, options());
  const std::string tail = " HTTP/1.1\r\n";
  const std::string head_rest = "Host: 127.0.0.1\r\nConnection: close\r\n\r\n";
  const auto line_of = [&](size_t bytes) {
    const std::string start = "GET /health?q=";
    return start + std::string(bytes - start.size() - tail.size(), 'a') + tail;
  };
  ASSERT_EQ(line_of(server::kMaxLineBytes).size(), server::kMaxLineBytes);
  EXPECT_EQ(test::raw_status(test::raw_exchange(s.port(), line_of(server::kMaxLineBytes) + head_rest)), 200);
  const std::string over = test::raw_exchange(s.port(), line_of(server::kMaxLineBytes + 1) + head_rest);
  EXPECT_EQ(test::raw_status(over), 414) << over.substr(0, 300);
  EXPECT_EQ(test::raw_body_json(over)["error"]["code"], "uri_too_long");
  const std::string q25k = test::raw_exchange(s.port(), line_of(25000) + head_rest);
  EXPECT_EQ(test::raw_status(q25k), 414) << q25k.substr(0, 300);

  const auto field_of = [](size_t bytes) {  // "X-Big: aaa...\r\n" of `bytes` bytes
    return "X-Big: " + std::string(bytes - 9, 'a') + "\r\n";
  };
  ASSERT_EQ(field_of(server::kMaxLineBytes).size(), server::kMaxLineBytes);
  const std::string req = "GET /health HTTP/1.1\r\n";
  EXPECT_EQ(test::raw_status(test::raw_exchange(s.port(), req + field_of(server::kMaxLineBytes) + head_rest)), 200);
  for (size_t n : {server::kMaxLineBytes + 1, size_t{60000}}) {
    const std::string r = test::raw_exchange(s.port(), req + field_of(n) + head_rest);
    EXPECT_EQ(test::raw_status(r), 431) << n << " -> " << r.substr(0, 300);
    EXPECT_EQ(test::raw_body_json(r)["error"]["code"], "headers_too_large") << n;
  }
  // Many header lines, each short, over 64 KiB in all.
  std::string many = req;
  while (many.size() < (64 << 10)) many += field_of(4000);
  const std::string r = test::raw_exchange(s.port(), many + head_rest);
  EXPECT_EQ(test::raw_status(r), 431) << r.substr(0, 300);
  EXPECT_EQ(test::raw_body_json(r)["error"]["code"], "headers_too_large");
  // Header fields are counted too: 254 short ones (with Host and Connection: 256) pass, one more
  // is 431 (a head of 10,000 tiny fields would cost far more held than its bytes).
  std::string fields;
  for (size_t i = 0; i + 2 < server::kMaxFields; ++i) fields += "X-" + std::to_string(i) + ": v\r\n";
  EXPECT_EQ(test::raw_status(test::raw_exchange(s.port(), req + fields + head_rest)), 200);
  const std::string more = test::raw_exchange(s.port(), req + fields + "X-One-More: v\r\n" + head_rest);
  EXPECT_EQ(test::raw_status(more), 431) << more.substr(0, 300);
  EXPECT_NE(test::raw_body_json(more)["error"]["message"].get<std::string>().find("header fields"), std::string::npos);
}

// The checkers alone, on inputs cut at every byte (a head or a chunked body arrives in any pieces).
TEST(HttpFraming, CheckersTakeBytesInAnyPieces) {
  const std::string head = "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:  chunked \r\n\r\n";
  const std::string chunks = "5;e=1\r\nhello\r\nA\r\n0123456789\r\n0\r\n\r\n";
  for (size_t cut = 0; cut <= head.size(); ++cut) {
    server::HeadChecker h(1 << 16);
    size_t taken = h.feed(head.data(), cut);
    taken += h.feed(head.data() + cut, head.size() - cut);
    ASSERT_EQ(h.verdict(), server::HeadChecker::Verdict::Done) << cut << ": " << h.why();
    EXPECT_EQ(taken, head.size());
    EXPECT_EQ(h.head().value("transfer-encoding"), "chunked");
    EXPECT_EQ(h.head().value("host"), "a");
    EXPECT_EQ(h.head().version, "HTTP/1.1");
  }
  for (size_t cut = 0; cut <= chunks.size(); ++cut) {
    server::ChunkChecker c(15);
    size_t taken = c.feed(chunks.data(), cut);
    taken += c.feed(chunks.data() + cut, chunks.size() - cut);
    ASSERT_EQ(c.verdict(), server::ChunkChecker::Verdict::Done) << cut << ": " << c.why();
    EXPECT_EQ(taken, chunks.size());
    EXPECT_EQ(c.content_bytes(), 15u);
  }
  server::ChunkChecker small(14);  // one byte short of the content
  small.feed(chunks.data(), chunks.size());
  EXPECT_EQ(small.verdict(), server::ChunkChecker::Verdict::TooLarge);
  // A head ends at its blank line: the body's bytes after it are not taken.
  server::HeadChecker h(1 << 16);
  const std::string with_body = "GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY";
  EXPECT_EQ(h.feed(with_body.data(), with_body.size()), with_body.size() - 4);
  EXPECT_EQ(h.verdict(), server::HeadChecker::Verdict::Done);
}

}  // namespace
}  // namespace kvs
