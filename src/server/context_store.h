// Where compressed contexts live, behind one interface so that the HTTP handlers and the
// scheduler never depend on the storage: MemoryContextStore (lost at exit) and DirContextStore
// (dir_context_store.h: .kvc files in a directory, reloaded at start). A store shared by several
// replicas would implement the same interface, fetching a context it does not hold through the
// codec. Stores are called from the scheduler's thread only (they hold page-pool memory).
#pragma once
#include <map>
#include <memory>
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
};

class ContextStore {
 public:
  virtual ~ContextStore() = default;
  // Adds a context under c->info.id (persisting it where the store does; c->info.persisted is
  // set then). Throws kvs::Error if it cannot be stored (nothing is added then).
  virtual void put(std::shared_ptr<ServedContext> c) = 0;
  // The context, or null.
  virtual std::shared_ptr<ServedContext> get(const std::string& id) const = 0;
  // Drops the context (and its file); false if unknown.
  virtual bool remove(const std::string& id) = 0;
  virtual std::vector<ContextInfo> list() const = 0;
  virtual std::vector<std::shared_ptr<ServedContext>> all() const = 0;
  virtual size_t size() const = 0;
  // Loads what the storage holds (at start). Returns one line per file that could not be loaded.
  virtual std::vector<std::string> restore() { return {}; }
  virtual std::string describe() const = 0;
};

class MemoryContextStore : public ContextStore {
 public:
  void put(std::shared_ptr<ServedContext> c) override;
  std::shared_ptr<ServedContext> get(const std::string& id) const override;
  bool remove(const std::string& id) override;
  std::vector<ContextInfo> list() const override;
  std::vector<std::shared_ptr<ServedContext>> all() const override;
  size_t size() const override { return map_.size(); }
  std::string describe() const override { return "in memory (not persisted)"; }

 protected:
  std::map<std::string, std::shared_ptr<ServedContext>> map_;
};

}  // namespace kvs::server
