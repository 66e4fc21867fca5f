// sym_eigen (Householder + implicit QR) and sym_eigen_jacobi (the oracle): known spectra,
// reconstruction A = V diag(w) V^T, orthonormality, degenerate and zero matrices, bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "press/math/sym_eigen.h"

namespace kvs::math {
namespace {

// A random orthogonal matrix (Gram-Schmidt on Gaussian columns, twice for accuracy), [n][n].
std::vector<double> random_orthogonal(int n, uint64_t seed) {
  NormalRng g(seed);
  std::vector<double> q(static_cast<size_t>(n) * n);
  for (double& x : q) x = g.next();
  for (int j = 0; j < n; ++j)
    for (int pass = 0; pass < 2; ++pass) {
      for (int k = 0; k < j; ++k) {
        double dot = 0;
        for (int i = 0; i < n; ++i) dot += q[i * n + j] * q[i * n + k];
        for (int i = 0; i < n; ++i) q[i * n + j] -= dot * q[i * n + k];
      }
      double nrm = 0;
      for (int i = 0; i < n; ++i) nrm += q[i * n + j] * q[i * n + j];
      nrm = std::sqrt(nrm);
      for (int i = 0; i < n; ++i) q[i * n + j] /= nrm;
    }
  return q;
}

// Q diag(w) Q^T
std::vector<double> compose(const std::vector<double>& q, const std::vector<double>& w, int n) {
  std::vector<double> a(static_cast<size_t>(n) * n, 0.0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += q[i * n + k] * w[k] * q[j * n + k];
      a[i * n + j] = s;
    }
  return a;
}

double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::abs(x));
  return m;
}

// max |A - V diag(w) V^T| and max |V^T V - I|
void expect_decomposes(const std::vector<double>& a, const SymEigen& r, double tol) {
  const int n = r.n;
  const double scale = std::max(1.0, max_abs(a));
  ASSERT_EQ(r.values.size(), static_cast<size_t>(n));
  ASSERT_EQ(r.vectors.size(), static_cast<size_t>(n) * n);
  for (int j = 1; j < n; ++j) EXPECT_GE(r.values[j - 1], r.values[j]);
  const auto back = compose(r.vectors, r.values, n);
  double err = 0, orth = 0;
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::abs(back[i] - a[i]));
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int k = 0; k < n; ++k) s += r.vectors[k * n + i] * r.vectors[k * n + j];
      orth = std::max(orth, std::abs(s - (i == j ? 1.0 : 0.0)));
    }
  EXPECT_LT(err, tol * scale);
  EXPECT_LT(orth, tol);
}

TEST(MathSymEigen, TwoByTwoKnownAnswer) {
  const std::vector<double> a = {2, 1, 1, 2};
  for (const SymEigen& r : {sym_eigen(a, 2), sym_eigen_jacobi(a, 2)}) {
    EXPECT_NEAR(r.values[0], 3.0, 1e-14);
    EXPECT_NEAR(r.values[1], 1.0, 1e-14);
    const double h = std::sqrt(0.5);
    // column 0 = (h, h); column 1 = (h, -h): largest component positive, first on ties
    EXPECT_NEAR(r.vectors[0], h, 1e-14);
    EXPECT_NEAR(r.vectors[2], h, 1e-14);
    EXPECT_NEAR(r.vectors[1], h, 1e-14);
    EXPECT_NEAR(r.vectors[3], -h, 1e-14);
  }
}

TEST(MathSymEigen, KnownSpectrumThroughRandomRotation) {
  for (int n : {3, 17, 64, 256}) {
    SCOPED_TRACE(n);
    std::vector<double> w(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) w[i] = std::pow(0.9, i) * (i % 3 == 1 ? -1.0 : 1.0) * 10.0;
    const auto a = compose(random_orthogonal(n, 1000 + n), w, n);
    const SymEigen r = sym_eigen(a, n);
    std::vector<double> sorted = w;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    for (int i = 0; i < n; ++i) EXPECT_NEAR(r.values[i], sorted[i], 1e-11 * 10.0) << i;
    expect_decomposes(a, r, 1e-11);
    const SymEigen only = sym_eigen(a, n, false);
    EXPECT_TRUE(only.vectors.empty());
    for (int i = 0; i < n; ++i) EXPECT_NEAR(only.values[i], r.values[i], 1e-12 * 10.0);
  }
}

TEST(MathSymEigen, AgreesWithJacobiOnRandomSymmetric) {
  const int n = 40;
  NormalRng g(7);
  std::vector<double> a(static_cast<size_t>(n) * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j <= i; ++j) a[i * n + j] = a[j * n + i] = g.next();
  const SymEigen q = sym_eigen(a, n), jac = sym_eigen_jacobi(a, n);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(q.values[i], jac.values[i], 1e-12);
  expect_decomposes(a, q, 1e-12);
  expect_decomposes(a, jac, 1e-12);
  // distinct eigenvalues: eigenvectors agree (signs are normalised)
  for (size_t i = 0; i < q.vectors.size(); ++i) EXPECT_NEAR(q.vectors[i], jac.vectors[i], 1e-9);
}

TEST(MathSymEigen, RepeatedEigenvaluesAndRankDeficiency) {
  const int n = 6;
  const std::vector<double> w = {5, 5, 5, 1, 1, 0};
  const auto a = compose(random_orthogonal(n, 3), w, n);
  for (const SymEigen& r : {sym_eigen(a, n), sym_eigen_jacobi(a, n)}) {
    for (int i = 0; i < n; ++i) EXPECT_NEAR(r.values[i], w[i], 1e-13);
    expect_decomposes(a, r, 1e-13);
  }
  // rank one: x x^T
  std::vector<double> x = {1, -2, 3, 0.5};
  std::vector<double> b(16);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) b[i * 4 + j] = x[i] * x[j];
  const SymEigen r = sym_eigen(b, 4);
  EXPECT_NEAR(r.values[0], 1 + 4 + 9 + 0.25, 1e-13);
  for (int i = 1; i < 4; ++i) EXPECT_NEAR(r.values[i], 0.0, 1e-13);
  expect_decomposes(b, r, 1e-13);
}

TEST(MathSymEigen, ZeroDiagonalTinyAndEmpty) {
  const std::vector<double> z(25, 0.0);
  for (const SymEigen& r : {sym_eigen(z, 5), sym_eigen_jacobi(z, 5)}) {
    for (double v : r.values) EXPECT_EQ(v, 0.0);
    expect_decomposes(z, r, 1e-15);
  }
  const std::vector<double> d = {1, 0, 0, 0, 3, 0, 0, 0, 2};
  const SymEigen r = sym_eigen(d, 3);
  EXPECT_EQ(r.values, (std::vector<double>{3, 2, 1}));
  expect_decomposes(d, r, 1e-15);
  const SymEigen one = sym_eigen(std::vector<double>{-4.5}, 1);
  EXPECT_EQ(one.values, std::vector<double>{-4.5});
  EXPECT_EQ(one.vectors, std::vector<double>{1.0});
  EXPECT_EQ(sym_eigen(std::vector<double>{}, 0).values.size(), 0u);
  // an already tridiagonal matrix (the Householder steps find nothing to do)
  const std::vector<double> t = {2, -1, 0, 0, -1, 2, -1, 0, 0, -1, 2, -1, 0, 0, -1, 2};
  const SymEigen rt = sym_eigen(t, 4);
  for (int k = 1; k <= 4; ++k)  // eigenvalues of the 1-D Laplacian: 2 - 2 cos(k pi / 5)
    EXPECT_NEAR(rt.values[4 - k], 2 - 2 * std::cos(k * M_PI / 5), 1e-14);
  expect_decomposes(t, rt, 1e-14);
}

TEST(MathSymEigen, ReadsOnlyTheLowerTriangle) {
  std::vector<double> a = {2, 99, 1, 2};  // upper entry is garbage; lower says 1
  const SymEigen r = sym_eigen(a, 2);
  EXPECT_NEAR(r.values[0], 3.0, 1e-14);
  EXPECT_NEAR(r.values[1], 1.0, 1e-14);
}

TEST(MathSymEigen, BadInputThrows) {
  EXPECT_THROW(sym_eigen(std::vector<double>(5, 0.0), 2), Error);
  EXPECT_THROW(sym_eigen(std::vector<double>{1, NAN, NAN, 1}, 2), Error);
  EXPECT_THROW(sym_eigen_jacobi(std::vector<double>{1, 0, 0, INFINITY}, 2), Error);
}

}  // namespace
}  // namespace kvs::math
