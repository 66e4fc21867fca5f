// Contexts shared by several `kvshrink serve` replicas through Redis (`--contexts-url
// redis://HOST:PORT[/DB]`, docs/deploy.md). Redis holds every context once; each replica keeps
// the ones it used recently in memory (the resident budget, --contexts-resident-mib) and loads the
// others from Redis when a question needs them.
//
// In Redis (keys under a prefix, "kvshrink:" by default, --contexts-prefix):
//   <prefix>ctx:<id>  hash  kvc          the context's .kvc bytes (kvcache/cache_file.h: header
//                                        with the model fingerprint, press and options; FNV-1a
//                                        checksum of every byte, verified when loaded)
//                           info         JSON: what GET /v1/contexts/<id> shows (tokens, bytes, keep,
//                                        kv_compression, created, seq, format, roles)
//                           model        the model's name
//                           fingerprint  the model's fingerprint (runtime/kvc_meta.h)
//   <prefix>ids       zset  member <id>, score the creation order (<prefix>seq, INCR)
//   <prefix>seq       integer
// A context is written by one MULTI/EXEC (the hash and its index entry together: visible whole or
// not at all) and deleted the same way; with --contexts-ttl the hash expires after that long
// without use (EXPIRE, refreshed when a replica uses it; the index entry of an expired hash is
// dropped when a list meets it).
//
// A context made with another model (another fingerprint) is never answered: get, lookup and
// delete give 409 and lists leave it out. Redis down or slower than the timeout: context
// operations (create, get, list, delete, questions on a context) give 503 naming Redis and the
// reason — a replica cannot tell whether a context it holds was deleted meanwhile — and after a
// timeout the client's breaker fails them at once for a second; completions without a
// context_id are unaffected.
//
// Threads: put/get/remove/maintain/release_for_kv run on the scheduler thread (as every store);
// lookup, lookup_all and check_writable on handler threads (the client's connection pool and a
// mutex-guarded copy of the ids held here). A watcher thread asks Redis every second whether the
// contexts held here still exist (deleted through another replica, expired) and refreshes the
// expiry of those used; maintain() applies what it found, so no periodic network wait falls on
// the scheduler thread.
#pragma once
#include <memory>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <set>
#include <string>

#include "model/model.h"
#include "server/context_store.h"
#include "server/redis_client.h"

namespace kvs::server {

struct RedisStoreOptions {
  std::string url;                 // redis://HOST[:PORT][/DB]
  std::string prefix = "kvshrink:";
  RedisOptions client;             // password, timeouts
};

class RedisContextStore : public MemoryContextStore {
 public:
  // Throws kvs::Error for a malformed URL or prefix (Redis itself is reached lazily: a replica
  // starts, and serves completions, while Redis is down).
  RedisContextStore(const RedisStoreOptions& opt, ContextCodec& codec, const Model& model);
  ~RedisContextStore() override;

  void put(std::shared_ptr<ServedContext> c) override;
  std::shared_ptr<ServedContext> get(const std::string& id) override;
  bool contains(const std::string& id) const override;
  bool remove(const std::string& id) override;
  std::vector<std::string> restore() override;
  std::string describe() const override;
  void set_policy(const StorePolicy& p) override;
  std::vector<std::string> maintain(int64_t now) override;
  bool release_for_kv(const std::vector<const ServedContext*>& in_use) override;

  bool shared() const override { return true; }
  std::optional<ContextInfo> lookup(const std::string& id) const override;
  std::vector<ContextInfo> lookup_all() const override;
  void check_writable() const override;

  RedisClient& client() { return *client_; }
  std::string key_of(const std::string& id) const { return prefix_ + "ctx:" + id; }

 protected:
  bool has_file(const Entry& e) const override { (void)e; return true; }  // every context is in Redis

 private:
  [[noreturn]] void unavailable(const std::string& what, const std::exception& e) const;
  [[noreturn]] void other_model(const std::string& id, const std::string& model, const std::string& fingerprint) const;
  void publish_resident();  // the ids held here, for lookup() and the watcher
  void watch();             // the watcher thread's loop

  std::unique_ptr<RedisClient> client_;
  ContextCodec& codec_;
  std::string prefix_, model_name_, fingerprint_;
  int64_t ttl_s_ = 0;  // Redis EXPIRE (the memory layer has no TTL)

  mutable std::mutex resident_mu_;       // guards the four below and stop_
  std::set<std::string> resident_ids_;   // in memory here
  std::set<std::string> known_ids_;      // every entry here (in memory or not)
  std::set<std::string> touched_;        // used since the watcher's last pass (their EXPIRE is refreshed)
  std::vector<std::string> gone_;        // found deleted in Redis by the watcher (maintain drops them)
  bool stop_ = false;
  std::condition_variable watch_cv_;
  std::thread watcher_;
};

}  // namespace kvs::server
