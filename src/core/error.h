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

// fail("{}: tensor '{}' has {} dims, expected 2", path, name, n) -> throws kvs::Error
template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kvs

// Internal invariant (programming error, not bad input). Always on, cheap checks only.
#define KVS_ASSERT(cond)                                                                  \
  do {                                                                                    \
    if (!(cond)) ::kvs::detail::assert_fail(#cond, __FILE__, __LINE__);                   \
  } while (0)

namespace kvs::detail {
[[noreturn]] void assert_fail(const char* cond, const char* file, int line);
}
