#include "server/context_store.h"

#include <algorithm>
#include <ctime>

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
  j["resident"] = resident;
  return j;
}

int64_t MemoryContextStore::now_s() { return static_cast<int64_t>(std::time(nullptr)); }

void MemoryContextStore::touch(Entry& e) {
  e.last_used = now_s();
  e.use_seq = ++use_seq_;
}

void MemoryContextStore::put(std::shared_ptr<ServedContext> c) {
  if (entries_.count(c->info.id)) fail("context '{}' exists already", c->info.id);
  Entry e;
  e.info = c->info;
  e.ctx = std::move(c);
  touch(e);
  const std::string id = e.info.id;
  entries_[id] = std::move(e);
  enforce_resident(id);
  enforce_count(id);
}

std::shared_ptr<ServedContext> MemoryContextStore::get(const std::string& id) {
  const auto it = entries_.find(id);
  if (it == entries_.end()) return nullptr;
  Entry& e = it->second;
  if (!e.ctx) {
    e.ctx = reload(id);  // throws kvs::Error naming the file if it cannot be loaded
    if (!e.ctx) return nullptr;
    e.ctx->info.persisted = true;
    ++counters_.reloads;
  }
  touch(e);
  enforce_resident(id);
  return e.ctx;
}

void MemoryContextStore::erase(const std::string& id) {
  delete_file(id);
  entries_.erase(id);
}

bool MemoryContextStore::remove(const std::string& id) {
  if (!entries_.count(id)) return false;
  erase(id);
  return true;
}

std::vector<ContextInfo> MemoryContextStore::list() const {
  std::vector<ContextInfo> out;
  for (const auto& [id, e] : entries_) {
    ContextInfo i = e.info;
    i.resident = e.ctx != nullptr;
    out.push_back(std::move(i));
  }
  return out;
}

std::vector<std::shared_ptr<ServedContext>> MemoryContextStore::all() const {
  std::vector<std::shared_ptr<ServedContext>> out;
  for (const auto& [id, e] : entries_)
    if (e.ctx) out.push_back(e.ctx);
  return out;
}

void MemoryContextStore::enforce_resident(const std::string& keep) {
  if (policy_.resident_bytes == 0) return;
  for (;;) {
    size_t held = 0;
    Entry* lru = nullptr;
    for (auto& [id, e] : entries_) {
      if (!e.ctx) continue;
      held += e.info.kv_bytes_held;
      if (id != keep && (!lru || e.use_seq < lru->use_seq)) lru = &e;
    }
    if (held <= policy_.resident_bytes || !lru) return;
    if (has_file(*lru)) {
      lru->ctx.reset();  // dropped from memory; reloaded from its file on demand
      ++counters_.evicted_memory;
    } else {
      deleted_.push_back(lru->info.id);
      ++counters_.deleted_memory;
      erase(lru->info.id);
    }
  }
}

void MemoryContextStore::enforce_count(const std::string& keep) {
  if (policy_.max_contexts == 0) return;
  while (entries_.size() > policy_.max_contexts) {
    Entry* lru = nullptr;
    for (auto& [id, e] : entries_)
      if (id != keep && (!lru || e.use_seq < lru->use_seq)) lru = &e;
    if (!lru) return;
    deleted_.push_back(lru->info.id);
    ++counters_.deleted_count;
    erase(lru->info.id);
  }
}

std::vector<std::string> MemoryContextStore::maintain(int64_t now) {
  if (policy_.ttl_s > 0) {
    std::vector<std::string> expired;
    for (const auto& [id, e] : entries_)
      if (now - e.last_used > policy_.ttl_s) expired.push_back(id);
    for (const auto& id : expired) {
      erase(id);
      ++counters_.deleted_ttl;
      deleted_.push_back(id);
    }
  }
  // The most recently used context always stays: a budget smaller than one context would
  // otherwise delete (or drop) a context right after it was made.
  std::string newest;
  uint64_t newest_seq = 0;
  for (const auto& [id, e] : entries_)
    if (e.ctx && e.use_seq >= newest_seq) newest = id, newest_seq = e.use_seq;
  enforce_resident(newest);
  std::vector<std::string> out;
  out.swap(deleted_);
  return out;
}

bool MemoryContextStore::release_for_kv(const std::vector<const ServedContext*>& in_use, bool may_delete) {
  Entry* lru = nullptr;       // the least recently used with a file (dropped from memory only)
  Entry* lru_mem = nullptr;   // the least recently used without one (deleted, when allowed)
  for (auto& [id, e] : entries_) {
    if (!e.ctx || std::find(in_use.begin(), in_use.end(), e.ctx.get()) != in_use.end()) continue;
    Entry*& slot = has_file(e) ? lru : lru_mem;
    if (!slot || e.use_seq < slot->use_seq) slot = &e;
  }
  if (lru) {
    lru->ctx.reset();
    ++counters_.evicted_kv_pressure;
    return true;
  }
  if (!may_delete || !lru_mem) return false;
  deleted_.push_back(lru_mem->info.id);
  ++counters_.deleted_kv_pressure;
  erase(lru_mem->info.id);
  return true;
}

size_t MemoryContextStore::load_bytes(const std::string& id) const {
  const auto it = entries_.find(id);
  return it == entries_.end() || it->second.ctx ? 0 : it->second.info.kv_bytes_held;
}

StoreStats MemoryContextStore::stats() const {
  StoreStats s = counters_;
  s.budget = policy_;
  s.stored = entries_.size();
  s.resident = s.resident_bytes = s.disk_bytes = 0;
  for (const auto& [id, e] : entries_) {
    if (e.ctx) {
      ++s.resident;
      s.resident_bytes += e.info.kv_bytes_held;
    }
    s.disk_bytes += e.file_bytes;
  }
  return s;
}

}  // namespace kvs::server
