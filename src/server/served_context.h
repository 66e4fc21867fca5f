// A compressed context stored by the server (POST /v1/contexts): prefilled and compressed once,
// then every question on it runs on a copy-on-write fork of its sequence.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/compression_spec.h"
#include "runtime/context_builder.h"

namespace kvs::server {

// What clients see of a context; a plain value, safe to copy to any thread.
struct ContextInfo {
  std::string id;
  int64_t created = 0;             // unix seconds
  uint64_t seq = 0;                // creation order among contexts of this server run (ties of `created`)
  std::string format = "text";     // "text" (from `text`) or "chat" (from `messages`, last turn open)
  std::vector<std::string> roles;  // chat: the roles of its messages (how a conversation continues)
  int32_t n_tokens = 0;            // tokens of the context
  size_t kv_bytes_full = 0;        // KV bytes before compression (whole pages)
  size_t kv_bytes_held = 0;        // KV bytes held now
  double keep_measured = 1.0;      // fraction of the context's KV slots kept
  std::optional<double> keep_chosen;  // what an adaptive press chose
  nlohmann::json compression;      // the kv_compression it was made with
  bool persisted = false;          // written to the contexts directory
  bool resident = true;            // in memory (false: on disk only, loaded back when used)
  nlohmann::json to_json(const std::string& model) const;
};

// The context itself. Its sequence lives in the engine's page pool: it is created, forked and
// destroyed on the scheduler's thread only (handlers see ContextInfo copies).
struct ServedContext {
  ContextInfo info;
  SpecArgs args;                              // what the spec was built from (saved in .kvc headers)
  std::shared_ptr<const BuiltContext> built;  // the compressed sequence, its spec and tokens
};

}  // namespace kvs::server
