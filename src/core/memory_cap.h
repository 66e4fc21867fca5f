// The KV cache's memory cap (--max-kv-bytes) left no room for what was asked: a typed error, so that
// the batch scheduler can hold the request and retry it once other sequences free pages, where any
// other error fails it.
#pragma once
#include "core/error.h"

namespace kvs {

class MemoryCapError : public Error {
 public:
  using Error::Error;
};

// fail_memory_cap("KV cache memory cap reached: ...", ...) -> throws kvs::MemoryCapError
template <typename... Args>
[[noreturn]] inline void fail_memory_cap(fmt::format_string<Args...> f, Args&&... args) {
  throw MemoryCapError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kvs
