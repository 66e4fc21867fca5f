// Warnings about a setting that works but is probably not what the user meant (a Compactor sketch
// as wide as the head, ...): printed once per process and key on stderr ("kvshrink: warning: ..."),
// or handed to a sink a program or test installs instead.
#pragma once
#include <functional>
#include <string>

namespace kvs {

// Emits `message` the first time `key` is warned about in this process.
void warn_once(const std::string& key, const std::string& message);
// Replaces stderr as the destination (null: back to stderr). Returns the previous sink.
using WarnSink = std::function<void(const std::string& message)>;
WarnSink set_warn_sink(WarnSink sink);
// Forgets which keys were warned about (tests).
void reset_warnings();

}  // namespace kvs
