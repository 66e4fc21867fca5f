#include "server/context_store.h"

#include "core/error.h"

namespace kvs::server {

nlohmann::json ContextInfo::to_json(const std::string& model) const {
  nlohmann::json j;
  j["id"] = id;
  j["object"] = "context";
  j["created"] = created;
  j["model"] = model;
  j["format"] = format;
  if (format == "chat") j["roles"] = roles;
  j["tokens"] = n_tokens;
  j["kv_bytes_full"] = kv_bytes_full;
  j["kv_bytes_held"] = kv_bytes_held;
  j["keep_ratio"] = keep_measured;
  j["keep_chosen"] = keep_chosen ? nlohmann::json(*keep_chosen) : nlohmann::json(nullptr);
  j["kv_compression"] = compression;
  j["persisted"] = persisted;
  return j;
}

void MemoryContextStore::put(std::shared_ptr<ServedContext> c) {
  if (map_.count(c->info.id)) fail("context '{}' exists already", c->info.id);
  map_[c->info.id] = std::move(c);
}

std::shared_ptr<ServedContext> MemoryContextStore::get(const std::string& id) const {
  const auto it = map_.find(id);
  return it == map_.end() ? nullptr : it->second;
}

bool MemoryContextStore::remove(const std::string& id) { return map_.erase(id) > 0; }

std::vector<ContextInfo> MemoryContextStore::list() const {
  std::vector<ContextInfo> out;
  for (const auto& [id, c] : map_) out.push_back(c->info);
  return out;
}

std::vector<std::shared_ptr<ServedContext>> MemoryContextStore::all() const {
  std::vector<std::shared_ptr<ServedContext>> out;
  for (const auto& [id, c] : map_) out.push_back(c);
  return out;
}

}  // namespace kvs::server
