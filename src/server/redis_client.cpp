#include "server/redis_client.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <cerrno>
#include <cstdlib>

namespace kvs::server {

namespace {

using Clock = std::chrono::steady_clock;

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

RedisReply copy_reply(const redisReply* r) {
  RedisReply out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.type = RedisReply::Type::Integer;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
      out.type = r->type == REDIS_REPLY_STRING   ? RedisReply::Type::String
                 : r->type == REDIS_REPLY_STATUS ? RedisReply::Type::Status
                                                 : RedisReply::Type::Error;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.type = RedisReply::Type::Array;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(copy_reply(r->element[i]));
      break;
    default:
      out.type = RedisReply::Type::Nil;
  }
  return out;
}

bool parse_int(std::string_view s, int lo, int hi, int& out) {
  if (s.empty() || s.size() > 9) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi) return false;
  out = v;
  return true;
}

}  // namespace

std::string RedisUrl::endpoint() const { return fmt::format("{}:{}/{}", host, port, db); }

RedisUrl parse_redis_url(const std::string& url) {
  constexpr std::string_view scheme = "redis://";
  if (url.rfind(scheme, 0) != 0)
    fail("--contexts-url '{}': expected redis://HOST[:PORT][/DB] (the only shared store kvshrink speaks)", url);
  std::string_view rest = std::string_view(url).substr(scheme.size());
  if (rest.find('@') != std::string_view::npos)
    fail("--contexts-url: a user or password in the URL is refused (it would show in the process list); give the "
         "password in the environment variable KVSHRINK_REDIS_PASSWORD or a file (--contexts-password-file)");
  if (rest.find('?') != std::string_view::npos || rest.find('#') != std::string_view::npos)
    fail("--contexts-url '{}': query parameters are not supported (redis://HOST[:PORT][/DB])", url);
  RedisUrl u;
  const size_t slash = rest.find('/');
  std::string_view hostport = rest.substr(0, slash);
  if (slash != std::string_view::npos) {
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && !parse_int(db, 0, 1 << 20, u.db))
      fail("--contexts-url '{}': the database '{}' must be a number (redis://HOST:PORT/DB)", url, db);
  }
  if (hostport.empty()) fail("--contexts-url '{}': no host (redis://HOST[:PORT][/DB])", url);
  if (hostport.front() == '[') {  // [IPv6]:port
    const size_t close = hostport.find(']');
    if (close == std::string_view::npos) fail("--contexts-url '{}': unclosed '[' in the host", url);
    u.host = std::string(hostport.substr(1, close - 1));
    hostport = hostport.substr(close + 1);
    if (!hostport.empty() && hostport.front() != ':') fail("--contexts-url '{}': expected ':PORT' after ']'", url);
    if (!hostport.empty()) hostport.remove_prefix(1);
    else hostport = {};
    if (!hostport.empty() && !parse_int(hostport, 1, 65535, u.port))
      fail("--contexts-url '{}': the port '{}' must be a number in 1..65535", url, hostport);
  } else {
    const size_t colon = hostport.rfind(':');
    u.host = std::string(hostport.substr(0, colon));
    if (colon != std::string_view::npos && !parse_int(hostport.substr(colon + 1), 1, 65535, u.port))
      fail("--contexts-url '{}': the port '{}' must be a number in 1..65535", url, hostport.substr(colon + 1));
  }
  if (u.host.empty()) fail("--contexts-url '{}': no host (redis://HOST[:PORT][/DB])", url);
  return u;
}

RedisClient::RedisClient(RedisUrl url, RedisOptions opt) : url_(std::move(url)), opt_(std::move(opt)) {}

RedisClient::~RedisClient() {
  for (redisContext* c : idle_) redisFree(c);
}

bool RedisClient::failing_fast() const {
  std::lock_guard<std::mutex> l(mu_);
  return Clock::now() < down_until_;
}

void RedisClient::connection_failed(redisContext* c, const std::string& why, bool slow) {
  if (c) redisFree(c);
  const std::string msg = fmt::format("Redis at {}: {}", endpoint(), why);
  {
    std::lock_guard<std::mutex> l(mu_);
    // Only a failure that cost time opens the breaker: a refused connection or one the server
    // closed fails at once anyway, and Redis may be back for the next call.
    if (slow) down_until_ = Clock::now() + opt_.retry;
    last_error_ = why;
    for (redisContext* i : idle_) redisFree(i);  // the others likely share the fate
    idle_.clear();
  }
  throw RedisError(msg, true);
}

redisContext* RedisClient::acquire(bool* reused) {
  *reused = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (Clock::now() < down_until_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(down_until_ - Clock::now()).count();
      throw RedisError(fmt::format("Redis at {} is unavailable ({}); next try in {} ms", endpoint(), last_error_, left),
                       true);
    }
    if (!idle_.empty()) {
      redisContext* c = idle_.back();
      idle_.pop_back();
      *reused = true;
      return c;
    }
  }
  redisContext* c = redisConnectWithTimeout(url_.host.c_str(), url_.port, to_timeval(opt_.timeout));
  if (!c) connection_failed(nullptr, "cannot allocate a connection", false);
  if (c->err) connection_failed(c, fmt::format("cannot connect: {}", c->errstr), errno != ECONNREFUSED);
  redisSetTimeout(c, to_timeval(opt_.timeout));
  auto setup = [&](std::vector<const char*> argv) {
    std::vector<size_t> len;
    for (const char* a : argv) len.push_back(std::strlen(a));
    auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), len.data()));
    if (!r) connection_failed(c, fmt::format("{} failed: {}", argv[0], c->errstr), true);
    const bool bad = r->type == REDIS_REPLY_ERROR;
    const std::string err = bad ? std::string(r->str, r->len) : "";
    freeReplyObject(r);
    if (bad) {
      redisFree(c);
      throw RedisError(fmt::format("Redis at {}: {} refused: {}", endpoint(), argv[0], err), false);
    }
  };
  if (!opt_.password.empty()) setup({"AUTH", opt_.password.c_str()});
  if (url_.db != 0) {
    const std::string db = std::to_string(url_.db);
    setup({"SELECT", db.c_str()});
  }
  return c;
}

void RedisClient::release(redisContext* c) {
  std::lock_guard<std::mutex> l(mu_);
  if (idle_.size() < opt_.max_idle) {
    idle_.push_back(c);
  } else {
    redisFree(c);
  }
}

std::vector<RedisReply> RedisClient::pipeline(const std::vector<Command>& cmds) {
  // A pooled connection may have been closed by the server since (a Redis restart, its timeout):
  // a failure on one that is not a timeout is retried once on a fresh connection (nothing of the
  // pipeline was executed then, or the connection would not have failed before the first reply).
  for (int attempt = 0;; ++attempt) {
    bool reused = false;
    redisContext* c = acquire(&reused);
    std::string failure;
    bool timed_out = false;
    std::vector<RedisReply> out;
    std::vector<const char*> argv;
    std::vector<size_t> len;
    for (const Command& cmd : cmds) {
      argv.clear();
      len.clear();
      for (std::string_view a : cmd) {
        argv.push_back(a.data());
        len.push_back(a.size());
      }
      if (redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), len.data()) != REDIS_OK) {
        failure = fmt::format("cannot send: {}", c->errstr);
        break;
      }
    }
    for (size_t i = 0; failure.empty() && i < cmds.size(); ++i) {
      void* r = nullptr;
      if (redisGetReply(c, &r) != REDIS_OK || !r) {
        timed_out = c->err == REDIS_ERR_IO && (errno == EAGAIN || errno == EWOULDBLOCK);
        failure = timed_out ? fmt::format("no reply within {} ms", opt_.timeout.count())
                            : fmt::format("no reply: {}", c->errstr);
        if (i > 0) reused = false;  // part of it ran: not retried
        break;
      }
      out.push_back(copy_reply(static_cast<redisReply*>(r)));
      freeReplyObject(r);
    }
    if (failure.empty()) {
      release(c);
      return out;
    }
    if (reused && !timed_out && attempt == 0) {
      redisFree(c);
      continue;
    }
    connection_failed(c, failure, timed_out);
  }
}

RedisReply RedisClient::command(const Command& args) {
  RedisReply r = std::move(pipeline({args}).front());
  if (r.type == RedisReply::Type::Error)
    throw RedisError(fmt::format("Redis at {}: {} refused: {}", endpoint(), args.empty() ? "" : args[0], r.str), false);
  return r;
}

}  // namespace kvs::server
