#include "press/math/d2o_math.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/ops.h"
#include "press/math/apportion.h"

namespace kvs::math {

double d2o_column_sum_variance(std::span<const float> col_sums, bool unbiased) {
  const size_t n = col_sums.size();
  if (n == 0 || (unbiased && n < 2)) return 0.0;
  double m = 0.0;
  for (float x : col_sums) m += x;
  m /= static_cast<double>(n);
  double v = 0.0;
  for (float x : col_sums) v += (x - m) * (x - m);
  return v / static_cast<double>(unbiased ? n - 1 : n);
}

std::vector<double> d2o_layer_density(std::span<const double> head_var, int n_layers, int n_heads, D2oDensity mode) {
  if (n_layers < 0 || n_heads < 1) fail("d2o_layer_density: {} layers x {} heads", n_layers, n_heads);
  if (head_var.size() != static_cast<size_t>(n_layers) * n_heads)
    fail("d2o_layer_density: {} variances for {} layers x {} heads", head_var.size(), n_layers, n_heads);
  std::vector<double> F(static_cast<size_t>(n_layers), 0.0);
  for (int l = 0; l < n_layers; ++l) {
    const double* v = head_var.data() + static_cast<size_t>(l) * n_heads;
    for (int h = 0; h < n_heads; ++h)
      if (!std::isfinite(v[h]) || v[h] < 0) fail("d2o_layer_density: variance of layer {} head {} is {}", l, h, v[h]);
    double lo = v[0], hi = v[0];
    for (int h = 1; h < n_heads; ++h) {
      lo = std::min(lo, v[h]);
      hi = std::max(hi, v[h]);
    }
    double s = 0.0;
    for (int h = 0; h < n_heads; ++h) s += mode == D2oDensity::Paper ? v[h] : (v[h] - lo) / (hi - lo + 1e-6);  // official eps
    F[l] = s / n_heads;
  }
  return F;
}

std::vector<double> d2o_alpha(std::span<const double> F, double rho) {
  if (!(rho > 0 && rho <= 1)) fail("d2o_alpha: compression ratio rho = {} (expected in (0, 1])", rho);
  const size_t L = F.size();
  std::vector<double> a(L);
  if (L == 0) return a;
  double fmin = F[0];
  for (size_t l = 0; l < L; ++l) {
    if (!std::isfinite(F[l])) fail("d2o_alpha: F[{}] = {} is not finite", l, F[l]);
    fmin = std::min(fmin, F[l]);
  }
  double z = 0.0;
  for (size_t l = 0; l < L; ++l) z += (a[l] = std::exp(-(F[l] - fmin)));  // softmax(-F), shifted
  for (double& x : a) x = x / z * static_cast<double>(L) * rho;
  return a;
}

std::vector<int64_t> d2o_layer_budgets(std::span<const double> F, double rho, int64_t S, std::span<const int64_t> caps) {
  if (S < 0) fail("d2o_layer_budgets: cache size S = {} is negative", S);
  const std::vector<double> a = d2o_alpha(F, rho);
  if (!caps.empty() && caps.size() != F.size()) fail("d2o_layer_budgets: {} caps for {} layers", caps.size(), F.size());
  std::vector<int64_t> cap(F.size(), S);
  if (!caps.empty()) cap.assign(caps.begin(), caps.end());
  const int64_t total = std::llround(static_cast<double>(F.size()) * rho * static_cast<double>(S));
  return apportion(a, total, cap);
}

D2oNearest d2o_nearest(std::span<const float> kept, int64_t n_kept, std::span<const float> evicted,
                       int64_t n_evicted, int d) {
  if (d < 1 || n_kept < 0 || n_evicted < 0) fail("d2o_nearest: d = {}, {} kept, {} evicted", d, n_kept, n_evicted);
  if (kept.size() != static_cast<size_t>(n_kept) * d || evicted.size() != static_cast<size_t>(n_evicted) * d)
    fail("d2o_nearest: {} kept floats for {} x {}, {} evicted floats for {} x {}", kept.size(), n_kept, d,
         evicted.size(), n_evicted, d);
  if (n_evicted > 0 && n_kept == 0) fail("d2o_nearest: {} evicted pairs but no kept pair to match", n_evicted);
  D2oNearest out;
  out.index.assign(static_cast<size_t>(n_evicted), 0);
  out.sim.assign(static_cast<size_t>(n_evicted), 0.0f);
  if (n_evicted == 0) return out;
  auto normalise = [d](const float* src, float* dst) {
    double s = 0.0;
    for (int c = 0; c < d; ++c) s += static_cast<double>(src[c]) * src[c];
    const float inv = s > 0 ? static_cast<float>(1.0 / std::sqrt(s)) : 0.0f;
    for (int c = 0; c < d; ++c) dst[c] = src[c] * inv;
  };
  std::vector<float> kn(static_cast<size_t>(n_kept) * d);  // unit kept keys
  for (int64_t j = 0; j < n_kept; ++j) normalise(kept.data() + j * d, kn.data() + j * d);
  // U = Ê K̂^T block by block (sgemm), row maxima on the fly: O(kRows * kCols) scratch.
  constexpr int64_t kRows = 64, kCols = 1024;
  std::vector<float> en(static_cast<size_t>(kRows) * d);  // unit evicted keys of the block
  std::vector<float> u(static_cast<size_t>(kRows) * kCols);
  for (int64_t i0 = 0; i0 < n_evicted; i0 += kRows) {
    const int64_t nr = std::min(kRows, n_evicted - i0);
    for (int64_t r = 0; r < nr; ++r) normalise(evicted.data() + (i0 + r) * d, en.data() + r * d);
    float* best = out.sim.data() + i0;
    int32_t* arg = out.index.data() + i0;
    std::fill(best, best + nr, -INFINITY);
    for (int64_t j0 = 0; j0 < n_kept; j0 += kCols) {
      const int64_t nc = std::min(kCols, n_kept - j0);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(nr), static_cast<int>(nc), d, 1.0f,
                  en.data(), d, kn.data() + j0 * d, d, 0.0f, u.data(), static_cast<int>(nc));
      for (int64_t r = 0; r < nr; ++r) {
        const float* row = u.data() + r * nc;
        for (int64_t c = 0; c < nc; ++c)
          if (row[c] > best[r]) {  // strict: ties keep the lowest index
            best[r] = row[c];
            arg[r] = static_cast<int32_t>(j0 + c);
          }
      }
    }
  }
  return out;
}

D2oThreshold::D2oThreshold(double beta) : beta_(beta) {
  if (!(beta >= 0 && beta <= 1)) fail("D2oThreshold: beta = {} (expected in [0, 1])", beta);
}

D2oThreshold::D2oThreshold(double beta, double tau) : D2oThreshold(beta) {
  if (!std::isfinite(tau)) fail("D2oThreshold: resumed threshold {} is not finite", tau);
  tau_ = tau;
  init_ = true;
}

double D2oThreshold::update(std::span<const float> max_sims) {
  if (max_sims.empty()) return tau_;
  double m = 0.0;
  for (float s : max_sims) {
    if (!std::isfinite(s)) fail("D2oThreshold::update: similarity {} is not finite", s);
    m += s;
  }
  m /= static_cast<double>(max_sims.size());
  tau_ = init_ ? beta_ * m + (1.0 - beta_) * tau_ : m;
  init_ = true;
  return tau_;
}

D2oMergeWeights d2o_merge_weights(std::span<const int32_t> nearest, std::span<const float> sim, int64_t n_kept,
                                  double threshold, D2oMerge mode, std::span<const float> kept_mass,
                                  std::span<const float> evicted_mass) {
  if (nearest.size() != sim.size()) fail("d2o_merge_weights: {} nearest indices for {} similarities", nearest.size(), sim.size());
  if (std::isnan(threshold)) fail("d2o_merge_weights: threshold is NaN (no prefill threshold yet?)");
  if (!kept_mass.empty() && kept_mass.size() != static_cast<size_t>(n_kept))
    fail("d2o_merge_weights: {} kept masses for {} kept pairs", kept_mass.size(), n_kept);
  if (!evicted_mass.empty() && evicted_mass.size() != nearest.size())
    fail("d2o_merge_weights: {} evicted masses for {} evicted pairs", evicted_mass.size(), nearest.size());
  if (mode != D2oMerge::PaperEq12 && (!kept_mass.empty() || !evicted_mass.empty()))
    fail("d2o_merge_weights: masses weigh Eq. 12 only, not the official scatter-mean");
  for (float m : kept_mass)
    if (!(m >= 1.0f) || !std::isfinite(m)) fail("d2o_merge_weights: kept mass {} (expected finite, >= 1)", m);
  for (float m : evicted_mass)
    if (!(m >= 1.0f) || !std::isfinite(m)) fail("d2o_merge_weights: evicted mass {} (expected finite, >= 1)", m);
  auto km = [&](int64_t j) { return kept_mass.empty() ? 1.0 : static_cast<double>(kept_mass[static_cast<size_t>(j)]); };
  auto em = [&](size_t i) { return evicted_mass.empty() ? 1.0 : static_cast<double>(evicted_mass[i]); };
  D2oMergeWeights w;
  w.kept.assign(static_cast<size_t>(n_kept), 1.0);
  w.evicted.assign(nearest.size(), 0.0);
  std::vector<double> mass(static_cast<size_t>(n_kept), 0.0);  // S_j (paper) or c_j (official)
  for (size_t i = 0; i < nearest.size(); ++i) {
    const int32_t j = nearest[i];
    if (j < 0 || j >= n_kept) fail("d2o_merge_weights: evicted pair {} points at kept pair {} (have {})", i, j, n_kept);
    if (!(sim[i] >= threshold)) continue;
    ++w.merged;
    mass[j] += mode == D2oMerge::PaperEq12 ? em(i) * std::exp(static_cast<double>(sim[i])) : 1.0;
  }
  const double e = std::exp(1.0);  // exp(self-similarity 1)
  for (int64_t j = 0; j < n_kept; ++j) {
    if (mass[j] == 0.0) continue;
    w.kept[j] = mode == D2oMerge::PaperEq12 ? km(j) * e / (mass[j] + km(j) * e) : 1.0 / (1.0 + mass[j]);
  }
  for (size_t i = 0; i < nearest.size(); ++i) {
    if (!(sim[i] >= threshold)) continue;
    const int32_t j = nearest[i];
    const double u = sim[i];
    w.evicted[i] = mode == D2oMerge::PaperEq12 ? em(i) * std::exp(u) / (mass[j] + km(j) * e) : u / (1.0 + mass[j]);
  }
  return w;
}

int64_t d2o_merge(std::span<float> kept_k, std::span<float> kept_v, int64_t n_kept, int dk, int dv,
                  std::span<const float> evicted_k, std::span<const float> evicted_v,
                  std::span<const int32_t> nearest, std::span<const float> sim, double threshold, D2oMerge mode,
                  std::span<const float> kept_mass, std::span<const float> evicted_mass) {
  const size_t ne = nearest.size();
  if (dk < 1 || dv < 1 || n_kept < 0) fail("d2o_merge: dk = {}, dv = {}, {} kept", dk, dv, n_kept);
  if (kept_k.size() != static_cast<size_t>(n_kept) * dk || kept_v.size() != static_cast<size_t>(n_kept) * dv)
    fail("d2o_merge: kept K/V hold {}/{} floats for {} pairs of dims {}/{}", kept_k.size(), kept_v.size(), n_kept, dk, dv);
  if (evicted_k.size() != ne * dk || evicted_v.size() != ne * dv)
    fail("d2o_merge: evicted K/V hold {}/{} floats for {} pairs of dims {}/{}", evicted_k.size(), evicted_v.size(), ne, dk, dv);
  const D2oMergeWeights w = d2o_merge_weights(nearest, sim, n_kept, threshold, mode, kept_mass, evicted_mass);
  if (w.merged == 0) return 0;
  for (int64_t j = 0; j < n_kept; ++j)
    if (w.kept[j] != 1.0) {
      kernels::scale_f32(kept_k.data() + j * dk, static_cast<float>(w.kept[j]), dk);
      kernels::scale_f32(kept_v.data() + j * dv, static_cast<float>(w.kept[j]), dv);
    }
  for (size_t i = 0; i < ne; ++i) {
    if (!(sim[i] >= threshold)) continue;  // dropped
    const int64_t j = nearest[i];
    const float a = static_cast<float>(w.evicted[i]);
    kernels::axpy_f32(a, evicted_k.data() + i * dk, kept_k.data() + j * dk, dk);
    kernels::axpy_f32(a, evicted_v.data() + i * dv, kept_v.data() + j * dv, dv);
  }
  return w.merged;
}

}  // namespace kvs::math
