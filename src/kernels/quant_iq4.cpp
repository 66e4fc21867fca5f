// IQ4_NL and IQ4_XS weight quantisers (formats: quant_blocks.h; algorithm and source: quant.h).
// The path is the one llama-quantize takes without an importance matrix (ggml-quants.c
// quantize_iq4_nl / quantize_iq4_xs with quant_weights NULL: 7 grid steps each side), with the
// reference's operand order; compiled without floating-point contraction (src/CMakeLists.txt).
//
// Dimension legend: n = row length, s = 32-element sub-block, i = element within it.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/quant.h"
#include "kernels/quant_round.h"

namespace kvs::kernels {
namespace {

constexpr float kAllZero = 1e-15f;  // GROUP_MAX_EPS
constexpr int kGridSteps = 7;       // ntry of llama-quantize's call

// Index of the level nearest to v (the upper one on an exact tie; the end levels below/above
// the range), as ggml's best_index_int8.
int nearest_level(float v) {
  const int8_t* lv = kIQ4NLValues;
  if (v <= lv[0]) return 0;
  if (v >= lv[15]) return 15;
  int hi = 1;
  while (hi < 15 && !(v < lv[hi])) ++hi;  // lv[hi - 1] <= v < lv[hi] (hi < 15: NaN stays in bounds)
  return v - lv[hi - 1] < lv[hi] - v ? hi - 1 : hi;
}

// Best scale for one 32-element sub-block: start from d = max / 127 (the largest value on the
// largest level), refit by weighted least squares (weights x^2), then try the grids
// (k - 127) / max for k = -7..7 and keep the scale that explains the most weighted energy.
// 0 for an all-zero sub-block.
float fit_iq4_scale(const float* x) {
  float amax = 0, max = 0;
  for (int i = 0; i < 32; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < kAllZero) return 0.0f;
  const int8_t* lv = kIQ4NLValues;
  auto sums = [&](float id, float* sqx, float* sq2) {
    *sqx = 0;
    *sq2 = 0;
    for (int i = 0; i < 32; ++i) {
      const float q = lv[nearest_level(id * x[i])];
      const float w = x[i] * x[i];
      *sqx += w * q * x[i];
      *sq2 += w * q * q;
    }
  };
  float d = -max / lv[0];
  float sumqx, sumq2;
  sums(1 / d, &sumqx, &sumq2);
  d = sumqx / sumq2;
  float best = d * sumqx;
  for (int k = -kGridSteps; k <= kGridSteps; ++k) {
    sums((k + lv[0]) / max, &sumqx, &sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

// 32 level indices into 16 bytes: element i < 16 in the low nibble of qs[i], i >= 16 high.
void pack_levels(const uint8_t* L, uint8_t* qs) {
  for (int i = 0; i < 16; ++i) qs[i] = static_cast<uint8_t>(L[i] | (L[i + 16] << 4));
}

}  // namespace

void quantize_row_iq4_nl(const float* x, block_iq4_nl* y, int64_t n) {
  KVS_ASSERT(n % QK4_NL == 0);
  for (int64_t b = 0; b < n / QK4_NL; ++b, x += QK4_NL) {
    const float d = fit_iq4_scale(x);
    y[b].d = fp32_to_fp16(d);
    const float id = d != 0.0f ? 1 / d : 0.0f;  // the unrounded scale, as ggml
    uint8_t L[QK4_NL];
    for (int i = 0; i < QK4_NL; ++i) L[i] = static_cast<uint8_t>(nearest_level(id * x[i]));
    pack_levels(L, y[b].qs);
  }
}

void quantize_row_iq4_xs(const float* x, block_iq4_xs* y, int64_t n) {
  KVS_ASSERT(n % QK_K == 0);
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    block_iq4_xs& o = y[b];
    float scales[8];  // [sub-block]
    float max_scale = 0, amax_scale = 0;
    for (int s = 0; s < 8; ++s) {
      scales[s] = fit_iq4_scale(x + 32 * s);
      if (std::fabs(scales[s]) > amax_scale) {
        amax_scale = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    // 6-bit sub-block scales l - 32 against d = -max_scale / 32 (an all-zero super-block stores
    // d = -0.0, as ggml does).
    const float d = -max_scale / 32;
    o.d = fp32_to_fp16(d);
    o.scales_h = 0;
    std::memset(o.scales_l, 0, sizeof o.scales_l);
    const float id = d != 0.0f ? 1 / d : 0.f;
    for (int s = 0; s < 8; ++s) {
      const int l = std::clamp(detail::round_nearest(id * scales[s]), -32, 31);
      const float dl = d * l;
      const float idl = dl != 0.0f ? 1 / dl : 0.f;
      uint8_t L[32];
      for (int i = 0; i < 32; ++i) L[i] = static_cast<uint8_t>(nearest_level(idl * x[32 * s + i]));
      pack_levels(L, o.qs + 16 * s);
      const int u = l + 32;
      o.scales_l[s / 2] |= static_cast<uint8_t>((u & 0xF) << (4 * (s % 2)));
      o.scales_h = static_cast<uint16_t>(o.scales_h | ((u >> 4) << (2 * s)));
    }
  }
}

}  // namespace kvs::kernels
