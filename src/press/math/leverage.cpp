#include "press/math/leverage.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "press/math/sym_eigen.h"

namespace kvs::math {
namespace {

void check_keys(std::span<const float> keys, int64_t n, int d, int64_t row_stride, const char* who) {
  if (n < 0) fail("{}: n = {} tokens is negative", who, n);
  if (d < 1) fail("{}: head dim {} (expected >= 1)", who, d);
  if (row_stride < d) fail("{}: row stride {} is below the head dim {}", who, row_stride, d);
  if (n > 0 && static_cast<int64_t>(keys.size()) < (n - 1) * row_stride + d)
    fail("{}: keys hold {} floats, need (n - 1) * row_stride + d = {}", who, keys.size(), (n - 1) * row_stride + d);
}

// Mean row in double ([d]; zeros when !center or n == 0).
std::vector<double> mean_row(std::span<const float> keys, int64_t n, int d, int64_t stride, bool center) {
  std::vector<double> mu(static_cast<size_t>(d), 0.0);
  if (!center || n == 0) return mu;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = keys.data() + i * stride;
    for (int c = 0; c < d; ++c) mu[c] += row[c];
  }
  for (double& m : mu) m /= static_cast<double>(n);
  return mu;
}

// Adds x x^T to the upper triangle of g ([m][m], double).
inline void add_outer_upper(std::vector<double>& g, const double* x, int m) {
  for (int a = 0; a < m; ++a) {
    const double xa = x[a];
    if (xa == 0.0) continue;
    double* row = g.data() + static_cast<size_t>(a) * m;
    for (int b = a; b < m; ++b) row[b] += xa * x[b];
  }
}

void mirror_upper(std::vector<double>& g, int m) {
  for (int a = 0; a < m; ++a)
    for (int b = a + 1; b < m; ++b) g[static_cast<size_t>(b) * m + a] = g[static_cast<size_t>(a) * m + b];
}

// W = V_r diag(1 / sqrt(λ_j)) for the kept directions, [m][r] row-major (double).
std::vector<double> whitening(const SymEigen& e, const std::vector<double>& lambda, int r) {
  const int m = e.n;
  std::vector<double> w(static_cast<size_t>(m) * r);
  for (int j = 0; j < r; ++j) {
    const double s = 1.0 / std::sqrt(lambda[j]);
    for (int a = 0; a < m; ++a) w[static_cast<size_t>(a) * r + j] = e.vectors[static_cast<size_t>(a) * m + j] * s;
  }
  return w;
}

// ||x W||^2 with x [m], W [m][r].
inline double whitened_norm2(const double* x, const std::vector<double>& w, int m, int r, std::vector<double>& y) {
  std::fill(y.begin(), y.begin() + r, 0.0);
  for (int a = 0; a < m; ++a) {
    const double xa = x[a];
    if (xa == 0.0) continue;
    const double* wr = w.data() + static_cast<size_t>(a) * r;
    for (int j = 0; j < r; ++j) y[j] += xa * wr[j];
  }
  double s = 0.0;
  for (int j = 0; j < r; ++j) s += y[j] * y[j];
  return s;
}

}  // namespace

ExactLeverage exact_leverage(std::span<const float> keys, int64_t n, int d, int64_t row_stride,
                             const ExactLeverageOptions& opt) {
  check_keys(keys, n, d, row_stride, "exact_leverage");
  if (!(opt.rank_tol >= 0)) fail("exact_leverage: rank_tol {} (expected >= 0)", opt.rank_tol);
  ExactLeverage out;
  out.scores.assign(static_cast<size_t>(n), 0.0);
  if (n == 0) return out;
  const std::vector<double> mu = mean_row(keys, n, d, row_stride, opt.center);
  std::vector<double> g(static_cast<size_t>(d) * d, 0.0), x(static_cast<size_t>(d));
  auto centred = [&](int64_t i) {
    const float* row = keys.data() + i * row_stride;
    for (int c = 0; c < d; ++c) x[c] = static_cast<double>(row[c]) - mu[c];
  };
  double energy = 0.0;  // sum of squared uncentred norms: the scale rounding noise is measured against
  for (int64_t i = 0; i < n; ++i) {
    centred(i);
    add_outer_upper(g, x.data(), d);
    const float* row = keys.data() + i * row_stride;
    for (int c = 0; c < d; ++c) energy += static_cast<double>(row[c]) * row[c];
  }
  mirror_upper(g, d);
  const SymEigen e = sym_eigen(g, d, true);
  const double lmax = e.values.empty() ? 0.0 : e.values[0];
  // Keys constant up to float rounding: centring leaves only noise, which whitening would blow up.
  if (!(lmax > opt.rank_tol * opt.rank_tol * energy)) return out;
  const double floor = opt.rank_tol * opt.rank_tol * lmax;
  int r = 0;
  while (r < d && e.values[r] > floor) ++r;
  out.rank = r;
  const std::vector<double> w = whitening(e, e.values, r);
  std::vector<double> y(static_cast<size_t>(r));
  for (int64_t i = 0; i < n; ++i) {
    centred(i);
    out.scores[static_cast<size_t>(i)] = whitened_norm2(x.data(), w, d, r, y);
  }
  return out;
}

std::vector<float> gaussian_sketch(int d, int k, uint64_t seed) {
  if (d < 1 || k < 1) fail("gaussian_sketch: d = {}, k = {} (expected >= 1)", d, k);
  NormalRng g(seed);
  const double sd = 1.0 / std::sqrt(static_cast<double>(k));
  std::vector<float> phi(static_cast<size_t>(d) * k);
  for (float& p : phi) p = static_cast<float>(g.next() * sd);
  return phi;
}

std::vector<float> approx_leverage(std::span<const float> keys, int64_t n, int d, int64_t row_stride,
                                   std::span<const float> sketch, int k, bool center, double clamp_rel,
                                   double ridge) {
  check_keys(keys, n, d, row_stride, "approx_leverage");
  if (k < 1) fail("approx_leverage: sketch dimension {} (expected >= 1)", k);
  if (sketch.size() != static_cast<size_t>(d) * k)
    fail("approx_leverage: sketch holds {} floats, expected d * k = {} x {}", sketch.size(), d, k);
  if (!(clamp_rel > 0)) fail("approx_leverage: clamp_rel {} (expected > 0)", clamp_rel);
  if (!(ridge >= 0) || !std::isfinite(ridge)) fail("approx_leverage: ridge {} (expected finite, >= 0)", ridge);
  std::vector<float> out(static_cast<size_t>(n), 0.0f);
  if (n == 0) return out;
  // mu Φ: the sketch of the mean, subtracted from every sketched row (centring commutes with Φ).
  const std::vector<double> mu = mean_row(keys, n, d, row_stride, center);
  std::vector<double> mu_phi(static_cast<size_t>(k), 0.0);
  for (int c = 0; c < d; ++c)
    for (int j = 0; j < k; ++j) mu_phi[j] += mu[c] * sketch[static_cast<size_t>(c) * k + j];
  // K̂ = K Φ: [n][k] (sgemm reads the keys through their row stride), then centred in place.
  std::vector<float> kh(static_cast<size_t>(n) * k);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), k, d, 1.0f, keys.data(),
              static_cast<int>(row_stride), sketch.data(), k, 0.0f, kh.data(), k);
  // G = K̂^T K̂ in double (the small eigenvalues matter once whitened).
  std::vector<double> g(static_cast<size_t>(k) * k, 0.0), x(static_cast<size_t>(k));
  double energy = 0.0;  // sum of squared uncentred sketched norms
  for (int64_t i = 0; i < n; ++i) {
    float* y = kh.data() + i * k;
    for (int j = 0; j < k; ++j) {
      energy += static_cast<double>(y[j]) * y[j];
      x[j] = static_cast<double>(y[j]) - mu_phi[j];
      y[j] = static_cast<float>(x[j]);
    }
    add_outer_upper(g, x.data(), k);
  }
  mirror_upper(g, k);
  const SymEigen e = sym_eigen(g, k, true);
  const double lmax = e.values[0];
  // Keys constant up to float rounding (centred energy below 1e-10 of the total, i.e. variation
  // below ~1e-5 of the key scale): nothing but rounding noise left to whiten; all scores 0.
  if (!(lmax > 1e-10 * energy)) return out;
  std::vector<double> lambda = e.values;
  for (double& l : lambda) l = ridge > 0 ? std::max(l, 0.0) + ridge : std::max(l, clamp_rel * lmax);
  const std::vector<double> wd = whitening(e, lambda, k);
  const std::vector<float> w(wd.begin(), wd.end());  // [k][k]
  // Ũ = K̂ W in blocks of rows; l̃_i = ||Ũ_i||^2. Float is enough here: a clamped direction's
  // rounding error, squared and whitened, is ~1e-8 of an average score.
  constexpr int64_t kBlock = 1024;
  std::vector<float> u(static_cast<size_t>(std::min<int64_t>(n, kBlock)) * k);
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t nb = std::min<int64_t>(kBlock, n - i0);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(nb), k, k, 1.0f, kh.data() + i0 * k, k,
                w.data(), k, 0.0f, u.data(), k);
    for (int64_t i = 0; i < nb; ++i) {
      const float* ui = u.data() + i * k;
      double sum = 0.0;
      for (int j = 0; j < k; ++j) sum += static_cast<double>(ui[j]) * ui[j];
      out[static_cast<size_t>(i0 + i)] = static_cast<float>(sum);
    }
  }
  return out;
}

std::vector<float> approx_leverage(std::span<const float> keys, int64_t n, int d, int64_t row_stride,
                                   const ApproxLeverageOptions& opt) {
  const std::vector<float> phi = gaussian_sketch(d, opt.sketch_dim, opt.seed);
  return approx_leverage(keys, n, d, row_stride, phi, opt.sketch_dim, opt.center, opt.clamp_rel);
}

}  // namespace kvs::math
