#include "press/math/calibration_curve.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace kvs::math {

double calib_f(double r, double b) {
  r = std::clamp(r, 0.0, 1.0);
  if (r == 0.0) return 0.0;
  if (r == 1.0 || b == 0.0) return r;
  // b > 0: multiply through by e^-b so nothing overflows; b < 0: expm1 ratio directly.
  if (b > 0) return std::exp(b * (r - 1.0)) * (std::expm1(-b * r) / std::expm1(-b));
  return std::expm1(b * r) / std::expm1(b);
}

double calib_df_db(double r, double b) {
  r = std::clamp(r, 0.0, 1.0);
  if (r == 0.0 || r == 1.0) return 0.0;
  const double f = calib_f(r, b);
  // d/db log f = r / (1 - e^{-b r}) - 1 / (1 - e^{-b}); near b = 0 both terms blow up and cancel,
  // so use the series of log f = log r + b (r - 1) / 2 + b^2 (r^2 - 1) / 24 + O(b^4).
  if (std::abs(b) < 1e-3) return f * (0.5 * (r - 1.0) + b * (r * r - 1.0) / 12.0);
  return f * (r / -std::expm1(-b * r) - 1.0 / -std::expm1(-b));
}

double calib_solve_r(double tau, double b) {
  if (!std::isfinite(tau) || !std::isfinite(b)) fail("calib_solve_r: tau = {}, b = {} (expected finite)", tau, b);
  if (tau <= 0) fail("calib_solve_r: quality tau = {} (expected in (0, 1])", tau);
  if (tau >= 1) return 1.0;
  double r;
  if (b == 0.0) {
    r = tau;
  } else if (b > 0) {
    // 1 + τ (e^b - 1) = e^b (1 + (1 - τ) expm1(-b))
    r = 1.0 + std::log1p((1.0 - tau) * std::expm1(-b)) / b;
  } else {
    r = std::log1p(tau * std::expm1(b)) / b;
  }
  return std::clamp(r, 1e-9, 1.0);
}

namespace {

struct Eval {
  double loss = 0;
  double h00 = 0, h01 = 0, h11 = 0;  // J^T W J
  double g0 = 0, g1 = 0;             // J^T W e
};

Eval evaluate(const std::vector<CalibTriple>& t, double alpha, double beta, double under_weight, bool log_space) {
  Eval ev;
  for (const CalibTriple& x : t) {
    const double b = calib_b(alpha, beta, x.nll);
    const double f = calib_f(x.r, b);
    // log space: e = log f - log y, de/db = (df/db) / f (f > 0 for 0 < r < 1 and finite b).
    const double e = log_space ? std::log(std::max(f, 1e-300)) - std::log(x.y) : f - x.y;
    const double w = e > 0 ? under_weight : 1.0;
    const double d = log_space ? calib_df_db(x.r, b) / std::max(f, 1e-300) : calib_df_db(x.r, b);
    const double j0 = d * x.nll, j1 = d;
    ev.loss += w * e * e;
    ev.h00 += w * j0 * j0;
    ev.h01 += w * j0 * j1;
    ev.h11 += w * j1 * j1;
    ev.g0 += w * j0 * e;
    ev.g1 += w * j1 * e;
  }
  return ev;
}

}  // namespace

CalibFit fit_calibration(std::span<const CalibTriple> triples, const CalibFitOptions& opt) {
  if (!(opt.under_weight >= 1.0) || !std::isfinite(opt.under_weight))
    fail("fit_calibration: under_weight {} (expected finite, >= 1)", opt.under_weight);
  std::vector<CalibTriple> t;
  for (size_t i = 0; i < triples.size(); ++i) {
    const CalibTriple& x = triples[i];
    if (!std::isfinite(x.r) || !std::isfinite(x.nll) || !std::isfinite(x.y))
      fail("fit_calibration: triple {} (r = {}, nll = {}, y = {}) is not finite", i, x.r, x.nll, x.y);
    if (x.r < 0 || x.r > 1) fail("fit_calibration: triple {} has r = {} (expected in [0, 1])", i, x.r);
    if (x.r > 0 && x.r < 1) t.push_back(x);
  }
  if (t.size() < 2) fail("fit_calibration: {} usable triples (0 < r < 1), need at least 2", t.size());
  if (opt.log_space)
    for (const CalibTriple& x : t)
      if (!(x.y > 0)) fail("fit_calibration: y = {} (the log-space fit needs y > 0)", x.y);

  const double n = static_cast<double>(t.size());
  double mx = 0;
  for (const CalibTriple& x : t) mx += x.nll / n;
  double sxx = 0;
  for (const CalibTriple& x : t) sxx += (x.nll - mx) * (x.nll - mx);
  const bool alpha_free = opt.fit_alpha && sxx > 1e-12 * n * (1.0 + mx * mx);
  CalibFit fit;
  fit.n_used = static_cast<int>(t.size());
  // Start: α = 0, β the best b of a grid (then refined by the iterations below).
  {
    double best = INFINITY;
    for (int g = -600; g <= 600; ++g) {
      const double b = g * 0.05;
      const double l = evaluate(t, 0.0, b, opt.under_weight, opt.log_space).loss;
      if (l < best) best = l, fit.beta = b;
    }
    fit.alpha = 0.0;
  }

  // Levenberg-Marquardt with Marquardt's diagonal scaling.
  Eval cur = evaluate(t, fit.alpha, fit.beta, opt.under_weight, opt.log_space);
  double mu = 1e-3;
  for (int it = 0; it < opt.max_iter; ++it) {
    fit.iterations = it + 1;
    double a00 = cur.h00 * (1.0 + mu), a11 = cur.h11 * (1.0 + mu), a01 = cur.h01;
    double da = 0, db = 0;
    if (alpha_free) {
      const double det = a00 * a11 - a01 * a01;
      if (!(det > 0)) break;
      da = -(a11 * cur.g0 - a01 * cur.g1) / det;
      db = -(a00 * cur.g1 - a01 * cur.g0) / det;
    } else {
      if (!(a11 > 0)) break;
      db = -cur.g1 / a11;
    }
    const Eval next = evaluate(t, fit.alpha + da, fit.beta + db, opt.under_weight, opt.log_space);
    if (next.loss < cur.loss) {
      fit.alpha += da;
      fit.beta += db;
      const bool done = cur.loss - next.loss <= 1e-15 * (cur.loss + 1e-300) ||
                        std::abs(da) + std::abs(db) <= 1e-12 * (1.0 + std::abs(fit.alpha) + std::abs(fit.beta));
      cur = next;
      mu = std::max(mu / 3.0, 1e-12);
      if (done) break;
    } else {
      mu *= 4.0;
      if (mu > 1e12) break;  // no downhill step left: at the minimum up to rounding
    }
  }
  fit.loss = cur.loss;
  return fit;
}

}  // namespace kvs::math
