// The HTTP front end (cpp-httplib): OpenAI-compatible endpoints plus compressed contexts and
// metrics. Handlers parse and validate, tokenize, hand a Job to the Scheduler and relay its
// progress (JSON, or server-sent events when streaming); they never touch the engine.
//
//   POST /v1/completions, POST /v1/chat/completions   (stream: true -> text/event-stream)
//   POST /v1/contexts, GET /v1/contexts, GET|DELETE /v1/contexts/{id}
//   GET /v1/models, GET /v1/models/{id}, GET /v1/presses, GET /health, GET /metrics
//
// Safety: every refusal is a 4xx in OpenAI's error shape (including httplib's own: unknown path,
// body too large, malformed HTTP); an API key, when set, is required on every endpoint but
// /health (Authorization: Bearer KEY, compared in constant time).
#pragma once
#include <memory>
#include <string>

#include "model/model.h"
#include "server/api_request.h"
#include "server/metrics.h"
#include "server/scheduler.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kvs::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;            // 0: any free port (see HttpServer::port())
  std::string api_key;        // empty: no authentication
  int threads = 64;           // HTTP worker threads (each open connection holds one)
  RequestLimits limits;
  std::string model_id;       // the model's id in /v1/models and responses
};

class HttpServer {
 public:
  HttpServer(const Model& model, Scheduler& scheduler, Metrics& metrics, HttpOptions opt);
  ~HttpServer();
  // Binds the socket; throws kvs::Error naming the address when it cannot.
  void bind();
  int port() const { return port_; }
  // Serves until stop() (from another thread or a signal handler's helper thread).
  void listen();
  void stop();

 private:
  void routes();
  bool authorized(const httplib::Request& req) const;
  void send_error(httplib::Response& res, const ApiError& e) const;
  void handle_generate(const httplib::Request& req, httplib::Response& res, bool chat);
  void handle_create_context(const httplib::Request& req, httplib::Response& res);
  void handle_get_context(const httplib::Request& req, httplib::Response& res);
  void handle_delete_context(const httplib::Request& req, httplib::Response& res);
  void handle_list_contexts(const httplib::Request& req, httplib::Response& res);
  void handle_models(const httplib::Request& req, httplib::Response& res, bool one);
  void handle_presses(const httplib::Request& req, httplib::Response& res);

  const Model& model_;
  Scheduler& sched_;
  Metrics& metrics_;
  HttpOptions opt_;
  std::unique_ptr<httplib::Server> svr_;
  int port_ = -1;
  int64_t started_ = 0;
};

// Compares without an early exit (the time taken does not depend on where the strings differ).
bool constant_time_equal(const std::string& a, const std::string& b);

}  // namespace kvs::server
