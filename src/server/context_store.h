// Where compressed contexts live, behind one interface so that the HTTP handlers and the
// scheduler never depend on the storage: MemoryContextStore (lost at exit) and DirContextStore
// (dir_context_store.h: .kvc files in a directory, reloaded at start). A store shared by several
// replicas would implement the same interface, fetching a context it does not hold through the
// codec. Stores are called from the scheduler's thread only (they hold page-pool memory).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/served_context.h"

namespace kvs::server {

// Turns a context into bytes on some storage and back (the server's .kvc codec, context_file.h).
class ContextCodec {
 public:
  virtual ~ContextCodec() = default;
  virtual void save(const ServedContext& c, const std::string& path) = 0;
  // Throws kvs::Error (naming the file and why) when the file cannot be used with this model.
  virtual std::shared_ptr<ServedContext> load(const std::string& path, const std::string& id) = 0;
  // The same as bytes in memory (a store shared through Redis).
  virtual std::vector<uint8_t> encode(const ServedContext& c) const = 0;
  virtual std::shared_ptr<ServedContext> decode(const uint8_t* data, size_t n, const std::string& name,
                                                const std::string& id) = 0;
  // At most the KV bytes loading the file would take (from its header; throws kvs::Error on a bad one).
  virtual size_t load_bytes_bound(const std::string& path) { (void)path; return 0; }
  // What a file holds, read and checked (checksum, shape, model) without loading it into memory
  // (kv_bytes_held: what loading it would take); throws kvs::Error as load does.
  virtual ContextInfo describe(const std::string& path, const std::string& id) {
    (void)path;
    ContextInfo i;
    i.id = id;
    return i;
  }
  // KV bytes the page pool's cap leaves free now (SIZE_MAX without a cap).
  virtual size_t kv_room() const { return SIZE_MAX; }
};

// What a store may keep (`kvshrink serve --contexts-resident-mib / --contexts-ttl /
// --contexts-disk-mib / --contexts-max`; 0: no limit). The server fills what the flags leave at 0
// with defaults derived from the KV cap and the machine (store_budget.h).
struct StorePolicy {
  size_t resident_bytes = 0;  // KV bytes of the contexts held in memory
  int64_t ttl_s = 0;          // a context unused this long is deleted (memory and disk)
  size_t disk_bytes = 0;      // bytes of the .kvc files (directory stores)
  size_t max_contexts = 0;    // contexts stored at most (the least recently used are deleted past it)
};

// One page of a list of contexts in creation order (GET /v1/contexts).
struct ContextPage {
  std::vector<ContextInfo> data;
  bool has_more = false;
  bool after_found = true;  // false: `after` names no context
};

// The store's figures for /metrics (counters since start).
struct StoreStats {
  size_t stored = 0;          // contexts known (resident or on disk only)
  size_t resident = 0;        // of which in memory
  size_t resident_bytes = 0;  // their KV bytes
  size_t disk_bytes = 0;      // bytes of their files
  uint64_t evicted_memory = 0;       // dropped from memory for the resident budget (kept on disk)
  uint64_t evicted_kv_pressure = 0;  // dropped from memory to admit a request under --max-kv-bytes
  uint64_t deleted_ttl = 0, deleted_disk = 0, deleted_memory = 0;  // deleted for the TTL / disk quota / budget (no disk)
  uint64_t deleted_count = 0;        // deleted for the count budget (--contexts-max)
  uint64_t deleted_kv_pressure = 0;  // deleted (no file to reload from) to admit a request under --max-kv-bytes
  uint64_t reloads = 0;              // loaded back from disk on demand
  StorePolicy budget;                // the budgets in force (0: none)
};

class ContextStore {
 public:
  virtual ~ContextStore() = default;
  // Adds a context under c->info.id (persisting it where the store does; c->info.persisted is
  // set then). Throws kvs::Error if it cannot be stored (nothing is added then); an ApiError
  // (507) when a disk quota cannot hold it.
  virtual void put(std::shared_ptr<ServedContext> c) = 0;
  // The context (reloaded from disk when it was dropped from memory), or null. Marks it used.
  virtual std::shared_ptr<ServedContext> get(const std::string& id) = 0;
  virtual bool contains(const std::string& id) const = 0;
  // Drops the context (and its file); false if unknown.
  virtual bool remove(const std::string& id) = 0;
  // Every context known, resident or not (resident = false when only on disk).
  virtual std::vector<ContextInfo> list() const = 0;
  // The contexts in memory.
  virtual std::vector<std::shared_ptr<ServedContext>> all() const = 0;
  virtual size_t size() const = 0;
  // Loads what the storage holds (at start). Returns one line per file that could not be loaded.
  virtual std::vector<std::string> restore() { return {}; }
  virtual std::string describe() const = 0;
  virtual void set_policy(const StorePolicy& p) { (void)p; }
  // Applies the TTL and the resident budget at time `now` (unix seconds); returns the ids deleted
  // since the last call, by it or by put/get (contexts dropped from memory but kept on disk are
  // not deleted).
  virtual std::vector<std::string> maintain(int64_t now) { (void)now; return {}; }
  // Frees memory for admission under the KV cap: drops the least recently used resident context
  // that is on disk and not in `in_use` from memory; with `may_delete`, one without a file is
  // deleted when none is on disk. False when there is none.
  virtual bool release_for_kv(const std::vector<const ServedContext*>& in_use, bool may_delete = false) {
    (void)in_use, (void)may_delete;
    return false;
  }
  // KV bytes that loading context `id` back into memory would take (0: resident, or unknown).
  virtual size_t load_bytes(const std::string& id) const { (void)id; return 0; }
  virtual StorePolicy policy() const { return {}; }
  virtual StoreStats stats() const = 0;

  // A store shared by several servers (Redis, redis_context_store.h) is the truth for which
  // contexts exist: the handlers ask it directly instead of the scheduler's copy of list(). These
  // three are thread-safe; they throw ApiError (503: the store cannot be reached, 409: a context
  // made with another model).
  virtual bool shared() const { return false; }
  virtual std::optional<ContextInfo> lookup(const std::string& id) const { (void)id; return std::nullopt; }
  virtual std::vector<ContextInfo> lookup_all() const { return {}; }
  // Up to `limit` contexts after the one named `after` ("": from the start) in creation order
  // (newest first when `descending`), reading the index a page at a time.
  virtual ContextPage lookup_page(const std::string& after, size_t limit, bool descending) const {
    (void)after, (void)limit, (void)descending;
    return {};
  }
  // Throws ApiError 503 when a new context could not be stored now (checked before it is prefilled).
  virtual void check_writable() const {}
};

// Contexts in memory, with the policy's bookkeeping; the directory store (dir_context_store.h)
// adds files. Without files, the resident budget and the TTL delete contexts (nothing to reload).
class MemoryContextStore : public ContextStore {
 public:
  void put(std::shared_ptr<ServedContext> c) override;
  std::shared_ptr<ServedContext> get(const std::string& id) override;
  bool contains(const std::string& id) const override { return entries_.count(id) > 0; }
  bool remove(const std::string& id) override;
  std::vector<ContextInfo> list() const override;
  std::vector<std::shared_ptr<ServedContext>> all() const override;
  size_t size() const override { return entries_.size(); }
  std::string describe() const override { return "in memory (not persisted)"; }
  void set_policy(const StorePolicy& p) override { policy_ = p; }
  StorePolicy policy() const override { return policy_; }
  std::vector<std::string> maintain(int64_t now) override;
  bool release_for_kv(const std::vector<const ServedContext*>& in_use, bool may_delete = false) override;
  size_t load_bytes(const std::string& id) const override;
  StoreStats stats() const override;

 protected:
  struct Entry {
    ContextInfo info;
    std::shared_ptr<ServedContext> ctx;  // null: on disk only
    int64_t last_used = 0;               // unix seconds
    uint64_t use_seq = 0;                // order of use (ties of last_used)
    size_t file_bytes = 0;
  };
  // Hooks of a store with files: whether a context can be loaded back, loading it, deleting its file.
  virtual bool has_file(const Entry& e) const { (void)e; return false; }
  virtual std::shared_ptr<ServedContext> reload(const std::string& id) { (void)id; return nullptr; }
  virtual void delete_file(const std::string& id) { (void)id; }
  // Keeps the resident bytes within the budget, never dropping `keep` (ids deleted go to deleted_).
  void enforce_resident(const std::string& keep);
  // Keeps the number of contexts within the count budget, never deleting `keep`.
  void enforce_count(const std::string& keep);
  void erase(const std::string& id);
  void touch(Entry& e);
  static int64_t now_s();

  std::map<std::string, Entry> entries_;
  StorePolicy policy_;
  StoreStats counters_;  // the event counters (the sizes are computed in stats())
  uint64_t use_seq_ = 0;
  std::vector<std::string> deleted_;  // deleted since the last maintain() (returned by it)
};

}  // namespace kvs::server
