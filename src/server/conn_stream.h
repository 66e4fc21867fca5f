// One client connection as httplib reads and writes it, with the limits cpp-httplib 0.11 does not
// have: a deadline for each part of a request (the first byte after an idle connection, the
// request line and headers, the body; every write), a byte cap on the request line and headers,
// and the body's framing taken from the validated headers — a request with neither Content-Length
// nor chunked Transfer-Encoding has no body (RFC 9112 6.3), so httplib never waits for one until
// the client closes. The request head and a chunked body are checked byte by byte as they are
// read (http_framing.h: strict RFC 9112), so httplib never acts on framing it reads leniently.
// httplib's Server::process_request parses and answers through this stream (http_server.cpp runs
// the keep-alive loop).
#pragma once
#include <httplib.h>

#include <chrono>
#include <cstdint>

#include "server/http_framing.h"
#include "server/http_listener.h"

namespace kvs::server {

class ConnStream : public httplib::Stream {
 public:
  // BadRequest: the head or the chunked framing broke RFC 9112 (why() says how); UriTooLong: the
  // request line is longer than kMaxLineBytes.
  enum class Failure { None, Timeout, HeadersTooLarge, UriTooLong, BadRequest, BodyTooLarge, Error };
  enum class BodyMode { None, Length, Chunked };

  ConnStream(Connection& c, const ConnectionLimits& lim);

  // Waits (up to the idle timeout) for the first byte of the next request; then the request line
  // and headers must come within the header timeout. False when none came: the client closed,
  // the timeout passed (failure() == Timeout) or the connection was woken for eviction or stop.
  // `idle_s` < 0: the idle timeout.
  bool await_request(double idle_s = -1);
  // The headers are in (validated): the body that follows is none, `length` bytes, or chunked,
  // and must come within the body timeout; at most `max_raw` bytes of it are read (a chunked
  // body's framing included), and a chunk larger than what `max_content` still allows fails at
  // once (BodyTooLarge). Until end_body(true) the connection cannot be reused.
  void begin_body(BodyMode mode, uint64_t length, size_t max_raw, uint64_t max_content);
  // The handler read the whole body (keep-alive possible) or gave up on it (the connection closes).
  void end_body(bool complete);
  // True when the next request cannot be read from this connection (an unread or broken body,
  // a failure, or a handler that asked for it).
  bool must_close() const { return close_ || failure_ != Failure::None || !body_done_; }
  void close_after_response() { close_ = true; }
  Failure failure() const { return failure_; }
  // Why the head or the chunked framing was refused (BadRequest, UriTooLong, HeadersTooLarge).
  const std::string& why() const { return why_; }
  // The current request's header fields exactly as sent (complete once the body begins).
  const HeadFields& head() const { return head_check_.head(); }
  ConnPhase phase() const { return conn_.get_phase(); }
  bool started() const { return request_bytes_ > 0; }  // bytes of the current request came
  bool peer_closed() const { return peer_closed_; }
  int fd() const { return conn_.fd; }
  Connection& connection() { return conn_; }

  // httplib::Stream
  bool is_readable() const override { return true; }
  bool is_writable() const override { return !write_failed_; }
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  // httplib 0.11 answers 500 to a descriptor >= FD_SETSIZE (it would select() on it); this
  // stream never selects, so it does not show its descriptor (use fd()).
  socket_t socket() const override { return -1; }

 private:
  using Clock = std::chrono::steady_clock;
  ssize_t fill();  // more input into buf_, waiting until deadline_: bytes, 0 at end, -1 failure
  void set_deadline(double seconds);

  Connection& conn_;
  const ConnectionLimits& lim_;
  char buf_[16 << 10];
  size_t pos_ = 0, len_ = 0;
  Clock::time_point deadline_{};
  size_t request_bytes_ = 0;  // read for the current request (request line, headers, body framing)
  size_t phase_bytes_ = 0;
  size_t max_raw_body_ = 0;
  BodyMode body_mode_ = BodyMode::None;
  uint64_t body_left_ = 0;
  bool body_done_ = true, close_ = false, peer_closed_ = false, write_failed_ = false;
  Failure failure_ = Failure::None;
  std::string why_;
  HeadChecker head_check_;
  ChunkChecker chunk_check_;
};

// The connection whose request this thread is serving (handlers run on it), or null.
ConnStream* current_conn_stream();

}  // namespace kvs::server
