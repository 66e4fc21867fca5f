// A small synchronous Redis client over hiredis (Debian's libhiredis-dev) for the shared context
// store (redis_context_store.h): binary-safe commands and pipelines (MULTI/EXEC transactions go
// through a pipeline), a pool of connections so that handler threads and the scheduler thread do
// not wait for each other, connect and command timeouts, and a circuit breaker: after a
// timeout (Redis stalled, unreachable host) every call fails at once for `retry`
// instead of waiting for the timeout again, so a Redis that is down or stalled costs the server at
// most one timeout per retry period (a refused or closed connection fails at once and opens nothing). Every failure is a RedisError naming the endpoint and why.
//
// The password never comes from the command line (it would show in `ps`): the URL refuses one;
// it is read by the caller from an environment variable or a file (tools/cmd_serve.cpp).
#pragma once
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

struct redisContext;

namespace kvs::server {

// redis://HOST[:PORT][/DB] (port 6379 and db 0 by default). Throws kvs::Error naming what is wrong;
// a URL with a user or password is refused (give it through the environment or a file).
struct RedisUrl {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string endpoint() const;  // "host:port/db"
};
RedisUrl parse_redis_url(const std::string& url);

// Redis could not be reached or refused the command. `connection` is true when the connection
// failed (down, stalled, closed): what the circuit breaker counts.
class RedisError : public Error {
 public:
  RedisError(const std::string& what, bool connection) : Error(what), connection_(connection) {}
  bool connection() const { return connection_; }

 private:
  bool connection_;
};

// A reply, copied out of hiredis's.
struct RedisReply {
  enum class Type { Nil, Integer, String, Status, Error, Array };
  Type type = Type::Nil;
  long long integer = 0;
  std::string str;                  // String, Status, Error
  std::vector<RedisReply> elements;  // Array
  bool is_nil() const { return type == Type::Nil; }
};

struct RedisOptions {
  std::string password;                              // empty: no AUTH
  std::chrono::milliseconds timeout{1000};           // connect and each command
  std::chrono::milliseconds retry{1000};             // after a connection failure, fail fast this long
  size_t max_idle = 8;                               // pooled connections kept open
};

class RedisClient {
 public:
  RedisClient(RedisUrl url, RedisOptions opt);
  ~RedisClient();
  RedisClient(const RedisClient&) = delete;
  RedisClient& operator=(const RedisClient&) = delete;

  using Command = std::vector<std::string_view>;  // the arguments, binary-safe
  // One command. Throws RedisError on a connection failure or an error reply.
  RedisReply command(const Command& args);
  // Several commands written at once and their replies read in order (one round trip). Throws
  // RedisError on a connection failure; error replies are returned (EXEC's aborted transaction too).
  std::vector<RedisReply> pipeline(const std::vector<Command>& cmds);

  const RedisUrl& url() const { return url_; }
  std::string endpoint() const { return url_.endpoint(); }
  // Whether the breaker is open (calls fail fast), and the error that opened it.
  bool failing_fast() const;

 private:
  redisContext* acquire(bool* reused);  // a pooled (reused) or new connection (throws RedisError)
  void release(redisContext* c);      // back to the pool
  // Frees c, throws; a `slow` failure (a timeout) opens the breaker.
  [[noreturn]] void connection_failed(redisContext* c, const std::string& why, bool slow);

  RedisUrl url_;
  RedisOptions opt_;
  mutable std::mutex mu_;                     // guards idle_, down_until_, last_error_
  std::vector<redisContext*> idle_;
  std::chrono::steady_clock::time_point down_until_{};
  std::string last_error_;
};

}  // namespace kvs::server
