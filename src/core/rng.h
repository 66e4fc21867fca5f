// Deterministic pseudo-random numbers that are bit-identical on every platform and compiler.
//
//   SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014):
//     64-bit words from a 64-bit state; integer arithmetic only, so identical everywhere.
//   uniform():   the top 53 bits of a word as a double in [0, 1) (exact conversion).
//   NormalRng:   standard normals by Marsaglia's polar method, which needs only + - * /, sqrt and a
//                logarithm. IEEE-754 makes + - * / and sqrt correctly rounded, but libm's log is not
//                guaranteed to be, so `portable_log` below computes it from + - * / only. Each
//                floating-point operation is a separate statement so that no compiler may contract
//                two of them into one fused multiply-add (GCC in ISO mode never contracts; clang's
//                default `-ffp-contract=on` contracts only within one expression).
// Why not std::mt19937 + std::normal_distribution: the distribution's algorithm is
// implementation-defined (libstdc++ and libc++ give different normals for the same engine).
//
// Used by the Compactor sketch (press/math/leverage) and GVote's synthetic hidden states
// (press/math/gvote_math); tests pin a few draws so a change to any of this is caught.
#pragma once
#include <cmath>
#include <cstdint>

namespace kvs {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    state_ += 0x9E3779B97F4A7C15ULL;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

  // Uniform double in [0, 1): 53 random bits times 2^-53 (both steps exact).
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// Natural logarithm of a positive, finite, normal double from + - * / only (see the file comment).
// x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log m = 2 atanh(z), z = (m - 1) / (m + 1), |z| < 0.172,
// summed to z^27 (the first omitted term is < 1e-21 relative). Accuracy: a few ulp (tested against
// std::log). Returns -inf for 0 and NaN for negative input, like std::log.
inline double portable_log(double x) {
  if (!(x > 0.0)) return x == 0.0 ? -INFINITY : NAN;
  if (std::isinf(x)) return x;
  int e = 0;
  double m = std::frexp(x, &e);  // exact: x = m * 2^e, m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m = m * 2.0;  // exact
    e = e - 1;
  }
  const double num = m - 1.0;  // exact (Sterbenz) for m in [0.5, 2]
  const double den = m + 1.0;
  const double z = num / den;
  const double z2 = z * z;
  // Horner on the odd series: atanh(z) / z = sum_k z^(2k) / (2k + 1), k = 0..13.
  double s = 1.0 / 27.0;
  for (int k = 12; k >= 0; --k) {
    const double t = s * z2;
    s = t + 1.0 / static_cast<double>(2 * k + 1);
  }
  const double log_m = 2.0 * (z * s);
  // ln 2 split in a high part with trailing zero bits (e * hi is exact for |e| < 2^11) and a low part.
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double ed = static_cast<double>(e);
  const double lo = ed * kLn2Lo;
  const double sum_lo = lo + log_m;
  const double hi = ed * kLn2Hi;
  return hi + sum_lo;
}

// Standard normal deviates N(0, 1) by Marsaglia's polar method; each accepted pair gives two values
// (the second is returned by the next call).
class NormalRng {
 public:
  explicit NormalRng(uint64_t seed) : u_(seed) {}

  double next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double a = 0.0, b = 0.0, s = 0.0;
    do {
      const double ua = u_.uniform();
      const double ub = u_.uniform();
      a = 2.0 * ua - 1.0;  // exact
      b = 2.0 * ub - 1.0;
      const double aa = a * a;
      const double bb = b * b;
      s = aa + bb;
    } while (s >= 1.0 || s == 0.0);
    const double l = portable_log(s);
    const double q = -2.0 * l;
    const double r = q / s;
    const double f = std::sqrt(r);
    spare_ = b * f;
    has_spare_ = true;
    return a * f;
  }

  SplitMix64& bits() { return u_; }

 private:
  SplitMix64 u_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace kvs
