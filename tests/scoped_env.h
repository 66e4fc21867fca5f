// Sets (or unsets) an environment variable for a scope and restores the caller's value after it,
// also when an assertion leaves the test early.
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

namespace kvs::test {

class ScopedEnv {
 public:
  // value nullptr: unset for the scope.
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      ::setenv(name_.c_str(), old_->c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

}  // namespace kvs::test
