// Server setup, authentication, error shaping and the small endpoints; the completion and
// context handlers are in api_handlers.cpp.
#include "server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <csignal>
#include <ctime>

#include "core/error.h"
#include "press/registry.h"

namespace kvs::server {

namespace {

using Clock = std::chrono::steady_clock;
thread_local Clock::time_point t_request_start{};

// The endpoint label of a path (metrics): known paths, or "other".
std::string endpoint_of(const std::string& path) {
  static const char* known[] = {"/v1/completions", "/v1/chat/completions", "/v1/contexts", "/v1/models",
                                "/v1/presses",     "/health",              "/metrics"};
  for (const char* k : known)
    if (path == k) return k;
  if (path.rfind("/v1/contexts/", 0) == 0) return "/v1/contexts/{id}";
  if (path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
  return "other";
}

}  // namespace

bool constant_time_equal(const std::string& a, const std::string& b) {
  // Every byte of the longer string is visited whatever the contents; only the lengths show.
  const size_t n = std::max(a.size(), b.size());
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

HttpServer::HttpServer(const Model& model, Scheduler& scheduler, Metrics& metrics, HttpOptions opt)
    : model_(model), sched_(scheduler), metrics_(metrics), opt_(std::move(opt)), svr_(std::make_unique<httplib::Server>()) {
  if (opt_.threads < 1 || opt_.threads > 4096) fail("--http-threads must be in 1..4096, got {}", opt_.threads);
  if (opt_.model_id.empty()) opt_.model_id = model_.name.empty() ? "kvshrink" : model_.name;
  started_ = static_cast<int64_t>(std::time(nullptr));
  const int threads = opt_.threads;
  svr_->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr_->set_payload_max_length(opt_.limits.max_body_bytes);
  svr_->set_keep_alive_max_count(1000);
  svr_->set_read_timeout(30, 0);
  svr_->set_write_timeout(30, 0);
  svr_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    t_request_start = Clock::now();
    if (req.path == "/health" || authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer");
    send_error(res, ApiError(401, "missing or invalid API key: send 'Authorization: Bearer KEY'",
                             "authentication_error", "", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // httplib's own refusals (no route, body too large, malformed request line or headers) get
  // the same error shape; responses our handlers filled are left alone.
  svr_->set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    switch (res.status) {
      case 404:
        send_error(res, not_found(fmt::format("no endpoint {} {}", req.method, req.path.substr(0, 200)), "unknown_url"));
        break;
      case 413:
        send_error(res, ApiError(413, fmt::format("the request body is larger than this server's limit of {} bytes",
                                                  opt_.limits.max_body_bytes),
                                 "invalid_request_error", "", "request_too_large"));
        break;
      case 405:
        send_error(res, ApiError(405, fmt::format("method {} is not allowed on {}", req.method, req.path.substr(0, 200)),
                                 "invalid_request_error", "", "method_not_allowed"));
        break;
      default:
        send_error(res, ApiError(res.status >= 400 && res.status < 500 ? res.status : 400,
                                 fmt::format("malformed HTTP request ({})", res.status), "invalid_request_error", "",
                                 "bad_request"));
    }
    return httplib::Server::HandlerResponse::Handled;
  }));
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

HttpServer::~HttpServer() { stop(); }

bool HttpServer::authorized(const httplib::Request& req) const {
  if (opt_.api_key.empty()) return true;
  const std::string h = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  if (h.size() < prefix.size() || h.compare(0, prefix.size(), prefix) != 0) return false;
  return constant_time_equal(h.substr(prefix.size()), opt_.api_key);
}

void HttpServer::send_error(httplib::Response& res, const ApiError& e) const {
  res.status = e.status();
  res.set_content(dump_json(e.to_json()), "application/json");
}

void HttpServer::bind() {
  // A client that goes away mid-response must not kill the server (httplib sends without
  // MSG_NOSIGNAL).
  std::signal(SIGPIPE, SIG_IGN);
  if (opt_.port == 0) {
    port_ = svr_->bind_to_any_port(opt_.host);
  } else {
    port_ = svr_->bind_to_port(opt_.host, opt_.port) ? opt_.port : -1;
  }
  if (port_ <= 0) fail("cannot listen on {}:{} (address in use, or not an address of this machine?)", opt_.host, opt_.port);
}

void HttpServer::listen() {
  if (port_ <= 0) bind();
  svr_->listen_after_bind();
}

void HttpServer::stop() {
  if (svr_ && svr_->is_running()) svr_->stop();
}

void HttpServer::routes() {
  using httplib::Request;
  using httplib::Response;
  svr_->Post("/v1/completions", [this](const Request& q, Response& r) { handle_generate(q, r, false); });
  svr_->Post("/v1/chat/completions", [this](const Request& q, Response& r) { handle_generate(q, r, true); });
  svr_->Post("/v1/contexts", [this](const Request& q, Response& r) { handle_create_context(q, r); });
  svr_->Get("/v1/contexts", [this](const Request& q, Response& r) { handle_list_contexts(q, r); });
  svr_->Get(R"(/v1/contexts/([^/]*))", [this](const Request& q, Response& r) { handle_get_context(q, r); });
  svr_->Delete(R"(/v1/contexts/([^/]*))", [this](const Request& q, Response& r) { handle_delete_context(q, r); });
  svr_->Get("/v1/models", [this](const Request& q, Response& r) { handle_models(q, r, false); });
  svr_->Get(R"(/v1/models/(.*))", [this](const Request& q, Response& r) { handle_models(q, r, true); });
  svr_->Get("/v1/presses", [this](const Request& q, Response& r) { handle_presses(q, r); });
  svr_->Get("/health", [](const Request&, Response& r) { r.set_content(R"({"status":"ok"})", "application/json"); });
  svr_->Get("/metrics", [this](const Request&, Response& r) {
    r.set_content(metrics_.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  // The right path with the wrong method: 405 rather than httplib's 404.
  auto not_allowed = [](const Request&, Response& r) { r.status = 405; };
  for (const char* p : {"/v1/completions", "/v1/chat/completions"}) {
    svr_->Get(p, not_allowed);
    svr_->Put(p, not_allowed);
    svr_->Delete(p, not_allowed);
  }
  for (const char* p : {"/v1/models", "/health", "/metrics", "/v1/presses"}) {
    svr_->Post(p, not_allowed);
    svr_->Put(p, not_allowed);
    svr_->Delete(p, not_allowed);
  }
  svr_->Put("/v1/contexts", not_allowed);
  svr_->Delete("/v1/contexts", not_allowed);
  svr_->Put(R"(/v1/contexts/([^/]*))", not_allowed);
  svr_->Post(R"(/v1/contexts/([^/]*))", not_allowed);
}

void HttpServer::handle_models(const httplib::Request& req, httplib::Response& res, bool one) {
  nlohmann::json m;
  m["id"] = opt_.model_id;
  m["object"] = "model";
  m["created"] = started_;
  m["owned_by"] = "kvshrink";
  m["meta"] = {{"n_ctx_train", model_.hp.n_ctx_train}, {"n_vocab", model_.hp.n_vocab}, {"n_layer", model_.hp.n_layer},
               {"ctx_size", opt_.limits.ctx_size}};
  if (one) {
    const std::string id = req.matches.size() > 1 ? req.matches[1].str() : "";
    if (id != opt_.model_id) {
      send_error(res, not_found(fmt::format("no model '{}' (this server serves '{}')", id.substr(0, 200), opt_.model_id),
                                "model_not_found"));
      return;
    }
    res.set_content(dump_json(m), "application/json");
    return;
  }
  res.set_content(dump_json({{"object", "list"}, {"data", nlohmann::json::array({m})}}), "application/json");
}

void HttpServer::handle_presses(const httplib::Request&, httplib::Response& res) {
  nlohmann::json list = nlohmann::json::array();
  for (const PressInfo& p : press_registry()) {
    nlohmann::json opts = nlohmann::json::array();
    for (const ParamSpec& s : p.params)
      opts.push_back({{"name", s.name}, {"default", s.default_value}, {"range", s.range_text()}, {"doc", s.doc}});
    list.push_back({{"name", p.name},
                    {"paper", p.paper},
                    {"description", p.description},
                    {"default_sinks", p.default_sinks},
                    {"default_window", p.default_window},
                    {"default_trigger", p.default_trigger.describe()},
                    {"default_allocator", p.default_allocator},
                    {"options", opts}});
  }
  nlohmann::json allocs = nlohmann::json::array();
  for (const AllocatorInfo& a : allocator_registry()) allocs.push_back({{"name", a.name}, {"description", a.description}});
  res.set_content(dump_json({{"object", "list"}, {"data", list}, {"allocators", allocs}}), "application/json");
}

}  // namespace kvs::server
