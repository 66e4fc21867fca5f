#include "server/http_listener.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>
#include <vector>

#include "core/error.h"

namespace kvs::server {

namespace {

using Clock = std::chrono::steady_clock;

int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

std::string address_text(const sockaddr_storage& ss, int* port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    *port = ntohs(a->sin6_port);
  }
  return buf;
}

// Sends what fits without blocking (a refusal is small; a client that does not read it loses it).
void send_now(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

void Connection::set_phase(ConnPhase p) {
  const ConnPhase was = get_phase();
  const bool waiting = was == ConnPhase::Idle || was == ConnPhase::Headers;
  if (!waiting || waiting_since_ns.load() == 0) waiting_since_ns.store(now_ns());
  phase.store(static_cast<int>(p));
}

HttpListener::HttpListener(ConnectionLimits lim) : lim_(lim) {
  if (lim_.max_connections < 1) fail("--max-connections must be >= 1, got {}", lim_.max_connections);
  if (lim_.max_connections_per_client < 0)
    fail("--max-connections-per-client must be >= 0, got {}", lim_.max_connections_per_client);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) fail("cannot create a pipe: {}", std::strerror(errno));
}

HttpListener::~HttpListener() {
  stop_accepting();
  close_all();
  wait_drained(1e9);
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
}

int HttpListener::bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0)
    fail("cannot listen on {}:{}: {}", host, port, gai_strerror(rc));
  std::string why;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    // SO_REUSEADDR only lets a restarted server reuse a port whose old connections linger in
    // TIME_WAIT; on Linux it never lets two sockets listen on one port (SO_REUSEPORT would, and
    // then the kernel would share connections between two servers).
    const int one = 1, zero = 0;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, SOMAXCONN) == 0) {
      listen_fd_ = fd;
      break;
    }
    why = errno == EADDRINUSE ? "the port is already in use (another server listens on it)" : std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) fail("cannot listen on {}:{}: {}", host, port, why.empty() ? "no usable address" : why);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  int bound = port;
  address_text(ss, &bound);
  return bound;
}

void HttpListener::run(std::function<void(Connection&)> serve) {
  serve_ = std::move(serve);
  while (!stopping_) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (stopping_ || p[1].revents) break;
    if (!(p[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors: pause a little rather than spin (the client waits in the backlog).
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    accept_one(fd);
  }
  std::lock_guard<std::mutex> l(mu_);
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
}

void HttpListener::reject(int fd, const char* reason_code, const std::string& message) {
  const std::string body = fmt::format(R"({{"error":{{"message":"{}","type":"server_error","param":null,"code":"{}"}}}})",
                                       message, reason_code);
  send_now(fd, fmt::format("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
                           "Retry-After: 1\r\nConnection: close\r\n\r\n{}",
                           body.size(), body));
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
}

bool HttpListener::evict_one_locked(bool probes_only) {
  // The connection that has waited longest for (or in) a request's headers.
  Connection* victim = nullptr;
  int64_t oldest = INT64_MAX;
  for (const auto& [p, c] : open_) {
    const ConnPhase ph = c->get_phase();
    if ((ph != ConnPhase::Idle && ph != ConnPhase::Headers) || c->evicted || (probes_only && !c->probe)) continue;
    const int64_t since = c->waiting_since_ns.load();
    if (since < oldest) {
      oldest = since;
      victim = c.get();
    }
  }
  if (!victim) return false;
  victim->evicted = true;
  ::shutdown(victim->fd, SHUT_RD);  // wakes its thread, which answers 503 and closes
  ++stats_.evicted;
  return true;
}

void HttpListener::accept_one(int fd) {
  sockaddr_storage peer{}, local{};
  socklen_t pl = sizeof peer, ll = sizeof local;
  ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll);
  auto c = std::make_unique<Connection>();
  c->fd = fd;
  c->peer_ip = address_text(peer, &c->peer_port);
  c->local_ip = address_text(local, &c->local_port);
  c->set_phase(ConnPhase::Idle);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // small SSE events go out at once
  Connection* raw = c.get();
  {
    std::unique_lock<std::mutex> l(mu_);
    if (stopping_) {
      ++stats_.rejected_stopping;
      l.unlock();
      return reject(fd, "shutting_down", "the server is shutting down");
    }
    int& mine = per_client_[c->peer_ip];
    if (lim_.max_connections_per_client > 0 && mine >= lim_.max_connections_per_client) {
      // Over the per-client cap: a probe (it may ask for /health), while probe slots last or one
      // can be freed by closing the probe that has waited longest.
      int probes = 0;
      for (const auto& [p, o] : open_) probes += o->probe && !o->evicted;
      if (probes >= kProbeConnections && !evict_one_locked(/*probes_only=*/true)) {
        ++stats_.rejected_per_client;
        l.unlock();
        return reject(fd, "too_many_connections",
                      fmt::format("this client has {} connections open, the most this server allows per client "
                                  "(--max-connections-per-client); retry later",
                                  lim_.max_connections_per_client));
      }
      c->probe = true;
    }
    // At the cap: make room by evicting a connection that is not in a request (it closes soon;
    // the count drops when its thread ends, so up to a few connections over the cap for a moment).
    int evicting = 0;
    for (const auto& [p, o] : open_) evicting += o->evicted.load();
    if (static_cast<int>(open_.size()) - evicting >= lim_.max_connections && !evict_one_locked()) {
      ++stats_.rejected_total_cap;
      if (mine == 0) per_client_.erase(c->peer_ip);
      l.unlock();
      return reject(fd, "too_many_connections",
                    fmt::format("the server has {} connections open, its limit (--max-connections); retry later",
                                lim_.max_connections));
    }
    if (c->probe)
      ++stats_.probes;
    else
      ++mine;
    ++stats_.accepted;
    open_[raw] = std::move(c);
  }
  try {
    std::thread([this, raw] {
      try {
        serve_(*raw);
      } catch (...) {
        // serve_ handles everything a request can throw; nothing may take the process down.
      }
      finished(raw);
    }).detach();
  } catch (const std::system_error&) {
    // No thread for it (resource limits): refuse, never crash.
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!raw->probe && --per_client_[raw->peer_ip] == 0) per_client_.erase(raw->peer_ip);
      open_.erase(raw);
    }
    reject(fd, "too_many_connections", "the server cannot start a thread for this connection; retry later");
  }
}

void HttpListener::finished(Connection* c) {
  std::lock_guard<std::mutex> l(mu_);
  // Closed under the lock: evict/close_all never shut down a descriptor number already reused.
  ::close(c->fd);
  if (!c->probe && --per_client_[c->peer_ip] <= 0) per_client_.erase(c->peer_ip);
  open_.erase(c);
  if (open_.empty()) drained_.notify_all();
}

void HttpListener::stop_accepting() {
  if (stopping_.exchange(true)) return;
  const char b = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_[1], &b, 1);
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [p, c] : open_) {
    if (c->get_phase() == ConnPhase::Idle) {
      c->woken = true;
      ::shutdown(c->fd, SHUT_RD);
    }
  }
}

bool HttpListener::wait_drained(double seconds) {
  std::unique_lock<std::mutex> l(mu_);
  const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(std::min(seconds, 1e6)));
  return drained_.wait_until(l, until, [&] { return open_.empty(); });
}

void HttpListener::close_all() {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [p, c] : open_) {
    c->woken = true;
    ::shutdown(c->fd, SHUT_RDWR);
  }
}

void HttpListener::probe_refused() {
  std::lock_guard<std::mutex> l(mu_);
  ++stats_.rejected_per_client;
}

ListenerStats HttpListener::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  ListenerStats s = stats_;
  s.open = static_cast<int>(open_.size());
  return s;
}

}  // namespace kvs::server
