#include "press/math/sym_eigen.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace kvs::math {
namespace {

void check_input(std::span<const double> a, int n, const char* who) {
  if (n < 0) fail("{}: matrix order {} is negative", who, n);
  if (a.size() != static_cast<size_t>(n) * static_cast<size_t>(n))
    fail("{}: matrix has {} entries, expected n * n = {}", who, a.size(), static_cast<size_t>(n) * n);
  for (double x : a)
    if (!std::isfinite(x)) fail("{}: matrix holds a non-finite value ({})", who, x);
}

// Symmetric working copy built from the lower triangle.
std::vector<double> symmetric_copy(std::span<const double> a, int n) {
  std::vector<double> w(a.size());
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) {
      const double x = a[static_cast<size_t>(i) * n + j];
      w[static_cast<size_t>(i) * n + j] = x;
      w[static_cast<size_t>(j) * n + i] = x;
    }
  return w;
}

// Sorts eigenpairs by descending value and fixes each eigenvector's sign (largest-magnitude
// component positive).
void finish(SymEigen& r) {
  const int n = r.n;
  std::vector<int> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return r.values[x] > r.values[y]; });
  std::vector<double> vals(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) vals[j] = r.values[order[j]];
  r.values = std::move(vals);
  if (r.vectors.empty()) return;
  std::vector<double> vec(r.vectors.size());
  for (int j = 0; j < n; ++j) {
    const int src = order[j];
    int arg = 0;
    double best = -1.0;
    for (int i = 0; i < n; ++i) {
      const double m = std::abs(r.vectors[static_cast<size_t>(i) * n + src]);
      if (m > best) {
        best = m;
        arg = i;
      }
    }
    const double sign = r.vectors[static_cast<size_t>(arg) * n + src] < 0 ? -1.0 : 1.0;
    for (int i = 0; i < n; ++i) vec[static_cast<size_t>(i) * n + j] = sign * r.vectors[static_cast<size_t>(i) * n + src];
  }
  r.vectors = std::move(vec);
}

// Householder tridiagonalisation in place: on return d = diagonal, e[i] = T[i+1][i]; if qt is not
// null it holds Q^T (row j = column j of Q, so updates run along contiguous rows) with A = Q T Q^T.
void tridiagonalize(std::vector<double>& A, int n, std::vector<double>& d, std::vector<double>& e,
                    std::vector<double>* qt) {
  auto at = [&](int i, int j) -> double& { return A[static_cast<size_t>(i) * n + j]; };
  if (qt) {
    qt->assign(static_cast<size_t>(n) * n, 0.0);
    for (int i = 0; i < n; ++i) (*qt)[static_cast<size_t>(i) * n + i] = 1.0;
  }
  std::vector<double> v(static_cast<size_t>(n)), p(static_cast<size_t>(n)), w(static_cast<size_t>(n));
  for (int k = 0; k + 2 < n; ++k) {
    const int m = n - k - 1;  // length of the column below the diagonal
    double norm2 = 0.0;
    for (int i = 0; i < m; ++i) norm2 += at(k + 1 + i, k) * at(k + 1 + i, k);
    const double norm = std::sqrt(norm2);
    if (norm == 0.0) continue;  // column already reduced
    const double x0 = at(k + 1, k);
    const double alpha = x0 >= 0 ? -norm : norm;
    // v = x - alpha e_0, normalised; H = I - 2 v v^T maps x to alpha e_0.
    double vn2 = 0.0;
    for (int i = 0; i < m; ++i) {
      v[i] = at(k + 1 + i, k) - (i == 0 ? alpha : 0.0);
      vn2 += v[i] * v[i];
    }
    const double inv = 1.0 / std::sqrt(vn2);
    for (int i = 0; i < m; ++i) v[i] *= inv;
    // Trailing block B <- H B H = B - 2 (v w^T + w v^T), p = B v, w = p - (v^T p) v.
    double vp = 0.0;
    for (int i = 0; i < m; ++i) {
      double s = 0.0;
      const double* row = &at(k + 1 + i, k + 1);
      for (int j = 0; j < m; ++j) s += row[j] * v[j];
      p[i] = s;
      vp += v[i] * s;
    }
    for (int i = 0; i < m; ++i) p[i] -= vp * v[i];
    for (int i = 0; i < m; ++i) {
      double* row = &at(k + 1 + i, k + 1);
      const double vi = v[i], pi = p[i];
      for (int j = 0; j < m; ++j) row[j] -= 2.0 * (vi * p[j] + pi * v[j]);
    }
    at(k + 1, k) = alpha;
    at(k, k + 1) = alpha;
    for (int i = 1; i < m; ++i) {
      at(k + 1 + i, k) = 0.0;
      at(k, k + 1 + i) = 0.0;
    }
    if (qt) {  // Q <- Q H on columns k+1..n-1, i.e. rows k+1..n-1 of Q^T: w = sum_j v_j row_j
      std::fill(w.begin(), w.end(), 0.0);
      for (int j = 0; j < m; ++j) {
        const double* row = qt->data() + static_cast<size_t>(k + 1 + j) * n;
        const double vj = v[j];
        for (int r = 0; r < n; ++r) w[r] += vj * row[r];
      }
      for (int j = 0; j < m; ++j) {
        double* row = qt->data() + static_cast<size_t>(k + 1 + j) * n;
        const double vj2 = 2.0 * v[j];
        for (int r = 0; r < n; ++r) row[r] -= vj2 * w[r];
      }
    }
  }
  d.resize(static_cast<size_t>(n));
  e.assign(static_cast<size_t>(std::max(n - 1, 0)), 0.0);
  for (int i = 0; i < n; ++i) d[i] = at(i, i);
  for (int i = 0; i + 1 < n; ++i) e[i] = at(i + 1, i);
}

// Implicit symmetric QR with the Wilkinson shift on (d, e); rotations applied to the rows of zt
// (= the columns of Z, eigenvectors accumulate as rows).
void tridiagonal_qr(std::vector<double>& d, std::vector<double>& e, int n, std::vector<double>* zt) {
  const double eps = std::numeric_limits<double>::epsilon();
  const long max_steps = 60L * std::max(n, 1);
  long steps = 0;
  int hi = n - 1;
  while (hi > 0) {
    for (int i = 0; i < hi; ++i)
      if (std::abs(e[i]) <= eps * (std::abs(d[i]) + std::abs(d[i + 1]))) e[i] = 0.0;
    if (e[hi - 1] == 0.0) {
      --hi;
      continue;
    }
    int lo = hi - 1;
    while (lo > 0 && e[lo - 1] != 0.0) --lo;
    if (++steps > max_steps) fail("sym_eigen: QR iteration did not converge after {} steps (n = {})", steps, n);
    // Wilkinson shift: the eigenvalue of the trailing 2x2 block closer to d[hi].
    const double delta = 0.5 * (d[hi - 1] - d[hi]);
    const double eh = e[hi - 1];
    const double denom = delta + (delta >= 0.0 ? 1.0 : -1.0) * std::hypot(delta, eh);
    const double mu = d[hi] - eh * eh / denom;
    double x = d[lo] - mu, zz = e[lo];
    for (int k = lo; k < hi; ++k) {
      // Rotation P on (k, k+1) with [c -s; s c] [x; zz] = [r; 0].
      const double r = std::hypot(x, zz);
      const double c = r == 0.0 ? 1.0 : x / r;
      const double s = r == 0.0 ? 0.0 : -zz / r;
      if (k > lo) e[k - 1] = r;
      const double a = d[k], b = e[k], a2 = d[k + 1];
      d[k] = c * c * a - 2.0 * c * s * b + s * s * a2;
      d[k + 1] = s * s * a + 2.0 * c * s * b + c * c * a2;
      e[k] = c * s * (a - a2) + (c * c - s * s) * b;
      if (k + 1 < hi) {
        const double f = e[k + 1];
        zz = -s * f;  // the bulge at (k+2, k)
        e[k + 1] = c * f;
        x = e[k];
      }
      if (zt) {  // Z <- Z P^T: columns k, k+1 of Z = rows k, k+1 of Z^T
        double* rk = zt->data() + static_cast<size_t>(k) * n;
        double* rk1 = rk + n;
        for (int i = 0; i < n; ++i) {
          const double zk = rk[i], zk1 = rk1[i];
          rk[i] = c * zk - s * zk1;
          rk1[i] = s * zk + c * zk1;
        }
      }
    }
  }
}

}  // namespace

SymEigen sym_eigen(std::span<const double> a, int n, bool want_vectors) {
  check_input(a, n, "sym_eigen");
  SymEigen r;
  r.n = n;
  if (n == 0) return r;
  std::vector<double> A = symmetric_copy(a, n);
  std::vector<double> d, e, zt;
  tridiagonalize(A, n, d, e, want_vectors ? &zt : nullptr);
  tridiagonal_qr(d, e, n, want_vectors ? &zt : nullptr);
  r.values = std::move(d);
  if (want_vectors) {  // column j of the result = row j of Z^T
    r.vectors.resize(zt.size());
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) r.vectors[static_cast<size_t>(i) * n + j] = zt[static_cast<size_t>(j) * n + i];
  }
  finish(r);
  return r;
}

SymEigen sym_eigen_jacobi(std::span<const double> a, int n) {
  check_input(a, n, "sym_eigen_jacobi");
  SymEigen r;
  r.n = n;
  std::vector<double> A = symmetric_copy(a, n);
  auto at = [&](int i, int j) -> double& { return A[static_cast<size_t>(i) * n + j]; };
  r.vectors.assign(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i) r.vectors[static_cast<size_t>(i) * n + i] = 1.0;
  double frob2 = 0.0;
  for (double x : A) frob2 += x * x;
  const double eps = std::numeric_limits<double>::epsilon();
  for (int sweep = 0;; ++sweep) {
    double off2 = 0.0;
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) off2 += 2.0 * at(p, q) * at(p, q);
    if (off2 <= eps * eps * frob2 || off2 == 0.0) break;
    if (sweep >= 100) fail("sym_eigen_jacobi: no convergence after 100 sweeps (n = {})", n);
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        const double apq = at(p, q);
        if (apq == 0.0) continue;
        const double theta = (at(q, q) - at(p, p)) / (2.0 * apq);
        const double t = std::abs(theta) > 1e150 ? 0.5 / theta
                                                 : (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        // A <- J^T A J with J = [c s; -s c] on (p, q).
        for (int k = 0; k < n; ++k) {
          const double akp = at(k, p), akq = at(k, q);
          at(k, p) = c * akp - s * akq;
          at(k, q) = s * akp + c * akq;
        }
        for (int k = 0; k < n; ++k) {
          const double apk = at(p, k), aqk = at(q, k);
          at(p, k) = c * apk - s * aqk;
          at(q, k) = s * apk + c * aqk;
        }
        at(p, q) = 0.0;
        at(q, p) = 0.0;
        for (int k = 0; k < n; ++k) {
          double* row = r.vectors.data() + static_cast<size_t>(k) * n;
          const double vp = row[p], vq = row[q];
          row[p] = c * vp - s * vq;
          row[q] = s * vp + c * vq;
        }
      }
  }
  r.values.resize(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) r.values[i] = at(i, i);
  finish(r);
  return r;
}

}  // namespace kvs::math
