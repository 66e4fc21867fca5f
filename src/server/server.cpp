#include "server/server.h"

#include "core/error.h"
#include "server/dir_context_store.h"
#include "server/store_budget.h"

namespace kvs::server {

Server::Server(const Model& model, ServeOptions opt) {
  engine_ = std::make_unique<Engine>(model, opt.engine);
  codec_ = std::make_unique<KvcContextCodec>(*engine_, model);
  if (!opt.redis.url.empty() && !opt.contexts_dir.empty())
    fail("--contexts-url and --contexts-dir both given: contexts live in one place (Redis, shared by replicas, or a "
         "directory of this server)");
  if (!opt.redis.url.empty())
    store_ = std::make_unique<RedisContextStore>(opt.redis, *codec_, model);
  else if (opt.contexts_dir.empty())
    store_ = std::make_unique<MemoryContextStore>();
  else
    store_ = std::make_unique<DirContextStore>(opt.contexts_dir, *codec_);
  if (opt.contexts.disk_bytes > 0 && opt.contexts_dir.empty() && opt.redis.url.empty())
    fail("--contexts-disk-mib limits the contexts directory (or the Redis server's memory): give --contexts-dir or "
         "--contexts-url too");
  // Before the scheduler restores the directory; budgets left at 0 get their defaults.
  store_->set_policy(default_store_policy(opt.contexts, opt.engine.kv_max_bytes, opt.contexts_dir));
  if (opt.http.limits.n_vocab == 0) opt.http.limits.n_vocab = model.hp.n_vocab;
  scheduler_ = std::make_unique<Scheduler>(*engine_, *store_, metrics_, opt.scheduler);
  http_ = std::make_unique<HttpServer>(model, *scheduler_, metrics_, opt.http);
  http_->bind();
}

Server::~Server() {
  // Stop accepting, fail what is in flight so that every handler returns, then tear down.
  stop();
  if (scheduler_) scheduler_->shutdown();
  http_.reset();
  scheduler_.reset();
  store_.reset();
}

void Server::run() { http_->listen(); }

void Server::stop() {
  if (http_) http_->stop();
}

}  // namespace kvs::server
