// Whether an HTTP request's client is still connected, checked while its sequence runs so that
// a client that goes away cancels it. The socket is the connection the handler's thread serves
// (conn_stream.h).
#pragma once

namespace kvs::server {

class ConnectionWatch {
 public:
  explicit ConnectionWatch(int fd) : fd_(fd) {}
  // The connection this thread serves (none outside a request: never closed).
  ConnectionWatch();
  bool found() const { return fd_ >= 0; }
  // True when the peer closed (or reset) the connection. A client that only half-closes its
  // sending side after the request counts as gone. Unknown socket: false.
  bool closed() const;

 private:
  int fd_ = -1;
};

}  // namespace kvs::server
