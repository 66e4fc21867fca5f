// Portable float vector ops (semantics in ops.h). Reductions use 8 independent float partial
// sums so that the loops vectorise without -ffast-math; exp is std::exp.
//
// Dimension legend: n = vector length; rope as in ops.h.
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/cpu/generic_fp16.h"
#include "kernels/cpu/impl.h"

namespace kvs::kernels::generic {
namespace {
inline float hsum8(const float* acc) {
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}
}  // namespace

float dot_f32_f16(const float* a, const uint16_t* b, int64_t n) {
  // Widen a chunk into a stack buffer first: both loops vectorise, the fused one does not.
  constexpr int64_t kChunk = 256;
  float buf[kChunk];
  float acc[8] = {};
  int64_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    for (int64_t j = 0; j < kChunk; ++j) buf[j] = h2f_vec(b[i + j]);
    for (int64_t j = 0; j < kChunk; j += 8)
      for (int k = 0; k < 8; ++k) acc[k] += a[i + j + k] * buf[j + k];
  }
  float s = hsum8(acc);
  for (; i < n; ++i) s += a[i] * fp16_to_fp32(b[i]);
  return s;
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * h2f_vec(x[i]);
}

void scale_f32(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += x[i + k] * x[i + k];
  float ss = hsum8(acc);
  for (; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

float softmax(float* x, int64_t n) {
  KVS_ASSERT(n > 0);
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = x[i] > max ? x[i] : max;
  if (max == -std::numeric_limits<float>::infinity()) {  // everything masked
    for (int64_t i = 0; i < n; ++i) x[i] = 0;
    return max;
  }
  double sum = 0;  // sequential float sums of thousands of terms lose ~1e-5 relative
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
  return max + static_cast<float>(std::log(sum));
}

float exp_sub_sum(float* x, int64_t n, float sub) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - sub);
    s += x[i];
  }
  return s;
}

float max_f32(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

int64_t argmax_f32(const float* x, int64_t n) {
  int64_t best = -1;
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isnan(x[i]) && (best < 0 || x[i] > m)) {
      best = i;
      m = x[i];
    }
  return best < 0 ? 0 : best;
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add_f32(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void rope(float* x, int n_heads, int head_dim, int rot_dim, const float* cos_sin, RopeStyle style) {
  KVS_ASSERT(rot_dim % 2 == 0 && rot_dim <= head_dim);
  const int half = rot_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    if (style == RopeStyle::Interleaved) {
      for (int i = 0; i < half; ++i) {
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c - x1 * s;
        v[2 * i + 1] = x0 * s + x1 * c;
      }
    } else {
      for (int i = 0; i < half; ++i) {
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * c - x1 * s;
        v[i + half] = x0 * s + x1 * c;
      }
    }
  }
}

}  // namespace kvs::kernels::generic
