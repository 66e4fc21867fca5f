#include "server/connection_watch.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "server/conn_stream.h"

namespace kvs::server {

ConnectionWatch::ConnectionWatch() {
  if (ConnStream* s = current_conn_stream()) fd_ = s->fd();
}

bool ConnectionWatch::closed() const {
  if (fd_ < 0) return false;
  pollfd p{fd_, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLRDHUP | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;                                                              // orderly shutdown
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;  // reset
  }
  return false;  // still connected (pipelined bytes of a next request are not a close)
}

}  // namespace kvs::server
