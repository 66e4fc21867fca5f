// Server setup, the keep-alive loop over our connections, the checks before routing, error
// shaping and graceful stop. Endpoint handlers: api_handlers.cpp (completions, chat, contexts),
// info_handlers.cpp (models, presses, tokenize, detokenize, metrics).
#include "server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>
#include <malloc.h>
#include <poll.h>
#include <sys/socket.h>

#include <cctype>
#include <chrono>
#include <ctime>

#include "core/error.h"
#include "server/conn_stream.h"

namespace kvs::server {

namespace {

using Clock = std::chrono::steady_clock;
thread_local Clock::time_point t_request_start{};

// The endpoint label of a path (metrics): known paths, or "other".
std::string endpoint_of(const std::string& path) {
  static const char* known[] = {"/v1/completions", "/v1/chat/completions", "/v1/contexts", "/v1/models",
                                "/v1/presses",     "/health",              "/metrics",     "/tokenize",
                                "/detokenize"};
  for (const char* k : known)
    if (path == k) return k;
  if (path.rfind("/v1/contexts/", 0) == 0) return "/v1/contexts/{id}";
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

// What the server serves at a path: the methods, and whether they take a JSON body.
struct RouteInfo {
  bool found = false;
  bool json_body = false;  // POST with a JSON body
  std::string allow;       // methods, for 405's Allow header
};

RouteInfo route_of(const std::string& path) {
  RouteInfo r;
  r.found = true;
  if (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/tokenize" || path == "/detokenize") {
    r.json_body = true;
    r.allow = "POST";
  } else if (path == "/v1/contexts") {
    r.json_body = true;
    r.allow = "GET, POST";
  } else if (path.rfind("/v1/contexts/", 0) == 0 && path.find('/', 13) == std::string::npos) {
    r.allow = "GET, DELETE";
  } else if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0 || path == "/v1/presses" || path == "/health" ||
             path == "/metrics") {
    r.allow = "GET";
  } else {
    r.found = false;
  }
  return r;
}

bool method_allowed(const RouteInfo& r, const std::string& method) {
  const std::string m = method == "HEAD" ? "GET" : method;
  size_t p = 0;
  while (p < r.allow.size()) {
    const size_t e = std::min(r.allow.find(',', p), r.allow.size());
    if (r.allow.compare(p, e - p, m) == 0) return true;
    p = e + 2;
  }
  return false;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Bad Request";
  }
}

// A refusal written straight to the connection (httplib did not answer: the request line never
// came whole), then the connection closes.
void write_refusal(ConnStream& s, const ApiError& e) {
  const std::string body = dump_json(e.to_json());
  const std::string head =
      fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{}\r\n",
                  e.status(), reason_phrase(e.status()), body.size(), e.status() == 503 ? "Retry-After: 1\r\n" : "");
  s.write((head + body).data(), head.size() + body.size());
}

ApiError timeout_error(ConnPhase ph, const ConnectionLimits& lim) {
  if (ph == ConnPhase::Body)
    return ApiError(408, fmt::format("the request body did not arrive within {} s (--body-timeout), or stalled for {} s "
                                     "(--header-timeout)",
                                     lim.body_timeout_s, lim.header_timeout_s),
                    "invalid_request_error", "", "request_timeout");
  return ApiError(408, fmt::format("the request line and headers did not arrive within {} s (--header-timeout)",
                                   lim.header_timeout_s),
                  "invalid_request_error", "", "request_timeout");
}

// The refusals of a head or chunked framing that broke RFC 9112 or a size limit (http_framing.h).
ApiError malformed_error(const std::string& why) {
  return bad_request(fmt::format("malformed HTTP request: {}", why), "", "bad_request");
}
ApiError uri_too_long_error(const std::string& why) {
  return ApiError(414, why, "invalid_request_error", "", "uri_too_long");
}
ApiError headers_too_large_error(const std::string& why) {
  return ApiError(431, why, "invalid_request_error", "", "headers_too_large");
}

ApiError evicted_error() {
  return ApiError(503, "the server is at its connection limit and closed this idle or slow connection; retry",
                  "server_error", "", "too_many_connections");
}

ApiError per_client_error(const ConnectionLimits& lim) {
  return ApiError(503, fmt::format("this client has {} connections open, the most this server allows per client "
                                   "(--max-connections-per-client); only GET /health is answered beyond; retry later",
                                   lim.max_connections_per_client),
                  "server_error", "", "too_many_connections");
}

ApiError stopping_error() { return ApiError(503, "the server is shutting down", "server_error", "", "shutting_down"); }

// Reads and drops what the client still sends (at most `ms`), so that closing does not reset
// the connection before the client has read our answer.
void drain_briefly(int fd, int ms) {
  const auto until = Clock::now() + std::chrono::milliseconds(ms);
  char buf[16384];
  size_t total = 0;
  while (total < (size_t{4} << 20)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return;
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) return;
    total += static_cast<size_t>(n);
  }
}

thread_local ConnStream* t_stream = nullptr;

// A request that charged this much of the body budget returns its freed memory when done.
constexpr size_t kTrimAfterBytes = size_t{4} << 20;

}  // namespace

ConnStream* current_conn_stream() { return t_stream; }

// httplib's server with its request parser exposed: we own the connections and call it once
// per request.
class HttpServer::Httpd : public httplib::Server {
 public:
  // httplib only compares svr_sock_ with INVALID_SOCKET ("shutting down": a streaming response
  // stops); we never let it touch the socket, which the listener owns.
  Httpd() { svr_sock_ = 0; }
  bool serve_one(httplib::Stream& s, bool close, bool& closed) { return process_request(s, close, closed, nullptr); }
  void stop_streams() { svr_sock_ = INVALID_SOCKET; }
};

HttpServer::HttpServer(const Model& model, Scheduler& scheduler, Metrics& metrics, HttpOptions opt)
    : model_(model),
      sched_(scheduler),
      metrics_(metrics),
      opt_(std::move(opt)),
      guard_(GuardOptions{opt_.host, opt_.allowed_hosts, opt_.allow_origins, opt_.api_key, opt_.limits.max_body_bytes}),
      listener_(opt_.connections),
      svr_(std::make_unique<Httpd>()),
      bodies_(opt_.connections.max_body_buffer_bytes) {
  const ConnectionLimits& c = opt_.connections;
  auto positive = [](const char* name, double v) {
    if (!(v > 0) || v > 86400) fail("{} must be in (0, 86400] seconds, got {}", name, v);
  };
  positive("--idle-timeout", c.idle_timeout_s);
  positive("--header-timeout", c.header_timeout_s);
  positive("--body-timeout", c.body_timeout_s);
  positive("--write-timeout", c.write_timeout_s);
  if (!(opt_.shutdown_grace_s >= 0) || opt_.shutdown_grace_s > 3600)
    fail("--shutdown-grace must be in [0, 3600] seconds, got {}", opt_.shutdown_grace_s);
  if (c.max_requests_per_connection < 1) fail("max requests per connection must be >= 1");
  if (opt_.model_id.empty()) opt_.model_id = model_.name.empty() ? "kvshrink" : model_.name;
  started_ = static_cast<int64_t>(std::time(nullptr));
  svr_->set_keep_alive_max_count(static_cast<size_t>(c.max_requests_per_connection));
  svr_->set_keep_alive_timeout(static_cast<time_t>(std::max(1.0, c.idle_timeout_s)));
  // Bodies are read by our content receivers (read_body), capped there; this only backs it up.
  svr_->set_payload_max_length(opt_.limits.max_body_bytes);
  svr_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    return guard(req, res) ? httplib::Server::HandlerResponse::Handled : httplib::Server::HandlerResponse::Unhandled;
  });
  svr_->set_expect_100_continue_handler([this](const httplib::Request& req, httplib::Response& res) {
    // Refuse before the client sends the body (the pre-routing checks, answered now).
    return guard(req, res) ? res.status : 100;
  });
  // httplib's own refusals (a malformed request line or headers, a range) and what our stream
  // cut short get the same error shape; responses our handlers filled are left alone.
  svr_->set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    ConnStream* s = t_stream;
    if (s) s->close_after_response();
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    if (s && s->connection().evicted) {
      send_error(res, evicted_error());
    } else if (s && s->connection().woken) {
      send_error(res, stopping_error());
    } else if (s && s->failure() == ConnStream::Failure::Timeout) {
      send_error(res, timeout_error(s->phase(), opt_.connections));
    } else if (s && s->failure() == ConnStream::Failure::HeadersTooLarge) {
      send_error(res, headers_too_large_error(s->why()));
    } else if (s && s->failure() == ConnStream::Failure::UriTooLong) {
      send_error(res, uri_too_long_error(s->why()));
    } else if (s && s->failure() == ConnStream::Failure::BadRequest) {
      send_error(res, s->phase() == ConnPhase::Headers
                          ? malformed_error(s->why())
                          : bad_request("malformed chunked body: " + s->why(), "", "bad_framing"));
    } else if (res.status == 413 || (s && s->failure() == ConnStream::Failure::BodyTooLarge)) {
      send_error(res, ApiError(413, fmt::format("the request body is larger than this server's limit of {} bytes",
                                                opt_.limits.max_body_bytes),
                               "invalid_request_error", "", "request_too_large"));
    } else if (res.status == 404) {
      send_error(res, not_found(fmt::format("no endpoint {} {}", req.method.substr(0, 16), req.path.substr(0, 200)),
                                "unknown_url"));
    } else {
      send_error(res, ApiError(res.status >= 400 && res.status < 500 ? res.status : 400,
                               fmt::format("malformed HTTP request ({})", res.status), "invalid_request_error", "",
                               "bad_request"));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
  // Responses on a connection that will close say so (httplib decided keep-alive before the
  // request was read).
  svr_->set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    ConnStream* s = t_stream;
    if ((s && s->must_close()) || listener_.stopping()) {
      res.headers.erase("Keep-Alive");
      if (!res.has_header("Connection")) res.set_header("Connection", "close");
    }
  });
  svr_->set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, "internal error: " + what, "server_error"));
  });
  svr_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    const double s = t_request_start == Clock::time_point{}
                         ? 0.0
                         : std::chrono::duration<double>(Clock::now() - t_request_start).count();
    t_request_start = {};
    metrics_.request(endpoint_of(req.path), res.status, s);
  });
  routes();
}

HttpServer::~HttpServer() {
  stop();
  listener_.close_all();
  listener_.wait_drained(1e9);
}

void HttpServer::send_error(httplib::Response& res, const ApiError& e) const {
  res.status = e.status();
  if (e.status() == 429 || e.status() == 503)
    res.set_header("Retry-After", std::to_string(e.status() == 429 ? sched_.retry_after_s() : 1));
  res.set_content(dump_json(e.to_json()), "application/json");
}

bool HttpServer::guard(const httplib::Request& req, httplib::Response& res) {
  t_request_start = Clock::now();
  ConnStream* s = t_stream;
  // The fields as sent (the stream checked them); httplib's copy only where no stream is ours.
  HeadFields own;
  if (!s) {
    own.version = req.version;
    for (const auto& [k, v] : req.headers) {
      std::string name = k;
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      own.fields.emplace_back(std::move(name), v);
    }
  }
  const HeadFields& h = s ? s->head() : own;
  try {
    const Framing f = guard_.framing(h);
    if (s)
      s->begin_body(f.kind == Framing::Kind::Chunked  ? ConnStream::BodyMode::Chunked
                    : f.kind == Framing::Kind::Length ? ConnStream::BodyMode::Length
                                                      : ConnStream::BodyMode::None,
                    f.length, 2 * opt_.limits.max_body_bytes + (64 << 10), opt_.limits.max_body_bytes);
    if (listener_.stopping()) throw stopping_error();
    const bool health = req.path == "/health" && (req.method == "GET" || req.method == "HEAD");
    if (health) return false;  // open: probes come with any Host, no key
    if (s && s->connection().probe) {
      listener_.probe_refused();
      throw per_client_error(opt_.connections);
    }
    guard_.check_host(h);
    const std::optional<std::string> origin = guard_.check_origin(h);
    if (origin) {
      res.set_header("Access-Control-Allow-Origin", *origin);
      res.set_header("Vary", "Origin");
      res.set_header("Access-Control-Expose-Headers", "Retry-After");
    }
    const RouteInfo r = route_of(req.path);
    if (req.method == "OPTIONS" && origin && h.has("access-control-request-method")) {
      // A CORS preflight from an allowed origin.
      if (!r.found) throw not_found(fmt::format("no endpoint {}", req.path.substr(0, 200)), "unknown_url");
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", r.allow);
      std::string hdrs = h.value("access-control-request-headers");
      for (char c : hdrs)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == ',' || c == ' ')) hdrs.clear();
      res.set_header("Access-Control-Allow-Headers", hdrs.empty() ? "Authorization, Content-Type" : hdrs);
      res.set_header("Access-Control-Max-Age", "600");
      return true;
    }
    if (!guard_.authorized(h)) {
      res.set_header("WWW-Authenticate", "Bearer");
      throw ApiError(401, "missing or invalid API key: send 'Authorization: Bearer KEY'", "authentication_error", "",
                     "invalid_api_key");
    }
    if (!r.found)
      throw not_found(fmt::format("no endpoint {} {}", req.method.substr(0, 16), req.path.substr(0, 200)), "unknown_url");
    if (!method_allowed(r, req.method)) {
      res.set_header("Allow", r.allow);
      throw ApiError(405, fmt::format("method {} is not allowed on {} (allowed: {})", req.method.substr(0, 16),
                                      req.path.substr(0, 200), r.allow),
                     "invalid_request_error", "", "method_not_allowed");
    }
    if (r.json_body && req.method == "POST" && !RequestGuard::is_json_content_type(h.value("content-type")))
      throw ApiError(415, fmt::format("the body must be JSON sent as 'Content-Type: application/json' (got '{}')",
                                      h.has("content-type") ? h.value("content-type").substr(0, 100) : "none"),
                     "invalid_request_error", "", "unsupported_media_type");
    return false;
  } catch (const ApiError& e) {
    send_error(res, e);
    if (s) s->close_after_response();  // the body (if any) stays unread
    return true;
  }
}

bool HttpServer::read_body(const httplib::Request&, httplib::Response& res, const httplib::ContentReader& reader,
                           std::string& body, size_t& charged) {
  ConnStream* s = t_stream;
  const size_t limit = opt_.limits.max_body_bytes;
  const size_t max_values = opt_.limits.max_json_values();
  // What a body of `bytes` costs in all (body_budget.h), taken from the budget as it grows.
  const auto charge_for = [&](size_t bytes) {
    const size_t cost = BodyBudget::cost_of(bytes, max_values);
    if (cost <= charged) return true;
    if (!bodies_.try_take(cost - charged)) return false;
    charged = cost;
    return true;
  };
  bool too_large = false, no_room = false, ok = false;
  Framing f;
  if (s) f = guard_.framing(s->head());  // validated before routing: does not throw here
  if (f.kind == Framing::Kind::Length && !charge_for(static_cast<size_t>(f.length))) {
    no_room = true;  // refused before a byte of the body is read
  } else {
    if (f.kind == Framing::Kind::Length) body.reserve(static_cast<size_t>(f.length));
    ok = reader([&](const char* d, size_t n) {
      if (body.size() + n > limit) {
        too_large = true;
        return false;
      }
      if (body.size() + n > body.capacity()) {
        // A chunked body grows by doubling, charged for its capacity before it grows.
        const size_t cap = std::min(limit, std::max(body.size() + n, 2 * body.capacity()));
        if (!charge_for(cap)) {
          no_room = true;
          return false;
        }
        body.reserve(cap);
      }
      body.append(d, n);
      return true;
    });
  }
  if (s) s->end_body(ok);
  if (ok) return true;
  if (s) s->close_after_response();
  if (too_large || (s && s->failure() == ConnStream::Failure::BodyTooLarge)) {
    send_error(res, ApiError(413, fmt::format("the request body is larger than this server's limit of {} bytes "
                                              "(--max-body-mib)",
                                              limit),
                             "invalid_request_error", "", "request_too_large"));
  } else if (no_room) {
    send_error(res, ApiError(503, fmt::format("the request bodies in flight and their parsing hold {} of this server's "
                                              "{} bytes for them; retry later",
                                              bodies_.held(), bodies_.limit()),
                             "server_error", "", "server_busy"));
  } else if (s && s->failure() == ConnStream::Failure::Timeout) {
    send_error(res, timeout_error(ConnPhase::Body, opt_.connections));
  } else if (s && s->failure() == ConnStream::Failure::BadRequest) {
    send_error(res, bad_request("malformed chunked body: " + s->why(), "", "bad_framing"));
  } else {
    send_error(res, bad_request("the request body is incomplete or its chunked framing is malformed", "", "bad_framing"));
  }
  return false;
}

void HttpServer::serve_connection(Connection& c) {
  ConnStream s(c, opt_.connections);
  t_stream = &s;
  const ConnectionLimits& lim = opt_.connections;
  // A connection over the per-client cap gets one request, soon, and only /health is answered.
  const int max_requests = c.probe ? 1 : lim.max_requests_per_connection;
  for (int n = 0; n < max_requests; ++n) {
    if (!s.await_request(c.probe ? std::min(kProbeWaitS, lim.idle_timeout_s) : -1)) {
      if (c.probe && !c.woken && (c.evicted || !s.peer_closed())) {
        // Nothing within the probe wait, or closed to make room for a newer probe.
        listener_.probe_refused();
        write_refusal(s, per_client_error(lim));
      } else if (c.evicted) {
        write_refusal(s, evicted_error());
      } else if (s.failure() == ConnStream::Failure::Timeout && n == 0) {
        // A client that connected and sent nothing: say why it is closed (a kept-alive one that
        // sent no further request is closed silently, as HTTP/1.1 clients expect).
        write_refusal(s, ApiError(408, fmt::format("no request within {} s of connecting (--idle-timeout)",
                                                   lim.idle_timeout_s),
                                  "invalid_request_error", "", "request_timeout"));
        metrics_.http_timeout("idle");
      }
      break;
    }
    const bool last = n + 1 == max_requests || listener_.stopping();
    bool closed = false;
    const ConnStream::Failure before = s.failure();
    const bool ok = svr_->serve_one(s, last, closed);
    if (s.failure() == ConnStream::Failure::Timeout && before != ConnStream::Failure::Timeout)
      metrics_.http_timeout(s.phase() == ConnPhase::Body ? "body" : s.phase() == ConnPhase::Handler ? "write" : "headers");
    if (!ok && s.phase() == ConnPhase::Headers && !s.peer_closed()) {
      // The request line never came whole: httplib wrote nothing.
      if (c.evicted)
        write_refusal(s, evicted_error());
      else if (s.failure() == ConnStream::Failure::Timeout)
        write_refusal(s, timeout_error(ConnPhase::Headers, lim));
      else if (s.failure() == ConnStream::Failure::HeadersTooLarge)
        write_refusal(s, headers_too_large_error(s.why()));
      else if (s.failure() == ConnStream::Failure::UriTooLong)
        write_refusal(s, uri_too_long_error(s.why()));
      else if (s.failure() == ConnStream::Failure::BadRequest)
        write_refusal(s, malformed_error(s.why()));
    }
    if (!ok || closed || last || s.must_close() || listener_.stopping()) break;
  }
  t_stream = nullptr;
  if (!s.peer_closed()) {
    // Lingering close: our FIN first, then drop what the client still sends for a moment, so
    // that an answer sent before reading its whole body is not lost to a reset.
    ::shutdown(c.fd, SHUT_WR);
    drain_briefly(c.fd, 500);
  }
}

void HttpServer::bind() {
  port_ = listener_.bind(opt_.host, opt_.port);
}

void HttpServer::listen() {
  if (port_ <= 0) bind();
  listener_.run([this](Connection& c) { serve_connection(c); });
  // Stopping: requests in flight get the grace period to finish.
  if (listener_.wait_drained(opt_.shutdown_grace_s)) return;
  sched_.shutdown();  // fails what still runs or waits: 503, or an error event + [DONE] on a stream
  if (listener_.wait_drained(std::min(2.0, opt_.connections.write_timeout_s))) return;
  svr_->stop_streams();
  listener_.close_all();
  listener_.wait_drained(1e9);
}

void HttpServer::stop() { listener_.stop_accepting(); }

void HttpServer::routes() {
  using httplib::ContentReader;
  using httplib::Request;
  using httplib::Response;
  // JSON endpoints read their body themselves (read_body: capped whatever the framing).
  auto json_post = [this](const char* path, void (HttpServer::*h)(const Request&, Response&, const std::string&)) {
    svr_->Post(path, [this, h](const Request& q, Response& r, const ContentReader& rd) {
      size_t charged = 0;
      struct Held {  // the body's cost counts against the budget until the handler returns
        BodyBudget& budget;
        const size_t& bytes;
        ~Held() {
          budget.give_back(bytes);
          // Memory freed by a large body and its parse goes back to the system: glibc would keep
          // it in this thread's arena, and many threads' arenas add up past the budget.
          if (bytes >= kTrimAfterBytes) ::malloc_trim(0);
        }
      } held{bodies_, charged};
      std::string body;  // freed before `held` gives its cost back
      if (read_body(q, r, rd, body, charged)) (this->*h)(q, r, body);
    });
  };
  json_post("/v1/completions", &HttpServer::handle_completion);
  json_post("/v1/chat/completions", &HttpServer::handle_chat);
  json_post("/v1/contexts", &HttpServer::handle_create_context);
  json_post("/tokenize", &HttpServer::handle_tokenize);
  json_post("/detokenize", &HttpServer::handle_detokenize);
  svr_->Get("/v1/contexts", [this](const Request& q, Response& r) { handle_list_contexts(q, r); });
  svr_->Get(R"(/v1/contexts/([^/]*))", [this](const Request& q, Response& r) { handle_get_context(q, r); });
  svr_->Delete(R"(/v1/contexts/([^/]*))", [this](const Request& q, Response& r) { handle_delete_context(q, r); });
  svr_->Get("/v1/models", [this](const Request& q, Response& r) { handle_models(q, r, false); });
  svr_->Get(R"(/v1/models/(.*))", [this](const Request& q, Response& r) { handle_models(q, r, true); });
  svr_->Get("/v1/presses", [this](const Request& q, Response& r) { handle_presses(q, r); });
  svr_->Get("/health", [](const Request&, Response& r) { r.set_content(R"({"status":"ok"})", "application/json"); });
  svr_->Get("/metrics", [this](const Request&, Response& r) {
    r.set_content(render_metrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
}

std::string HttpServer::render_metrics() const {
  const ListenerStats st = listener_.stats();
  HttpGauges g;
  g.connections_open = st.open;
  g.connections_accepted = st.accepted;
  g.rejected_max_connections = st.rejected_total_cap;
  g.rejected_per_client = st.rejected_per_client;
  g.rejected_stopping = st.rejected_stopping;
  g.evicted = st.evicted;
  g.body_bytes = bodies_.held();
  return metrics_.render(g);
}

}  // namespace kvs::server
