// Default budgets of the context stores: what `kvshrink serve` uses for every --contexts-* budget
// left at 0, derived from the KV cap and the machine, so that no store grows without bound by
// default (docs/server.md, "Context budgets").
#pragma once
#include <cstddef>
#include <string>

#include "server/context_store.h"

namespace kvs::server {

// Contexts stored at most when --contexts-max is not given.
inline constexpr size_t kDefaultMaxContexts = 10000;

// `given` with its zero budgets filled:
//   resident_bytes: the KV cap (stored contexts live in the capped page pool, and live requests
//                   push them out of it); without a cap, a quarter of the machine's memory
//                   (physical, or the cgroup's limit if lower);
//   disk_bytes:     a directory store only: what its .kvc files take now plus half of the free
//                   space of its file system;
//   max_contexts:   kDefaultMaxContexts (a directory store: at least the files it holds now).
// The TTL has no default (0: contexts are deleted by the budgets only).
StorePolicy default_store_policy(StorePolicy given, size_t kv_cap, const std::string& contexts_dir);

// Memory the machine lets this process use: physical memory, or the cgroup's limit if lower.
size_t machine_memory_bytes();

// One line stating the budgets in force, for the start-up message.
std::string describe_store_policy(const StorePolicy& p);

}  // namespace kvs::server
