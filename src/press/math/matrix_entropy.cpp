#include "press/math/matrix_entropy.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "press/math/sym_eigen.h"

namespace kvs::math {

GramAccumulator::GramAccumulator(int d) : d_(d) {
  if (d < 1) fail("GramAccumulator: dimension {} (expected >= 1)", d);
  reset();
}

void GramAccumulator::reset() {
  n_ = 0;
  shift_.assign(static_cast<size_t>(d_), 0.0);
  sx_.assign(static_cast<size_t>(d_), 0.0);
  sxx_.assign(static_cast<size_t>(d_) * d_, 0.0);
}

void GramAccumulator::add(std::span<const float> rows, int64_t n_rows, int64_t row_stride) {
  if (row_stride == 0) row_stride = d_;
  if (n_rows < 0) fail("GramAccumulator::add: {} rows is negative", n_rows);
  if (row_stride < d_) fail("GramAccumulator::add: row stride {} is below the dimension {}", row_stride, d_);
  if (n_rows == 0) return;
  if (static_cast<int64_t>(rows.size()) < (n_rows - 1) * row_stride + d_)
    fail("GramAccumulator::add: {} floats for {} rows of stride {} and dimension {}", rows.size(), n_rows, row_stride, d_);
  const int d = d_;
  std::vector<double> x(static_cast<size_t>(d));
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = rows.data() + r * row_stride;
    if (n_ == 0)
      for (int c = 0; c < d; ++c) shift_[c] = row[c];
    for (int c = 0; c < d; ++c) {
      x[c] = static_cast<double>(row[c]) - shift_[c];
      sx_[c] += x[c];
    }
    for (int a = 0; a < d; ++a) {
      const double xa = x[a];
      if (xa == 0.0) continue;
      double* s = sxx_.data() + static_cast<size_t>(a) * d;
      for (int b = a; b < d; ++b) s[b] += xa * x[b];
    }
    ++n_;
  }
}

std::vector<double> GramAccumulator::mean() const {
  std::vector<double> m(static_cast<size_t>(d_), 0.0);
  if (n_ == 0) return m;
  for (int c = 0; c < d_; ++c) m[c] = shift_[c] + sx_[c] / static_cast<double>(n_);
  return m;
}

std::vector<double> GramAccumulator::covariance() const {
  if (n_ < 2) fail("GramAccumulator::covariance: {} rows accumulated, need at least 2 (Eq. 1 divides by N - 1)", n_);
  const int d = d_;
  const double n = static_cast<double>(n_);
  std::vector<double> cov(static_cast<size_t>(d) * d);
  // sum (x - m)(x - m)^T = sum (y)(y)^T - sum(y) sum(y)^T / n with y = x - shift.
  for (int a = 0; a < d; ++a)
    for (int b = a; b < d; ++b) {
      const double v = (sxx_[static_cast<size_t>(a) * d + b] - sx_[a] * sx_[b] / n) / (n - 1.0);
      cov[static_cast<size_t>(a) * d + b] = v;
      cov[static_cast<size_t>(b) * d + a] = v;
    }
  return cov;
}

TruncatedEntropy truncated_entropy(std::span<const double> ev, int k, EntropyNorm norm) {
  if (k < 1) fail("truncated_entropy: k = {} (expected >= 1)", k);
  for (size_t i = 0; i < ev.size(); ++i) {
    if (!std::isfinite(ev[i])) fail("truncated_entropy: eigenvalue {} is {}", i, ev[i]);
    if (i > 0 && ev[i] > ev[i - 1]) fail("truncated_entropy: eigenvalues not in descending order at {}", i);
  }
  TruncatedEntropy out;
  if (ev.empty() || !(ev[0] > 0)) return out;
  const double floor = 1e-10 * ev[0];
  int pos = 0;  // positive eigenvalues
  while (pos < static_cast<int>(ev.size()) && ev[pos] > floor) ++pos;
  out.k_used = std::min(k, pos);
  double total = 0.0;
  const int n_sum = norm == EntropyNorm::TopK ? out.k_used : pos;
  for (int i = 0; i < n_sum; ++i) total += ev[i];
  double h = 0.0;
  for (int i = 0; i < out.k_used; ++i) {
    const double p = ev[i] / total;
    h -= p * std::log(p);
  }
  out.h = h;
  out.erank = std::exp(h);
  return out;
}

std::vector<double> unit_norm_covariance(std::span<const float> rows, int64_t n, int d, int64_t row_stride) {
  if (row_stride == 0) row_stride = d;
  if (d < 1 || n < 1 || row_stride < d) fail("unit_norm_covariance: {} rows of {} (stride {})", n, d, row_stride);
  if (static_cast<int64_t>(rows.size()) < (n - 1) * row_stride + d)
    fail("unit_norm_covariance: {} floats for {} rows of stride {}", rows.size(), n, row_stride);
  std::vector<double> mu(static_cast<size_t>(d), 0.0), z(static_cast<size_t>(d)), a(static_cast<size_t>(d) * d, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int c = 0; c < d; ++c) mu[c] += rows[static_cast<size_t>(i * row_stride + c)];
  for (double& m : mu) m /= static_cast<double>(n);
  for (int64_t i = 0; i < n; ++i) {
    double nn = 0;
    for (int c = 0; c < d; ++c) {
      z[c] = rows[static_cast<size_t>(i * row_stride + c)] - mu[c];
      nn += z[c] * z[c];
    }
    if (!(nn > 0)) continue;
    const double inv = 1.0 / std::sqrt(nn);
    for (int c = 0; c < d; ++c) z[c] *= inv;
    for (int p = 0; p < d; ++p)
      for (int q = p; q < d; ++q) a[static_cast<size_t>(p) * d + q] += z[p] * z[q];
  }
  for (int p = 0; p < d; ++p)
    for (int q = p; q < d; ++q) {
      const double v = a[static_cast<size_t>(p) * d + q] / static_cast<double>(n);
      a[static_cast<size_t>(p) * d + q] = v;
      a[static_cast<size_t>(q) * d + p] = v;
    }
  return a;
}

TruncatedEntropy truncated_entropy_of(std::span<const double> cov, int d, int k, EntropyNorm norm) {
  const SymEigen e = sym_eigen(cov, d, false);
  return truncated_entropy(e.values, k, norm);
}

}  // namespace kvs::math
