#include "server/store_budget.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace kvs::server {

namespace fs = std::filesystem;

namespace {

std::string bytes_text(size_t b) {
  if (b >= (size_t{1} << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1 << 30));
  if (b >= (size_t{1} << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
  return fmt::format("{} bytes", b);
}

}  // namespace

size_t machine_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  size_t mem = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : size_t{4} << 30;
  // cgroup v2 ("max" when unlimited), then v1.
  for (const char* f : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(f);
    unsigned long long limit = 0;
    if (in >> limit && limit > 0) mem = std::min<size_t>(mem, static_cast<size_t>(limit));
  }
  return mem;
}

StorePolicy default_store_policy(StorePolicy p, size_t kv_cap, const std::string& contexts_dir) {
  if (p.resident_bytes == 0) p.resident_bytes = kv_cap ? kv_cap : machine_memory_bytes() / 4;
  size_t files = 0, file_bytes = 0;
  if (!contexts_dir.empty()) {
    std::error_code ec;
    for (fs::directory_iterator it(contexts_dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() != ".kvc" || !it->is_regular_file(ec)) continue;
      ++files;
      file_bytes += static_cast<size_t>(it->file_size(ec));
    }
    if (p.disk_bytes == 0) {
      const fs::space_info sp = fs::space(contexts_dir.empty() ? "." : contexts_dir, ec);
      const size_t free = ec ? 0 : static_cast<size_t>(sp.available);
      p.disk_bytes = std::max<size_t>(file_bytes + free / 2, 1);
    }
  }
  if (p.max_contexts == 0) p.max_contexts = std::max(kDefaultMaxContexts, files);
  return p;
}

std::string describe_store_policy(const StorePolicy& p) {
  return fmt::format("resident {}, disk {}, at most {} contexts, ttl {}",
                     p.resident_bytes ? bytes_text(p.resident_bytes) : std::string("no limit"),
                     p.disk_bytes ? bytes_text(p.disk_bytes) : std::string("n/a"),
                     p.max_contexts ? std::to_string(p.max_contexts) : std::string("no limit"),
                     p.ttl_s ? fmt::format("{} s", p.ttl_s) : std::string("none"));
}

}  // namespace kvs::server
