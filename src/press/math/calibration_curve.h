// Compactor's context-calibrated compression (Chari & Van Durme 2025, ../shared/papers/compactor.txt
// §3.5 "Context-Calibrated Compression" and §5.4): predict the quality left after keeping a fraction
// r of the KV cache of context c, and invert it to pick the smallest r that keeps a quality τ.
//
//   b = α NLL(c) + β
//   f(r, c) = (exp(r b - b) - exp(-b)) / (1 - exp(-b))   (= expm1(b r) / expm1(b); f(0) = 0, f(1) = 1)
//   y = NLL(answer | full context) / NLL(answer | compressed context), the "NLL ratio" in (0, 1]
//   r*(c, τ) = the r in (0, 1] with f(r*, c) = τ, in closed form:
//              r* = log(1 + τ (e^b - 1)) / b   (r* = τ at b = 0)
// b > 0: f below the diagonal (quality drops early: incompressible context); b < 0: above it.
// Evaluation is stable for any b: expm1/log1p forms, no overflow for |b| up to ~1e300.
//
// Fit of (α, β) (§3.5: "least-squares regression on training triples ... we use asymmetrical MSE
// to penalize under-estimation of r*"). The paper gives no formula and no code is public (the
// compactor-vllm README lists calibration as "coming soon"; kvpress has none), so our choice:
//   log space (default): loss = sum_i w_i (log f(r_i, c_i) - log y_i)^2
//   linear (the earlier form): loss = sum_i w_i (f(r_i, c_i) - y_i)^2
//   w_i = under_weight if the curve promises more than was measured (f > y), else 1.
// Why log space: y is a ratio of NLLs, its noise multiplicative; y > 1 (the compressed context
// answered with a lower NLL, common when the full-cache NLL is ~1e-3 nats) is a small positive
// residual there and needs no clipping to the curve's range (f <= 1), where the linear form had to
// clip it (which then shaped the curve). The caller floors both NLLs (calibrate_quality.cpp's
// nll_floor) so that two near-zero NLLs give y ~ 1, not noise.
// Why the weight's sign: r* is under-estimated exactly when the fitted curve promises more quality
// than the context delivers (f > y near τ), so those residuals get the larger weight; under_weight
// default 4 (ours). Minimised by Levenberg-Marquardt from α = 0 and the β of a 1-D grid over
// b in [-30, 30] (a per-triple inversion, the earlier start, breaks on y >= 1). Triples with r = 0
// or r = 1 carry no information (f is 0 or 1 there for every b) and are skipped. If every NLL is
// the same, or fit_alpha is false, α stays 0 and β is fitted alone.
//
// Complexity: O(iterations x triples), iterations <= max_iter (typically < 20).
#pragma once
#include <span>

namespace kvs::math {

inline double calib_b(double alpha, double beta, double nll) { return alpha * nll + beta; }

// f(r, b) for r in [0, 1] (values outside are clamped), any finite b.
double calib_f(double r, double b);
// d f / d b (for the fit; exposed for tests).
double calib_df_db(double r, double b);
// r* with f(r*, b) = τ: τ in (0, 1) gives r* in (0, 1); τ >= 1 gives 1. Clamped to [1e-9, 1].
// Throws kvs::Error for τ <= 0 or non-finite τ/b.
double calib_solve_r(double tau, double b);

struct CalibTriple {
  double r;    // kept fraction in [0, 1]
  double nll;  // NLL(c): mean token NLL of the context under the model (from the prefill logits)
  double y;    // NLL ratio: NLL(t | q, c) / NLL(t | q, c compressed to r)
};

struct CalibFitOptions {
  double under_weight = 4.0;  // weight of residuals with f > y (>= 1; 1 = plain least squares)
  int max_iter = 200;
  bool log_space = true;      // residuals log f - log y (y > 0 needed); false: f - y
  bool fit_alpha = true;      // false: α = 0, β alone (b the same for every context)
};

struct CalibFit {
  double alpha = 0, beta = 0;
  double loss = 0;     // weighted sum of squared residuals at (alpha, beta)
  int iterations = 0;  // Levenberg-Marquardt steps taken
  int n_used = 0;      // triples with 0 < r < 1
};

// Throws kvs::Error on fewer than 2 usable triples, r outside [0, 1], non-finite values, y <= 0 in
// log space, or under_weight < 1.
CalibFit fit_calibration(std::span<const CalibTriple> triples, const CalibFitOptions& opt = {});

}  // namespace kvs::math
