// The memory budget for request bodies (ConnectionLimits::max_body_buffer_bytes): what every JSON
// request in flight may cost, counted as that cost, not only as the raw bytes. A body of B bytes
// is held as a string of B bytes (reserved once from Content-Length, so no doubling), parsed by
// nlohmann::json, whose lexer collects each string literal in a buffer that grows by doubling (up
// to 2B), into a DOM that copies the strings (B) and adds a node per value, then read into the
// request's own fields (another copy of the prompt or messages, up to B): at most 4B plus the
// nodes. cost_of() charges that; a request whose cost does not fit is refused with 503
// server_busy before its body is read (Content-Length) or as soon as it passes the budget
// (chunked), so concurrent refused requests cannot push memory past the budget.
#pragma once
#include <atomic>
#include <cstddef>

namespace kvs::server {

class BodyBudget {
 public:
  explicit BodyBudget(size_t limit) : limit_(limit) {}

  // The most a JSON request with a body of `body_bytes` holds while it is parsed and handled
  // (a body may hold at most `max_values` JSON values: parse_body refuses more).
  static size_t cost_of(size_t body_bytes, size_t max_values);

  // Takes `bytes` more from the budget; false (nothing taken) when they do not fit.
  bool try_take(size_t bytes);
  void give_back(size_t bytes) { held_ -= bytes; }
  size_t held() const { return held_.load(); }
  size_t limit() const { return limit_; }

 private:
  const size_t limit_;
  std::atomic<size_t> held_{0};
};

}  // namespace kvs::server
