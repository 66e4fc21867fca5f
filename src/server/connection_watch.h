// Whether an HTTP request's client is still connected, checked while its sequence runs so that
// a client that goes away cancels it. cpp-httplib 0.11 (Debian's) hands handlers no socket, so the
// socket is found once per request by its addresses: the descriptor of this process whose local
// and peer address and port are the request's (the handler runs while httplib holds it open, so
// it cannot be closed or reused meanwhile). Linux only (/proc/self/fd).
#pragma once
#include <httplib.h>

namespace kvs::server {

class ConnectionWatch {
 public:
  explicit ConnectionWatch(const httplib::Request& req);
  bool found() const { return fd_ >= 0; }
  // True when the peer closed (or reset) the connection. A client that only half-closes its
  // sending side after the request counts as gone. Unknown socket: false.
  bool closed() const;

 private:
  int fd_ = -1;
};

}  // namespace kvs::server
