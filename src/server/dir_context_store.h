// Contexts persisted as .kvc files in a directory (`kvshrink serve --contexts-dir DIR`): every
// context created is written to DIR/<id>.kvc (atomically: a temporary renamed into place) and
// deleted with the context; at start every DIR/*.kvc made with this model is loaded back (into
// memory up to the resident budget, the rest loaded when first used). A context dropped from
// memory (resident budget, KV pressure) stays on disk and is loaded back on demand; the disk quota
// deletes the least recently used contexts to make room, and refuses (507) one that alone exceeds it.
#pragma once
#include <string>

#include "server/context_store.h"

namespace kvs::server {

class DirContextStore : public MemoryContextStore {
 public:
  // Creates `dir` if missing; throws kvs::Error if it is not a writable directory.
  DirContextStore(std::string dir, ContextCodec& codec);
  void put(std::shared_ptr<ServedContext> c) override;
  std::vector<std::string> restore() override;
  std::string describe() const override { return "directory " + dir_; }
  std::string path_of(const std::string& id) const;

 protected:
  bool has_file(const Entry& e) const override { return e.info.persisted; }
  std::shared_ptr<ServedContext> reload(const std::string& id) override;
  void delete_file(const std::string& id) override;

 private:
  std::string dir_;
  ContextCodec& codec_;
};

}  // namespace kvs::server
