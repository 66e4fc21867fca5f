// `kvshrink serve` assembled: the engine (with the KV cap), the context store (memory, a
// directory of .kvc files or Redis), the metrics, the scheduler thread and the HTTP front end. Used by
// tools/cmd_serve.cpp and by the tests (an in-process server on a free loopback port).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "runtime/engine.h"
#include "server/context_file.h"
#include "server/context_store.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/redis_context_store.h"
#include "server/scheduler.h"

namespace kvs::server {

struct ServeOptions {
  EngineParams engine;         // kv_max_bytes is --max-kv-bytes
  HttpOptions http;
  SchedulerOptions scheduler;
  std::string contexts_dir;    // empty: contexts in memory only (or in Redis)
  RedisStoreOptions redis;     // redis.url non-empty: contexts shared through Redis (docs/deploy.md)
  StorePolicy contexts;        // resident budget, TTL, disk quota of the stored contexts
};

class Server {
 public:
  // Builds everything, restores stored contexts and binds the port (throws kvs::Error if any of
  // it fails). `model` must outlive the server.
  Server(const Model& model, ServeOptions opt);
  ~Server();
  int port() const { return http_->port(); }
  // Serves until stop(), then stops gracefully (HttpOptions::shutdown_grace_s) and returns once
  // every connection is closed.
  void run();
  void stop();  // starts the graceful stop; from any thread

  Engine& engine() { return *engine_; }
  Metrics& metrics() { return metrics_; }
  Scheduler& scheduler() { return *scheduler_; }
  ContextStore& store() { return *store_; }
  const std::vector<std::string>& restore_problems() const { return scheduler_->restore_problems(); }

 private:
  // Declaration order is destruction order reversed: the HTTP front end and the scheduler go
  // first, then the stored contexts, then the engine whose page pool they hold.
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<KvcContextCodec> codec_;
  std::unique_ptr<ContextStore> store_;
  Metrics metrics_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<HttpServer> http_;
};

}  // namespace kvs::server
