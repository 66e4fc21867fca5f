#include "press/math/kvzip_fold.h"

#include "kernels/cpu_features.h"

namespace kvs {

void kvzip_fold_max_generic(const float* S, int64_t lds, int nrows, int64_t n, const float* mul, const float* sub,
                            float* best) {
  for (int i = 0; i < nrows; ++i) {
    const float* row = S + static_cast<int64_t>(i) * lds;
    const float a = mul[i], b = sub[i];
    for (int64_t j = 0; j < n; ++j) {
      const float x = row[j] * a - b;
      best[j] = best[j] < x ? x : best[j];
    }
  }
}

void kvzip_fold_max(const float* S, int64_t lds, int nrows, int64_t n, const float* mul, const float* sub,
                    float* best) {
  static const bool avx2 = kernels::use_avx2();
  if (avx2)
    kvzip_fold_max_avx2(S, lds, nrows, n, mul, sub, best);
  else
    kvzip_fold_max_generic(S, lds, nrows, n, mul, sub, best);
}

}  // namespace kvs
