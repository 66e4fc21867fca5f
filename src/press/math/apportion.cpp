#include "press/math/apportion.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace kvs::math {

std::vector<int64_t> apportion(std::span<const double> weights, int64_t total, std::span<const int64_t> caps) {
  const size_t n = weights.size();
  if (!caps.empty() && caps.size() != n) fail("apportion: {} caps for {} weights", caps.size(), n);
  if (total < 0) fail("apportion: total {} is negative", total);
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(weights[i]) || weights[i] < 0) fail("apportion: weight[{}] = {} (expected finite, >= 0)", i, weights[i]);
    if (!caps.empty() && caps[i] < 0) fail("apportion: cap[{}] = {} is negative", i, caps[i]);
  }
  constexpr int64_t kNoCap = std::numeric_limits<int64_t>::max();
  auto cap = [&](size_t i) { return caps.empty() ? kNoCap : caps[i]; };

  std::vector<int64_t> out(n, 0);
  std::vector<bool> open(n, false);
  size_t n_open = 0;
  for (size_t i = 0; i < n; ++i)
    if (cap(i) > 0) {
      open[i] = true;
      ++n_open;
    }
  int64_t rem = total;
  // Equal weights among the open entries when all of theirs are zero.
  auto weight = [&](size_t i, bool uniform) { return uniform ? 1.0 : weights[i]; };
  std::vector<double> ideal(n, 0.0);
  while (n_open > 0 && rem > 0) {
    double wsum = 0;
    for (size_t i = 0; i < n; ++i)
      if (open[i]) wsum += weights[i];
    const bool uniform = wsum <= 0;
    if (uniform) wsum = static_cast<double>(n_open);
    bool closed_any = false;
    for (size_t i = 0; i < n; ++i) {
      if (!open[i]) continue;
      ideal[i] = static_cast<double>(rem) * (weight(i, uniform) / wsum);
      if (ideal[i] >= static_cast<double>(cap(i))) {
        out[i] = cap(i);
        open[i] = false;
        --n_open;
        closed_any = true;
      }
    }
    if (closed_any) {
      rem = total;
      for (size_t i = 0; i < n; ++i)
        if (!open[i]) rem -= out[i];
      if (rem <= 0) {  // the caps alone used everything (only possible when total was exactly met)
        rem = 0;
        break;
      }
      continue;
    }
    // No cap binds: floor + largest remainders.
    int64_t given = 0;
    std::vector<size_t> order;
    for (size_t i = 0; i < n; ++i) {
      if (!open[i]) continue;
      const int64_t f = static_cast<int64_t>(std::floor(ideal[i]));
      out[i] = std::min<int64_t>(f, cap(i) - 1);
      given += out[i];
      order.push_back(i);
    }
    int64_t left = rem - given;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return ideal[a] - static_cast<double>(out[a]) > ideal[b] - static_cast<double>(out[b]);
    });
    // Rounding of the ideal shares can leave `left` a little off; hand units out (or take them
    // back) cyclically in remainder order, respecting caps, so the sum is exact.
    for (size_t pass = 0; left > 0 && !order.empty(); ++pass) {
      bool progress = false;
      for (size_t i : order) {
        if (left == 0) break;
        if (out[i] < cap(i)) {
          ++out[i];
          --left;
          progress = true;
        }
      }
      if (!progress) break;
    }
    for (auto it = order.rbegin(); left < 0 && it != order.rend(); ++it)
      if (out[*it] > 0) {
        --out[*it];
        ++left;
      }
    rem = 0;
    break;
  }
  return out;
}

}  // namespace kvs::math
