// Compactor's calibration curve (§3.5): f against the printed formula, its limits, the closed-form
// inverse, dF/db, and the fit recovering (alpha, beta) from synthetic triples with and without noise.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "press/math/calibration_curve.h"

namespace kvs::math {
namespace {

// The paper's formula as printed.
double printed_f(double r, double b) { return (std::exp(r * b - b) - std::exp(-b)) / (1 - std::exp(-b)); }

TEST(MathCalibration, CurveMatchesThePrintedFormulaAndLimits) {
  for (double b : {-8.0, -2.0, -0.3, 0.4, 3.0, 12.0})
    for (double r : {0.05, 0.25, 0.5, 0.9}) EXPECT_NEAR(calib_f(r, b), printed_f(r, b), 1e-12) << r << " " << b;
  for (double b : {-700.0, -3.0, 1e-9, 5.0, 900.0}) {
    EXPECT_EQ(calib_f(0.0, b), 0.0);
    EXPECT_EQ(calib_f(1.0, b), 1.0);
  }
  // b -> 0: the diagonal
  for (double r : {0.1, 0.6}) {
    EXPECT_EQ(calib_f(r, 0.0), r);
    EXPECT_NEAR(calib_f(r, 1e-9), r, 1e-9);
    EXPECT_NEAR(calib_f(r, -1e-9), r, 1e-9);
  }
  // b > 0 below the diagonal, b < 0 above; monotone in r; finite for huge |b|
  EXPECT_LT(calib_f(0.5, 2.0), 0.5);
  EXPECT_GT(calib_f(0.5, -2.0), 0.5);
  double prev = 0;
  for (int i = 1; i <= 100; ++i) {
    const double f = calib_f(i / 100.0, 3.0);
    EXPECT_GT(f, prev);
    prev = f;
  }
  EXPECT_TRUE(std::isfinite(calib_f(0.5, 1e5)));
  EXPECT_NEAR(calib_f(0.5, -1e5), 1.0, 1e-12);
}

TEST(MathCalibration, DerivativeMatchesFiniteDifferences) {
  for (double b : {-20.0, -1.0, -2e-4, 0.0, 5e-4, 0.01, 2.0, 30.0})
    for (double r : {0.1, 0.5, 0.95}) {
      const double h = 1e-6 * std::max(1.0, std::abs(b));
      const double fd = (calib_f(r, b + h) - calib_f(r, b - h)) / (2 * h);
      EXPECT_NEAR(calib_df_db(r, b), fd, 1e-7 * std::max(1.0, std::abs(fd))) << r << " " << b;
    }
}

TEST(MathCalibration, ClosedFormInverse) {
  for (double b : {-200.0, -40.0, -3.0, -1e-6, 0.0, 1e-8, 0.5, 7.0, 60.0})
    for (double tau : {0.05, 0.5, 0.9, 0.95, 0.999}) {
      const double r = calib_solve_r(tau, b);
      EXPECT_GT(r, 0.0);
      EXPECT_LE(r, 1.0);
      if (r > 1e-9) {
        EXPECT_NEAR(calib_f(r, b), tau, 1e-9) << "b=" << b << " tau=" << tau;
      }
    }
  // limits: b -> 0 gives r* = tau; tau -> 1 gives r* -> 1; tau >= 1 gives 1
  EXPECT_EQ(calib_solve_r(0.95, 0.0), 0.95);
  EXPECT_NEAR(calib_solve_r(0.95, 1e-10), 0.95, 1e-9);
  EXPECT_NEAR(calib_solve_r(0.95, -1e-10), 0.95, 1e-9);
  EXPECT_NEAR(calib_solve_r(1 - 1e-12, 4.0), 1.0, 1e-9);
  EXPECT_NEAR(calib_solve_r(1 - 1e-12, -4.0), 1.0, 1e-9);
  EXPECT_EQ(calib_solve_r(1.0, 3.0), 1.0);
  EXPECT_EQ(calib_solve_r(1.5, 3.0), 1.0);
  // an incompressible context (large b) needs almost everything; a compressible one little
  EXPECT_GT(calib_solve_r(0.95, 50.0), 0.99);
  EXPECT_LT(calib_solve_r(0.95, -50.0), 0.07);
  EXPECT_THROW(calib_solve_r(0.0, 1.0), Error);
  EXPECT_THROW(calib_solve_r(NAN, 1.0), Error);
}

// Triples on a grid of r and NLL values, y from the curve (+ optional Gaussian noise).
std::vector<CalibTriple> synthetic(double alpha, double beta, double noise, uint64_t seed) {
  NormalRng g(seed);
  std::vector<CalibTriple> t;
  for (int c = 0; c < 30; ++c) {
    const double nll = 0.5 + 3.5 * c / 29.0;
    for (double r : {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0})
      t.push_back({r, nll, calib_f(r, calib_b(alpha, beta, nll)) + noise * g.next()});
  }
  return t;
}

TEST(MathCalibration, FitRecoversParametersWithoutNoise) {
  for (auto [alpha, beta] : {std::pair{1.5, -4.0}, std::pair{-0.8, 1.0}, std::pair{0.0, 2.0}}) {
    const auto t = synthetic(alpha, beta, 0.0, 1);
    for (double w : {1.0, 4.0})
      for (bool log_space : {true, false}) {
        const CalibFit fit = fit_calibration(t, {.under_weight = w, .log_space = log_space});
        EXPECT_NEAR(fit.alpha, alpha, 1e-6);
        EXPECT_NEAR(fit.beta, beta, 1e-6);
        EXPECT_LT(fit.loss, 1e-12);
        EXPECT_EQ(fit.n_used, 30 * 9);  // r = 0 and r = 1 skipped
      }
  }
}

TEST(MathCalibration, FitWithNoiseAndTheAsymmetricPenalty) {
  const double alpha = 1.5, beta = -4.0;
  const auto t = synthetic(alpha, beta, 0.02, 7);
  // Additive noise can make y <= 0 at small r: the linear form of the loss.
  const CalibFit sym = fit_calibration(t, {.under_weight = 1.0, .log_space = false});
  EXPECT_NEAR(sym.alpha, alpha, 0.05);  // seeds 7-9 land within 0.02 of alpha and 0.03 of beta
  EXPECT_NEAR(sym.beta, beta, 0.1);
  // The asymmetric fit prefers curves below the data: fewer residuals with f > y, and the r* it
  // yields is never smaller (more conservative) than the symmetric fit's, across contexts.
  const CalibFit asym = fit_calibration(t, {.under_weight = 4.0, .log_space = false});
  int over_sym = 0, over_asym = 0;
  for (const CalibTriple& x : t) {
    if (x.r == 0 || x.r == 1) continue;
    over_sym += calib_f(x.r, calib_b(sym.alpha, sym.beta, x.nll)) > x.y;
    over_asym += calib_f(x.r, calib_b(asym.alpha, asym.beta, x.nll)) > x.y;
  }
  EXPECT_LT(over_asym, over_sym);
  for (double nll : {0.5, 1.5, 2.5, 4.0}) {
    const double rs = calib_solve_r(0.95, calib_b(sym.alpha, sym.beta, nll));
    const double ra = calib_solve_r(0.95, calib_b(asym.alpha, asym.beta, nll));
    EXPECT_GE(ra, rs) << nll;
  }
}

// Log space: multiplicative noise (y = f e^{0.05 z}), y above 1 kept as measured: the fit recovers
// the curve. The linear form on the same data, y clipped to 1 as it had to be, is pulled toward
// "no loss" (a smaller b: r* too small) — what the log form avoids.
TEST(MathCalibration, LogFitNeedsNoClipping) {
  const double alpha = 1.0, beta = -2.0;
  NormalRng g(11);
  std::vector<CalibTriple> t, clipped;
  for (int c = 0; c < 30; ++c) {
    const double nll = 0.5 + 3.5 * c / 29.0;
    for (double r : {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9}) {
      const double y = calib_f(r, calib_b(alpha, beta, nll)) * std::exp(0.1 * g.next());
      t.push_back({r, nll, y});
      clipped.push_back({r, nll, std::min(y, 1.0)});
    }
  }
  int above = 0;
  for (const CalibTriple& x : t) above += x.y > 1;
  EXPECT_GT(above, 3);
  const CalibFit lf = fit_calibration(t, {.under_weight = 1.0});
  EXPECT_NEAR(lf.alpha, alpha, 0.15);
  EXPECT_NEAR(lf.beta, beta, 0.4);
  // r* at τ = 0.9 over the contexts: the log fit's is closer to the true curve's than the clipped
  // linear fit's.
  const CalibFit cf = fit_calibration(clipped, {.under_weight = 1.0, .log_space = false});
  double err_log = 0, err_clip = 0;
  for (double nll : {0.5, 1.5, 2.5, 3.5}) {
    const double want = calib_solve_r(0.9, calib_b(alpha, beta, nll));
    err_log += std::abs(calib_solve_r(0.9, calib_b(lf.alpha, lf.beta, nll)) - want);
    err_clip += std::abs(calib_solve_r(0.9, calib_b(cf.alpha, cf.beta, nll)) - want);
  }
  EXPECT_LT(err_log, err_clip);
  // β alone (fit_alpha false): α stays 0.
  EXPECT_EQ(fit_calibration(t, {.fit_alpha = false}).alpha, 0.0);
  // y <= 0 cannot be fitted in log space.
  EXPECT_THROW(fit_calibration(std::vector<CalibTriple>{{0.5, 1, 0.0}, {0.4, 1, 0.5}}), Error);
}

TEST(MathCalibration, FitEdgeCases) {
  // one context only: alpha is not identifiable, beta is fitted alone (b = beta + alpha * nll)
  std::vector<CalibTriple> one;
  for (double r : {0.2, 0.5, 0.8}) one.push_back({r, 2.0, calib_f(r, 1.7)});
  const CalibFit f1 = fit_calibration(one);
  EXPECT_EQ(f1.alpha, 0.0);
  EXPECT_NEAR(f1.beta, 1.7, 1e-6);
  EXPECT_THROW(fit_calibration(std::vector<CalibTriple>{{0.5, 1, 0.5}}), Error);  // one usable triple
  EXPECT_THROW(fit_calibration(std::vector<CalibTriple>{{0.0, 1, 0.0}, {1.0, 1, 1.0}, {0.5, 1, 0.5}}), Error);
  EXPECT_THROW(fit_calibration(std::vector<CalibTriple>{{1.5, 1, 0.5}, {0.5, 1, 0.5}}), Error);
  EXPECT_THROW(fit_calibration(one, {.under_weight = 0.5}), Error);
}

}  // namespace
}  // namespace kvs::math
