#include "server/conn_stream.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kvs::server {

namespace {

int ms_until(std::chrono::steady_clock::time_point t) {
  const auto d = std::chrono::duration_cast<std::chrono::milliseconds>(t - std::chrono::steady_clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(d, 0, 1 << 30));
}

}  // namespace

ConnStream::ConnStream(Connection& c, const ConnectionLimits& lim)
    : conn_(c), lim_(lim), head_check_(lim.max_header_bytes) {}

void ConnStream::set_deadline(double seconds) {
  deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

ssize_t ConnStream::fill() {
  // A body may take up to the body timeout in all, but may not stall longer than the header
  // timeout between two reads (a lying Content-Length is answered then, not at the deadline).
  const auto stall = conn_.get_phase() == ConnPhase::Body
                         ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(lim_.header_timeout_s))
                         : deadline_;
  const auto until = std::min(deadline_, stall);
  for (;;) {
    const int ms = ms_until(until);
    if (ms <= 0) {
      failure_ = Failure::Timeout;
      return -1;
    }
    pollfd p{conn_.fd, POLLIN, 0};
    const int r = ::poll(&p, 1, ms);
    if (r < 0 && errno != EINTR) {
      failure_ = Failure::Error;
      return -1;
    }
    if (r <= 0) continue;  // the loop checks the deadline again
    const ssize_t n = ::recv(conn_.fd, buf_, sizeof buf_, MSG_DONTWAIT);
    if (n > 0) {
      pos_ = 0;
      len_ = static_cast<size_t>(n);
      return n;
    }
    if (n == 0) {
      peer_closed_ = true;
      return 0;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
    failure_ = Failure::Error;
    return -1;
  }
}

bool ConnStream::await_request(double idle_s) {
  conn_.set_phase(ConnPhase::Idle);
  request_bytes_ = phase_bytes_ = 0;
  body_mode_ = BodyMode::None;
  body_left_ = 0;
  body_done_ = true;
  head_check_.reset();
  if (pos_ == len_) {
    set_deadline(idle_s < 0 ? lim_.idle_timeout_s : idle_s);
    if (fill() <= 0) return false;
  }
  if (conn_.evicted || conn_.woken) return false;
  conn_.set_phase(ConnPhase::Headers);
  set_deadline(lim_.header_timeout_s);
  return true;
}

void ConnStream::begin_body(BodyMode mode, uint64_t length, size_t max_raw, uint64_t max_content) {
  conn_.set_phase(ConnPhase::Body);
  max_raw_body_ = max_raw;
  chunk_check_.reset(max_content);
  body_mode_ = mode;
  body_left_ = mode == BodyMode::Length ? length : 0;
  body_done_ = mode == BodyMode::None || (mode == BodyMode::Length && length == 0);
  phase_bytes_ = 0;
  set_deadline(lim_.body_timeout_s);
}

void ConnStream::end_body(bool complete) {
  conn_.set_phase(ConnPhase::Handler);
  if (complete && body_mode_ == BodyMode::Length && body_left_ == 0) body_done_ = true;
  if (complete && body_mode_ == BodyMode::Chunked && chunk_check_.verdict() == ChunkChecker::Verdict::Done)
    body_done_ = true;
  body_mode_ = BodyMode::None;  // nothing more is read for this request
}

ssize_t ConnStream::read(char* ptr, size_t size) {
  const ConnPhase ph = conn_.get_phase();
  if (ph == ConnPhase::Handler) return 0;
  if (ph == ConnPhase::Headers && head_check_.verdict() == HeadChecker::Verdict::Done) return 0;  // the body is next
  if (ph == ConnPhase::Body) {
    if (body_mode_ == BodyMode::None) return 0;
    if (body_mode_ == BodyMode::Length) {
      if (body_left_ == 0) return 0;
      size = static_cast<size_t>(std::min<uint64_t>(size, body_left_));
    }
    if (body_mode_ == BodyMode::Chunked && chunk_check_.verdict() == ChunkChecker::Verdict::Done) return 0;
  }
  if (pos_ == len_) {
    const ssize_t n = fill();
    if (n <= 0) return n;
  }
  size_t n = std::min(size, len_ - pos_);
  if (ph != ConnPhase::Body) {
    // The request line and headers, checked before httplib sees them (and capped in bytes).
    n = head_check_.feed(buf_ + pos_, n);
    switch (head_check_.verdict()) {
      case HeadChecker::Verdict::More:
      case HeadChecker::Verdict::Done:
        break;
      case HeadChecker::Verdict::Bad:
        failure_ = Failure::BadRequest;
        why_ = head_check_.why();
        return -1;
      case HeadChecker::Verdict::UriTooLong:
        failure_ = Failure::UriTooLong;
        why_ = head_check_.why();
        return -1;
      case HeadChecker::Verdict::HeadersTooLarge:
        failure_ = Failure::HeadersTooLarge;
        why_ = head_check_.why();
        return -1;
    }
  } else {
    // The raw body is capped (a chunked body's framing included; its content is capped by the
    // handler, in bytes kept), and chunked framing is checked as it passes.
    if (phase_bytes_ + n > max_raw_body_ && body_mode_ != BodyMode::Length) {
      failure_ = Failure::BodyTooLarge;
      return -1;
    }
    if (body_mode_ == BodyMode::Chunked) {
      n = chunk_check_.feed(buf_ + pos_, n);
      if (chunk_check_.verdict() == ChunkChecker::Verdict::TooLarge) {
        failure_ = Failure::BodyTooLarge;
        why_ = chunk_check_.why();
        return -1;
      }
      if (chunk_check_.verdict() == ChunkChecker::Verdict::Bad) {
        failure_ = Failure::BadRequest;
        why_ = chunk_check_.why();
        return -1;
      }
    }
  }
  std::memcpy(ptr, buf_ + pos_, n);
  pos_ += n;
  phase_bytes_ += n;
  request_bytes_ += n;
  if (ph == ConnPhase::Body && body_mode_ == BodyMode::Length) body_left_ -= n;
  return static_cast<ssize_t>(n);
}

ssize_t ConnStream::write(const char* ptr, size_t size) {
  if (write_failed_) return -1;
  size_t off = 0;
  while (off < size) {
    const ssize_t n = ::send(conn_.fd, ptr + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      off += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      // The client is not reading: wait for room, at most the write timeout.
      pollfd p{conn_.fd, POLLOUT, 0};
      const int r = ::poll(&p, 1, static_cast<int>(lim_.write_timeout_s * 1000));
      if (r > 0 && !(p.revents & (POLLERR | POLLHUP))) continue;
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) failure_ = Failure::Timeout;
    }
    write_failed_ = true;
    if (failure_ == Failure::None) failure_ = Failure::Error;
    return -1;
  }
  return static_cast<ssize_t>(size);
}

void ConnStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = conn_.peer_ip;
  port = conn_.peer_port;
}

void ConnStream::get_local_ip_and_port(std::string& ip, int& port) const {
  ip = conn_.local_ip;
  port = conn_.local_port;
}

}  // namespace kvs::server
