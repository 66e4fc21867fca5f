#include "server/dir_context_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/error.h"
#include "server/api_error.h"
#include "server/api_request.h"

namespace kvs::server {

namespace fs = std::filesystem;

DirContextStore::DirContextStore(std::string dir, ContextCodec& codec) : dir_(std::move(dir)), codec_(codec) {
  std::error_code ec;
  if (!fs::exists(dir_, ec)) fs::create_directories(dir_, ec);
  if (ec) fail("--contexts-dir {}: cannot create it: {}", dir_, ec.message());
  if (!fs::is_directory(dir_, ec)) fail("--contexts-dir {}: not a directory", dir_);
}

std::string DirContextStore::path_of(const std::string& id) const { return (fs::path(dir_) / (id + ".kvc")).string(); }

void DirContextStore::put(std::shared_ptr<ServedContext> c) {
  const std::string id = c->info.id;
  if (entries_.count(id)) fail("context '{}' exists already", id);
  const std::string path = path_of(id);
  codec_.save(*c, path);  // throws before anything is added
  std::error_code ec;
  const size_t bytes = static_cast<size_t>(fs::file_size(path, ec));
  if (policy_.disk_bytes > 0) {
    if (bytes > policy_.disk_bytes) {
      fs::remove(path, ec);
      throw ApiError(507, fmt::format("the context's file ({} bytes) is larger than the contexts directory's quota of {} "
                                      "bytes (--contexts-disk-mib); compress it more (a lower keep ratio) or raise the quota",
                                      bytes, policy_.disk_bytes),
                     "server_error", "", "context_too_large_for_quota");
    }
    // The least recently used contexts make room.
    for (;;) {
      size_t used = bytes;
      Entry* lru = nullptr;
      for (auto& [eid, e] : entries_) {
        used += e.file_bytes;
        if (e.file_bytes > 0 && (!lru || e.use_seq < lru->use_seq)) lru = &e;
      }
      if (used <= policy_.disk_bytes || !lru) break;
      deleted_.push_back(lru->info.id);
      ++counters_.deleted_disk;
      erase(lru->info.id);
    }
  }
  c->info.persisted = true;
  MemoryContextStore::put(std::move(c));
  entries_[id].file_bytes = bytes;
}

std::shared_ptr<ServedContext> DirContextStore::reload(const std::string& id) {
  std::shared_ptr<ServedContext> c = codec_.load(path_of(id), id);
  c->info.persisted = true;
  return c;
}

void DirContextStore::delete_file(const std::string& id) {
  std::error_code ec;
  fs::remove(path_of(id), ec);
}

std::vector<std::string> DirContextStore::restore() {
  std::vector<std::string> problems;
  std::vector<fs::path> files;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".kvc" && it->is_regular_file(ec)) files.push_back(it->path());
  }
  if (ec) problems.push_back(fmt::format("{}: cannot list: {}", dir_, ec.message()));
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    const std::string id = p.stem().string();
    if (!valid_context_id(id)) {
      problems.push_back(fmt::format("{}: skipped: the file name is not a context id ([A-Za-z0-9_-], at most 64)", p.string()));
      continue;
    }
    try {
      // Under the KV cap the least recently restored go back to disk only to make room: every
      // valid file is listed and answerable (loaded back when asked), none skipped for memory.
      const size_t need = codec_.load_bytes_bound(p.string());
      while (codec_.kv_room() < need && MemoryContextStore::release_for_kv({}, false)) {
      }
      if (codec_.kv_room() < need) {
        // Larger than the whole cap: listed from its header, loaded (or refused, 400) when asked.
        Entry e;
        e.info = codec_.describe(p.string(), id);
        e.file_bytes = static_cast<size_t>(fs::file_size(p, ec));
        e.last_used = now_s();
        e.use_seq = ++use_seq_;
        entries_[id] = std::move(e);
        continue;
      }
      std::shared_ptr<ServedContext> c = codec_.load(p.string(), id);
      c->info.persisted = true;
      Entry e;
      e.info = c->info;
      e.ctx = std::move(c);
      e.file_bytes = static_cast<size_t>(fs::file_size(p, ec));
      e.last_used = now_s();  // a restart counts as a use: the TTL starts again
      e.use_seq = ++use_seq_;
      entries_[id] = std::move(e);
      enforce_resident(id);  // past the resident budget the older ones stay on disk only
    } catch (const std::exception& e) {
      problems.push_back(fmt::format("{}: skipped: {}", p.string(), e.what()));
    }
  }
  return problems;
}

}  // namespace kvs::server
