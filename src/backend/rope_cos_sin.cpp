#include "backend/rope_cos_sin.h"

#include <cmath>
#include <cstddef>

namespace kvs::backend {

void rope_cos_sin_host(std::span<const float> inv_freq, const int32_t* pos, int n, float* out) {
  const size_t half = inv_freq.size(), R = 2 * half;
  for (int t = 0; t < n; ++t) {
    float* cs = out + static_cast<size_t>(t) * R;
    for (size_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(pos[t]) * inv_freq[i];
      cs[2 * i] = static_cast<float>(std::cos(a));
      cs[2 * i + 1] = static_cast<float>(std::sin(a));
    }
  }
}

}  // namespace kvs::backend
