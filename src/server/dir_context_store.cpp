#include "server/dir_context_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "core/error.h"
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
  if (map_.count(c->info.id)) fail("context '{}' exists already", c->info.id);
  codec_.save(*c, path_of(c->info.id));  // throws before anything is added
  c->info.persisted = true;
  map_[c->info.id] = std::move(c);
}

bool DirContextStore::remove(const std::string& id) {
  if (!MemoryContextStore::remove(id)) return false;
  std::error_code ec;
  fs::remove(path_of(id), ec);
  return true;
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
      std::shared_ptr<ServedContext> c = codec_.load(p.string(), id);
      c->info.persisted = true;
      map_[id] = std::move(c);
    } catch (const std::exception& e) {
      problems.push_back(fmt::format("{}: skipped: {}", p.string(), e.what()));
    }
  }
  return problems;
}

}  // namespace kvs::server
