#include "server/body_budget.h"

#include <algorithm>

namespace kvs::server {

size_t BodyBudget::cost_of(size_t body_bytes, size_t max_values) {
  // 4x the body (itself, the lexer's buffer at up to 2x, the DOM's copy, the request's copy),
  // and a DOM node per value: a value takes at least one byte of the body; 128 bytes covers a
  // json value (16), its slot in a doubling vector or a map node with its key (up to ~96).
  constexpr size_t kPerValue = 128;
  return 4 * body_bytes + kPerValue * std::min(body_bytes, max_values);
}

bool BodyBudget::try_take(size_t bytes) {
  size_t cur = held_.load();
  do {
    if (cur + bytes > limit_ || cur + bytes < cur) return false;
  } while (!held_.compare_exchange_weak(cur, cur + bytes));
  return true;
}

}  // namespace kvs::server
