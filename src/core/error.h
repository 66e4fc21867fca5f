// Error type for load/config/input errors. Thrown by loaders and parsers, caught at the API boundary
// (CLI main, server handler) and printed. The message always names what was wrong: the file, the
// field or tensor, and what was expected.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kvs {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The KV cache's memory cap (--max-kv-bytes) left no room for what was asked: the request can wait
// and be retried once other sequences free pages, where other errors fail it.
class MemoryCapError : public Error {
 public:
  using Error::Error;
};

// fail("{}: tensor '{}' has {} dims, expected 2", path, name, n) -> throws kvs::Error
template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// fail_memory_cap("KV cache memory cap reached: ...", ...) -> throws kvs::MemoryCapError
template <typename... Args>
[[noreturn]] inline void fail_memory_cap(fmt::format_string<Args...> f, Args&&... args) {
  throw MemoryCapError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kvs

// Internal invariant (programming error, not bad input). Always on, cheap checks only. The file's
// name without its directory (__FILE_NAME__, GCC 12 / clang 9): no checkout path in a binary.
#ifdef __FILE_NAME__
#define KVS_ASSERT_FILE __FILE_NAME__
#else
#define KVS_ASSERT_FILE __FILE__
#endif
#define KVS_ASSERT(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) ::kvs::detail::assert_fail(#cond, KVS_ASSERT_FILE, __LINE__);            \
  } while (0)

namespace kvs::detail {
[[noreturn]] void assert_fail(const char* cond, const char* file, int line);
}
