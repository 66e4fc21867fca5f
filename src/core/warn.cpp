#include "core/warn.h"

#include <cstdio>
#include <mutex>
#include <set>

namespace kvs {
namespace {

std::mutex g_mu;
std::set<std::string> g_seen;
WarnSink g_sink;

}  // namespace

void warn_once(const std::string& key, const std::string& message) {
  WarnSink sink;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_seen.insert(key).second) return;
    sink = g_sink;
  }
  if (sink)
    sink(message);
  else
    std::fprintf(stderr, "kvshrink: warning: %s\n", message.c_str());
}

WarnSink set_warn_sink(WarnSink sink) {
  std::lock_guard<std::mutex> lock(g_mu);
  WarnSink old = std::move(g_sink);
  g_sink = std::move(sink);
  return old;
}

void reset_warnings() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_seen.clear();
}

}  // namespace kvs
