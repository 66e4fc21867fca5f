// The HTTP front end: OpenAI-compatible endpoints plus compressed contexts, tokenization and
// metrics. Handlers parse and validate, tokenize, hand a Job to the Scheduler and relay its
// progress (JSON, or server-sent events when streaming); they never touch the engine.
//
//   POST /v1/completions, POST /v1/chat/completions   (stream: true -> text/event-stream)
//   POST /v1/contexts, GET /v1/contexts, GET|DELETE /v1/contexts/{id}
//   POST /tokenize, POST /detokenize (llama-server's shape)
//   GET /v1/models, GET /v1/models/{id}, GET /v1/presses, GET /health, GET /metrics
//
// Connections are ours (http_listener.h: accept loop, connection caps, eviction of idle and slow
// clients; conn_stream.h: deadlines and byte caps while reading a request); cpp-httplib parses
// each request and writes each response through that stream. Before any handler, every request
// passes request_guard.h (framing, Host, Origin, API key, content type). Every refusal is a 4xx
// (or a 503 while overloaded or stopping) in OpenAI's error shape, including httplib's own.
//
// Stopping (stop(), SIGTERM): the listening socket closes, idle connections close, new requests
// on open ones get 503; requests in flight have `shutdown_grace_s` to finish, then fail with 503
// (a stream gets an error event and [DONE]); listen() returns when every connection is closed.
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "server/api_request.h"
#include "server/body_budget.h"
#include "server/http_listener.h"
#include "server/metrics.h"
#include "server/request_guard.h"
#include "server/scheduler.h"

namespace httplib {
struct Request;
struct Response;
class ContentReader;
}  // namespace httplib

namespace kvs::server {

class ConnStream;

// GET /v1/contexts page size (OpenAI's list defaults: 20, at most 100).
inline constexpr int64_t kContextsPageDefault = 20;
inline constexpr int64_t kContextsPageMax = 100;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                            // 0: any free port (see HttpServer::port())
  std::string api_key;                        // empty: no authentication
  std::vector<std::string> allowed_hosts;     // Host names accepted besides the defaults ("*": any)
  std::vector<std::string> allow_origins;     // origins that get CORS ("*": any); none by default
  ConnectionLimits connections;
  double shutdown_grace_s = 10;               // in-flight requests may finish this long after stop()
  RequestLimits limits;
  std::string model_id;                       // the model's id in /v1/models and responses
};

class HttpServer {
 public:
  HttpServer(const Model& model, Scheduler& scheduler, Metrics& metrics, HttpOptions opt);
  ~HttpServer();
  // Binds the socket; throws kvs::Error naming the address when it cannot (a taken port included).
  void bind();
  int port() const { return port_; }
  // Serves until stop(), then stops gracefully; returns once every connection is closed.
  void listen();
  // Starts the graceful stop (from any thread). Idempotent.
  void stop();

 private:
  class Httpd;
  void routes();
  void serve_connection(Connection& c);
  // The checks before routing (request_guard.h); true when the request was answered here.
  bool guard(const httplib::Request& req, httplib::Response& res);
  void send_error(httplib::Response& res, const ApiError& e) const;
  // Reads a JSON endpoint's body (capped, within the body timeout, its cost taken from the body
  // budget: body_budget.h; `charged` says how much, to give back when the request is done);
  // false when refused (the response is set).
  bool read_body(const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& reader,
                 std::string& body, size_t& charged);
  void handle_completion(const httplib::Request& req, httplib::Response& res, const std::string& body) {
    handle_generate(req, res, body, false);
  }
  void handle_chat(const httplib::Request& req, httplib::Response& res, const std::string& body) {
    handle_generate(req, res, body, true);
  }
  void handle_generate(const httplib::Request& req, httplib::Response& res, const std::string& body, bool chat);
  void handle_create_context(const httplib::Request& req, httplib::Response& res, const std::string& body);
  void handle_get_context(const httplib::Request& req, httplib::Response& res);
  void handle_delete_context(const httplib::Request& req, httplib::Response& res);
  void handle_list_contexts(const httplib::Request& req, httplib::Response& res);
  void handle_models(const httplib::Request& req, httplib::Response& res, bool one);
  void handle_presses(const httplib::Request& req, httplib::Response& res);
  void handle_tokenize(const httplib::Request& req, httplib::Response& res, const std::string& body);
  void handle_detokenize(const httplib::Request& req, httplib::Response& res, const std::string& body);
  std::string render_metrics() const;
  std::vector<int32_t> tokenize_bounded(std::string_view text, bool add_special, bool parse_special, const char* what,
                                        const char* param) const;

  const Model& model_;
  Scheduler& sched_;
  Metrics& metrics_;
  HttpOptions opt_;
  RequestGuard guard_;
  HttpListener listener_;
  std::unique_ptr<Httpd> svr_;
  BodyBudget bodies_;  // what request bodies and their parsing hold now (all connections)
  int port_ = -1;
  int64_t started_ = 0;
};

}  // namespace kvs::server
