// Scalar reference: float vector ops, normalisation, softmax and its online pieces (exp_sub_sum,
// max_f32), SiLU gating, RoPE.
//
// Dimension legend: n = vector length; rope: n_heads vectors of head_dim, the first rot_dim of
// each rotating in rot_dim/2 pairs with cos_sin[2i], cos_sin[2i+1] for pair i.
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels::ref {

float dot_f32(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(a[i]) * b[i];
  return static_cast<float>(s);
}

float dot_f32_f16(const float* a, const uint16_t* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(a[i]) * fp16_to_fp32(b[i]);
  return static_cast<float>(s);
}

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * fp16_to_fp32(x[i]);
}

void scale_f32(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void f16_to_f32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  const double inv = 1.0 / std::sqrt(ss / n + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(x[i] * inv * w[i]);
}

float softmax(float* x, int64_t n) {
  KVS_ASSERT(n > 0);
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::fmax(max, x[i]);
  if (max == -std::numeric_limits<float>::infinity()) {  // everything masked
    for (int64_t i = 0; i < n; ++i) x[i] = 0;
    return max;
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(x[i]) - max);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::exp(double(x[i]) - max) / sum);
  return static_cast<float>(max + std::log(sum));
}

float exp_sub_sum(float* x, int64_t n, float sub) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(std::exp(double(x[i] - sub)));  // the difference rounded to float, as specified
    sum += x[i];
  }
  return static_cast<float>(sum);
}

float max_f32(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, x[i]);
  return m;
}

void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    gate[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void add_f32(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void rope(float* x, int n_heads, int head_dim, int rot_dim, const float* cos_sin, RopeStyle style) {
  KVS_ASSERT(rot_dim % 2 == 0 && rot_dim <= head_dim);
  const int half = rot_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const int i0 = style == RopeStyle::Interleaved ? 2 * i : i;
      const int i1 = style == RopeStyle::Interleaved ? 2 * i + 1 : i + half;
      const double c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
      const double x0 = v[i0], x1 = v[i1];
      v[i0] = static_cast<float>(x0 * c - x1 * s);
      v[i1] = static_cast<float>(x0 * s + x1 * c);
    }
  }
}

}  // namespace kvs::kernels::ref
