#include "server/connection_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace kvs::server {

namespace {

bool same_endpoint(const sockaddr_storage& ss, const std::string& addr, int port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  int p = -1;
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (!inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) return false;
    p = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (!inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf)) return false;
    p = ntohs(a->sin6_port);
  } else {
    return false;
  }
  return p == port && addr == buf;
}

}  // namespace

ConnectionWatch::ConnectionWatch(const httplib::Request& req) {
  if (req.remote_port <= 0 || req.local_port <= 0) return;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (*end || end == e->d_name || fd == dirfd(d)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof local, pl = sizeof peer;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &ll) != 0) continue;
    if (!same_endpoint(local, req.local_addr, req.local_port)) continue;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (!same_endpoint(peer, req.remote_addr, req.remote_port)) continue;
    fd_ = static_cast<int>(fd);
    break;
  }
  closedir(d);
}

bool ConnectionWatch::closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;                                       // orderly shutdown
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;  // reset
  }
  return false;  // still connected (pipelined bytes of a next request are not a close)
}

}  // namespace kvs::server
