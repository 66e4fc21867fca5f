// Integer apportionment: split a token total into per-entry integer budgets proportional to real
// weights, each capped (a head or layer cannot keep more tokens than it holds), summing exactly to
// the total. Shared by D2O's layer budgets (Eq. 5) and UNComp's stepped head-group budgets (Eq. 11).
//
// Method: water-filling + largest remainder.
//   1. Among the open entries (cap > 0), the ideal share of the remaining total R is R w_i / W.
//      Every entry whose ideal share reaches its cap is fixed at the cap and closed; repeat with
//      the rest (so what a capped entry cannot take goes to the others in proportion to their
//      weights).
//   2. The open entries get floor(ideal); the leftover units go one each to the largest fractional
//      parts (ties: lower index first). floor(ideal) < cap, so +1 never breaks a cap.
// Special cases: all open weights zero -> equal weights among them; total >= sum of caps -> every
// entry at its cap (the sum is then below the total; callers that must not lose tokens check it).
// Cost O(n^2) in the worst case (one entry closed per round), n = number of entries (layers/heads).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace kvs::math {

// weights: [n], finite and >= 0. caps: [n] (>= 0) or empty for "no cap". total >= 0.
// Throws kvs::Error on negative/non-finite weights, negative caps or total, or caps.size() != n.
std::vector<int64_t> apportion(std::span<const double> weights, int64_t total, std::span<const int64_t> caps = {});

}  // namespace kvs::math
