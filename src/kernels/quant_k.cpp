// K-quant weight quantisers: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K (formats: quant_blocks.h; algorithms
// and their source: quant.h). Every float expression keeps the operand order of llama.cpp's
// reference (ggml-quants.c, Feb 2025), and this file is compiled without floating-point
// contraction (src/CMakeLists.txt), so the bytes match llama-quantize's for the same input.
//
// Dimension legend: n = row length, nb = super-blocks (of QK_K = 256) in the row, s = sub-block
// (16 elements for Q2_K/Q3_K/Q6_K, 32 for Q4_K/Q5_K), i = element within a sub-block,
// L = one quant per element of the super-block.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/fp16.h"
#include "kernels/quant.h"
#include "kernels/quant_round.h"

namespace kvs::kernels {
namespace {

using detail::round_nearest;

constexpr float kAllZero = 1e-15f;  // a sub-block whose largest |x| is below this is all zero (GROUP_MAX_EPS)

// Candidate-scale grid for fit_scale_and_min: step k of `steps` tries the quantisation interval
// (nmax + first + k * delta) / (hi - lo).
struct ScaleGrid {
  float first, delta;
  int steps;
};

// Fits x[i] ~ scale * L[i] - neg_min, L[i] in [0, nmax], neg_min >= 0, minimising
// sum w[i] * err^2 (or * |err| when abs_err) -- ggml's make_qkx2_quants. Starts from the grid
// spanning [min(x, 0), max(x)], then for each candidate interval rounds, refits scale and min by
// weighted least squares (min clamped to <= 0), and keeps the best. As in ggml, a better fit
// moves the grid origin `lo` for the candidates after it. Returns scale; L holds the quants.
float fit_scale_and_min(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                        const ScaleGrid& grid, bool abs_err) {
  KVS_ASSERT(n <= 32);
  float lo = x[0], hi = x[0];
  float sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    std::fill(L, L + n, uint8_t{0});
    *neg_min = -lo;
    return 0.0f;
  }
  auto err_of = [abs_err](float e) { return abs_err ? std::fabs(e) : e * e; };
  float iscale = nmax / (hi - lo);
  float scale = 1 / iscale;
  float best_err = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::clamp(round_nearest(iscale * (x[i] - lo)), 0, nmax));
    best_err += w[i] * err_of(scale * L[i] + lo - x[i]);
  }
  uint8_t cand[32];  // [n] quants of the candidate grid
  for (int k = 0; k <= grid.steps; ++k) {
    iscale = (grid.first + grid.delta * k + nmax) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(round_nearest(iscale * (x[i] - lo)), 0, nmax);
      cand[i] = static_cast<uint8_t>(l);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) err += w[i] * err_of(this_scale * cand[i] + this_min - x[i]);
    if (err < best_err) {
      std::copy(cand, cand + n, L);
      best_err = err;
      scale = this_scale;
      lo = this_min;
    }
  }
  *neg_min = -lo;
  return scale;
}

// Value of largest magnitude (the first on ties) and its magnitude.
float signed_absmax(const float* x, int n, float* amax_out) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  *amax_out = amax;
  return max;
}

// Symmetric fit x[i] ~ scale * (L[i] - nmax), L[i] - nmax in [-nmax, nmax - 1], weights x^2:
// the grid -(nmax + 0.1 k) / max for k = -9..9, each with its least-squares scale; keeps the one
// that explains the most weighted energy (ggml's make_qx_quants, rmse_type 1). Returns scale.
float fit_symmetric_scale(int n, int nmax, const float* x, uint8_t* L) {
  float amax;
  const float max = signed_absmax(x, n, &amax);
  if (amax < kAllZero) {
    std::fill(L, L + n, uint8_t{0});
    return 0.0f;
  }
  auto sums = [&](float iscale, float* slx, float* sl2, bool store) {
    *slx = 0;
    *sl2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(round_nearest(iscale * x[i]), -nmax, nmax - 1);
      if (store) L[i] = static_cast<uint8_t>(l + nmax);
      const float w = x[i] * x[i];
      *slx += w * x[i] * l;
      *sl2 += w * l * l;
    }
  };
  float sumlx, suml2;
  sums(-nmax / max, &sumlx, &suml2, true);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    const float iscale = -(nmax + 0.1f * k) / max;
    sums(iscale, &sumlx, &suml2, false);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      sums(iscale, &sumlx, &suml2, true);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Symmetric fit for Q3_K (ggml's make_q3_quants with rmse): quants l in [-nmax, nmax - 1] from
// the grid -nmax / max, then up to 5 passes that move single quants to their least-squares value
// while the weighted fit (weights x^2) improves. L[i] = l + nmax. Returns the scale.
float fit_q3_scale(int n, int nmax, const float* x, int8_t* L) {
  float amax;
  const float max = signed_absmax(x, n, &amax);
  if (amax < kAllZero) {
    std::fill(L, L + n, int8_t{0});
    return 0.0f;
  }
  const float iscale = -nmax / max;
  float sumlx = 0, suml2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = std::clamp(round_nearest(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * l;
    suml2 += w * l * l;
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * L[i];
      if (!(slx > 0)) continue;
      float sl2 = suml2 - w * L[i] * L[i];
      const int l = std::clamp(round_nearest(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (l == L[i]) continue;
      slx += w * x[i] * l;
      sl2 += w * l * l;
      if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(l);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return sumlx / suml2;
}

// 2-bit quants L[256] into a Q2_K/Q3_K qs[64]: element 128h + 32k + l in bits 2k of qs[32h + l].
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* Lh = L + 128 * h;
      qs[32 * h + l] = static_cast<uint8_t>(Lh[l] | (Lh[l + 32] << 2) | (Lh[l + 64] << 4) | (Lh[l + 96] << 6));
    }
}

// Q4_K/Q5_K: fits the 8 sub-blocks (weights rms + |x|), stores the 6-bit scales/mins and the
// super-block d/dmin, and writes the final quants (in [0, nmax]) to L.
void fit_q45_K_superblock(const float* x, int nmax, const ScaleGrid& grid, uint16_t* d_out, uint16_t* dmin_out,
                          uint8_t* scales_out, uint8_t* L) {
  float scales[8], mins[8];  // [sub-block]
  float max_scale = 0, max_min = 0;
  for (int s = 0; s < 8; ++s) {
    const float* xs = x + 32 * s;
    float sum_x2 = 0;
    for (int i = 0; i < 32; ++i) sum_x2 += xs[i] * xs[i];
    const float av_x = std::sqrt(sum_x2 / 32);
    float w[32];
    for (int i = 0; i < 32; ++i) w[i] = av_x + std::fabs(xs[i]);
    scales[s] = fit_scale_and_min(32, nmax, xs, w, L + 32 * s, &mins[s], grid, false);
    if (scales[s] > max_scale) max_scale = scales[s];
    if (mins[s] > max_min) max_min = mins[s];
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  for (int s = 0; s < 8; ++s) {
    // As ggml: the rounded value is stored to a byte first, then capped at 63.
    const uint8_t ls = std::min<uint8_t>(63, static_cast<uint8_t>(round_nearest(inv_scale * scales[s])));
    const uint8_t lm = std::min<uint8_t>(63, static_cast<uint8_t>(round_nearest(inv_min * mins[s])));
    if (s < 4) {
      scales_out[s] = ls;
      scales_out[s + 4] = lm;
    } else {
      scales_out[s + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      scales_out[s - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      scales_out[s] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  *d_out = fp32_to_fp16(max_scale / 63.f);
  *dmin_out = fp32_to_fp16(max_min / 63.f);
  for (int s = 0; s < 8; ++s) {
    uint8_t sc, m;
    q4_K_scale_min(s, scales_out, &sc, &m);
    const float d = fp16_to_fp32(*d_out) * sc;
    if (d == 0.0f) continue;  // keeps the fit's quants (ggml does the same)
    const float dm = fp16_to_fp32(*dmin_out) * m;
    for (int i = 0; i < 32; ++i)
      L[32 * s + i] = static_cast<uint8_t>(std::clamp(round_nearest((x[32 * s + i] + dm) / d), 0, nmax));
  }
}

}  // namespace

void quantize_row_q2_K(const float* x, block_q2_K* y, int64_t n) {
  KVS_ASSERT(n % QK_K == 0);
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    block_q2_K& o = y[b];
    uint8_t L[QK_K];
    float scales[16], mins[16];  // [sub-block]
    float max_scale = 0, max_min = 0;
    for (int s = 0; s < 16; ++s) {
      float w[16];
      for (int i = 0; i < 16; ++i) w[i] = std::fabs(x[16 * s + i]);
      scales[s] = fit_scale_and_min(16, 3, x + 16 * s, w, L + 16 * s, &mins[s], {-0.5f, 0.1f, 15}, true);
      if (scales[s] > max_scale) max_scale = scales[s];
      if (mins[s] > max_min) max_min = mins[s];
    }
    // 4-bit scales (low nibble) and mins (high nibble) against the super-block maxima / 15.
    if (max_scale > 0) {
      const float iscale = 15.f / max_scale;
      for (int s = 0; s < 16; ++s) o.scales[s] = static_cast<uint8_t>(round_nearest(iscale * scales[s]));
      o.d = fp32_to_fp16(max_scale / 15.f);
    } else {
      std::fill(o.scales, o.scales + 16, uint8_t{0});
      o.d = fp32_to_fp16(0.f);
    }
    if (max_min > 0) {
      const float iscale = 15.f / max_min;
      for (int s = 0; s < 16; ++s)
        o.scales[s] |= static_cast<uint8_t>(static_cast<unsigned>(round_nearest(iscale * mins[s])) << 4);
      o.dmin = fp32_to_fp16(max_min / 15.f);
    } else {
      o.dmin = fp32_to_fp16(0.f);
    }
    for (int s = 0; s < 16; ++s) {
      const float d = fp16_to_fp32(o.d) * (o.scales[s] & 0xF);
      if (d == 0.0f) continue;
      const float dm = fp16_to_fp32(o.dmin) * (o.scales[s] >> 4);
      for (int i = 0; i < 16; ++i)
        L[16 * s + i] = static_cast<uint8_t>(std::clamp(round_nearest((x[16 * s + i] + dm) / d), 0, 3));
    }
    pack_2bit(L, o.qs);
  }
}

void quantize_row_q3_K(const float* x, block_q3_K* y, int64_t n) {
  KVS_ASSERT(n % QK_K == 0);
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    block_q3_K& o = y[b];
    int8_t L[QK_K];     // fit: quant + 4 in [0, 7]
    float scales[16];   // [sub-block], signed
    float max_scale = 0, amax = 0;
    for (int s = 0; s < 16; ++s) {
      scales[s] = fit_q3_scale(16, 4, x + 16 * s, L + 16 * s);
      if (std::fabs(scales[s]) > amax) {
        amax = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    std::memset(o.scales, 0, sizeof o.scales);
    if (max_scale != 0) {
      const float iscale = -32.f / max_scale;
      for (int s = 0; s < 16; ++s) {
        // ggml stores the rounded value to an int8_t before clamping it.
        const int l = std::clamp<int>(static_cast<int8_t>(round_nearest(iscale * scales[s])), -32, 31) + 32;
        if (s < 8)
          o.scales[s] = static_cast<uint8_t>(l & 0xF);
        else
          o.scales[s - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        o.scales[s % 4 + 8] |= static_cast<uint8_t>((l >> 4) << (2 * (s / 4)));
      }
      o.d = fp32_to_fp16(1 / iscale);
    } else {
      o.d = fp32_to_fp16(0.f);
    }
    for (int s = 0; s < 16; ++s) {
      const float d = fp16_to_fp32(o.d) * static_cast<int8_t>(q3_K_scale(s, o.scales) - 32);
      if (d == 0.0f) continue;
      for (int i = 0; i < 16; ++i)
        L[16 * s + i] = static_cast<int8_t>(std::clamp(round_nearest(x[16 * s + i] / d), -4, 3) + 4);
    }
    // Third bit of element j -> bit j / 32 of hmask[j % 32]; the low two bits -> qs.
    std::memset(o.hmask, 0, sizeof o.hmask);
    uint8_t low[QK_K];
    for (int j = 0; j < QK_K; ++j) {
      if (L[j] > 3) o.hmask[j % 32] |= static_cast<uint8_t>(1u << (j / 32));
      low[j] = static_cast<uint8_t>(L[j] > 3 ? L[j] - 4 : L[j]);
    }
    pack_2bit(low, o.qs);
  }
}

void quantize_row_q4_K(const float* x, block_q4_K* y, int64_t n) {
  KVS_ASSERT(n % QK_K == 0);
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    block_q4_K& o = y[b];
    uint8_t L[QK_K];
    std::memset(o.scales, 0, sizeof o.scales);
    fit_q45_K_superblock(x, 15, {-1.f, 0.1f, 20}, &o.d, &o.dmin, o.scales, L);
    for (int g = 0; g < 4; ++g)  // 64-element groups: sub-block 2g in the low nibbles, 2g+1 high
      for (int i = 0; i < 32; ++i) o.qs[32 * g + i] = static_cast<uint8_t>(L[64 * g + i] | (L[64 * g + 32 + i] << 4));
  }
}

void quantize_row_q5_K(const float* x, block_q5_K* y, int64_t n) {
  KVS_ASSERT(n % QK_K == 0);
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    block_q5_K& o = y[b];
    uint8_t L[QK_K];
    std::memset(o.scales, 0, sizeof o.scales);
    fit_q45_K_superblock(x, 31, {-0.5f, 0.1f, 15}, &o.d, &o.dmin, o.scales, L);
    std::memset(o.qh, 0, sizeof o.qh);
    for (int g = 0; g < 4; ++g)
      for (int i = 0; i < 32; ++i) {
        const int lo = L[64 * g + i], hi = L[64 * g + 32 + i];
        o.qs[32 * g + i] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
        o.qh[i] |= static_cast<uint8_t>(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
      }
  }
}

void quantize_row_q6_K(const float* x, block_q6_K* y, int64_t n) {
  KVS_ASSERT(n % QK_K == 0);
  for (int64_t b = 0; b < n / QK_K; ++b, x += QK_K) {
    block_q6_K& o = y[b];
    uint8_t L[QK_K];   // quant + 32 in [0, 63]
    float scales[16];  // [sub-block], signed
    float max_scale = 0, amax_scale = 0;
    for (int s = 0; s < 16; ++s) {
      scales[s] = fit_symmetric_scale(16, 32, x + 16 * s, L + 16 * s);
      if (std::fabs(scales[s]) > amax_scale) {
        amax_scale = std::fabs(scales[s]);
        max_scale = scales[s];
      }
    }
    if (amax_scale < kAllZero) {
      std::memset(&o, 0, sizeof o);
      continue;
    }
    const float iscale = -128.f / max_scale;
    o.d = fp32_to_fp16(1 / iscale);
    for (int s = 0; s < 16; ++s) o.scales[s] = static_cast<int8_t>(std::min(127, round_nearest(iscale * scales[s])));
    for (int s = 0; s < 16; ++s) {
      const float d = fp16_to_fp32(o.d) * o.scales[s];
      if (d == 0.0f) continue;
      for (int i = 0; i < 16; ++i)
        L[16 * s + i] = static_cast<uint8_t>(std::clamp(round_nearest(x[16 * s + i] / d), -32, 31) + 32);
    }
    for (int h = 0; h < 2; ++h) {  // 128-element halves
      const uint8_t* Lh = L + 128 * h;
      uint8_t* ql = o.ql + 64 * h;
      uint8_t* qh = o.qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        ql[l] = static_cast<uint8_t>((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                     ((Lh[l + 96] >> 4) << 6));
      }
    }
  }
}

}  // namespace kvs::kernels
