// AVX2 float vector ops (semantics in ops.h): axpy, scale, conversions, rmsnorm, softmax and its
// online pieces (max_f32, exp_sub_sum) with the polynomial exp of simd_avx2.h, SiLU gating,
// residual add and RoPE in both pair layouts.
//
// Dimension legend: n = vector length; rope: n_heads x head_dim, rot_dim rotating dims,
// cos_sin[2i], cos_sin[2i+1] = cos, sin of pair i.
#include <cmath>
#include <limits>

#include "kernels/cpu/impl.h"
#include "kernels/cpu/simd_avx2.h"

namespace kvs::kernels::avx2 {

void axpy_f32(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    _mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8)));
  }
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

void axpy_f16(float a, const uint16_t* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, f16x8_to_ps(x + i), _mm256_loadu_ps(y + i)));
    _mm256_storeu_ps(y + i + 8, _mm256_fmadd_ps(va, f16x8_to_ps(x + i + 8), _mm256_loadu_ps(y + i + 8)));
  }
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, f16x8_to_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * h2f(x[i]);
}

void scale_f32(float* x, float s, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), vs));
  for (; i < n; ++i) x[i] *= s;
}

void f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) y[i] = _cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT);
}

void rmsnorm(const float* x, const float* w, float* out, int64_t n, float eps) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    s0 = _mm256_fmadd_ps(a, a, s0);
    s1 = _mm256_fmadd_ps(b, b, s1);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 a = _mm256_loadu_ps(x + i);
    s0 = _mm256_fmadd_ps(a, a, s0);
  }
  float ss = hsum_ps(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) ss += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  const __m256 vinv = _mm256_set1_ps(inv);
  for (i = 0; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vinv),
                                            _mm256_loadu_ps(w + i)));
  for (; i < n; ++i) out[i] = x[i] * inv * w[i];
}

float max_f32(const float* x, int64_t n) {
  __m256 vmax = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
  float max = hmax_ps(vmax);
  for (; i < n; ++i) max = x[i] > max ? x[i] : max;
  return max;
}

float exp_sub_sum(float* x, int64_t n, float sub) {
  const __m256 vs = _mm256_set1_ps(sub);
  __m256 vsum = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
    _mm256_storeu_ps(x + i, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = hsum_ps(vsum);
  if (i < n) {  // tail through a padded vector so every element uses the same exp
    alignas(32) float t[8];
    const int64_t r = n - i;
    for (int k = 0; k < 8; ++k) t[k] = k < r ? x[i + k] - sub : -std::numeric_limits<float>::infinity();
    _mm256_store_ps(t, exp_ps(_mm256_load_ps(t)));
    for (int k = 0; k < r; ++k) {
      x[i + k] = t[k];
      sum += t[k];
    }
  }
  return sum;
}

float softmax(float* x, int64_t n) {
  const float max = max_f32(x, n);
  if (max == -std::numeric_limits<float>::infinity()) {  // everything masked
    for (int64_t i = 0; i < n; ++i) x[i] = 0;
    return max;
  }
  const float sum = exp_sub_sum(x, n, max);
  scale_f32(x, 1.0f / sum, n);
  return max + std::log(sum);
}

void silu_mul(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp_ps(_mm256_xor_ps(g, neg));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add_f32(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) y[i] += x[i];
}

void rope(float* x, int n_heads, int head_dim, int rot_dim, const float* cos_sin, RopeStyle style) {
  const int half = rot_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    int i = 0;
    if (style == RopeStyle::Interleaved) {
      // 4 pairs per vector: v = [x0 x1 ...], cs = [c s ...] -> [x0 c - x1 s, x1 c + x0 s].
      for (; i + 4 <= half; i += 4) {
        const __m256 xv = _mm256_loadu_ps(v + 2 * i), cs = _mm256_loadu_ps(cos_sin + 2 * i);
        const __m256 c = _mm256_moveldup_ps(cs), s = _mm256_movehdup_ps(cs);
        const __m256 sw = _mm256_permute_ps(xv, 0xB1);
        _mm256_storeu_ps(v + 2 * i, _mm256_fmaddsub_ps(xv, c, _mm256_mul_ps(sw, s)));
      }
      for (; i < half; ++i) {
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c - x1 * s;
        v[2 * i + 1] = x0 * s + x1 * c;
      }
    } else {
      for (; i + 8 <= half; i += 8) {
        const __m256 a = _mm256_loadu_ps(cos_sin + 2 * i), b = _mm256_loadu_ps(cos_sin + 2 * i + 8);
        // De-interleave 8 (cos, sin) pairs.
        const __m256 c = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88)), 0xD8));
        const __m256 s = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD)), 0xD8));
        const __m256 x0 = _mm256_loadu_ps(v + i), x1 = _mm256_loadu_ps(v + i + half);
        _mm256_storeu_ps(v + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
        _mm256_storeu_ps(v + i + half, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
      }
      for (; i < half; ++i) {
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * c - x1 * s;
        v[i + half] = x0 * s + x1 * c;
      }
    }
  }
}

}  // namespace kvs::kernels::avx2
