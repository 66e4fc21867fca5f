// The order presses rank scores in: a strict total order even when a score is NaN, so that
// std::sort / nth_element (undefined for NaN under `<`, which is no strict weak ordering) always
// give a defined result. NaN ranks as -inf, below every number; equal ranks break by index.
#pragma once
#include <cmath>
#include <limits>

namespace kvs {

inline float score_rank(float s) { return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s; }

// True when score a (at index ia) ranks strictly above score b (at ib); ties toward the higher
// index (the more recent slot).
template <typename I>
inline bool ranks_above(float a, I ia, float b, I ib) {
  const float x = score_rank(a), y = score_rank(b);
  return x > y || (x == y && ia > ib);
}

}  // namespace kvs
