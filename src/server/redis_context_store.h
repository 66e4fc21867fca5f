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
// The index is read a page at a time (ZRANGE / ZRANGEBYSCORE with LIMIT, ZSCORE of `after`), never
// whole, so a list costs the same with 50,000 contexts as with 50. Past --contexts-max contexts
// under the prefix, a put deletes the oldest (lowest score) of every replica.
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
  bool release_for_kv(const std::vector<const ServedContext*>& in_use, bool may_delete = false) override;
  size_t load_bytes(const std::string& id) const override;
  StorePolicy policy() const override;
  StoreStats stats() const override;

  bool shared() const override { return true; }
  std::optional<ContextInfo> lookup(const std::string& id) const override;
  std::vector<ContextInfo> lookup_all() const override;
  ContextPage lookup_page(const std::string& after, size_t limit, bool descending) const override;
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
  // Deletes the contexts named (a ZRANGE reply), each key and index entry in one MULTI, all in one
  // pipeline, except `keep`; counts each in `counter`. Returns how many it deleted.
  size_t delete_contexts(const std::vector<RedisReply>& ids_in_order, const std::string& keep, uint64_t& counter);

  std::unique_ptr<RedisClient> client_;
  ContextCodec& codec_;
  std::string prefix_, model_name_, fingerprint_;
  int64_t ttl_s_ = 0;  // Redis EXPIRE (the memory layer has no TTL)
  size_t max_contexts_ = 0;  // contexts under the prefix at most (shared by the replicas; the oldest deleted)
  uint64_t deleted_count_ = 0;
  // Infos of `ids` (index members) in order, leaving out other models' and unreadable ones;
  // expired entries are dropped from the index.
  std::vector<ContextInfo> infos_of(const std::vector<RedisReply>& ids) const;

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
