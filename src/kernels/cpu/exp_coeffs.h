// Internal: the constants of the one vector exp (exp_ps in simd_avx2.h for 8 lanes, simd_avx512.h
// for 16), written once so both ISAs compute each lane's value alike: clamp range, Cody-Waite
// two-constant ln2, and the Cephes expf degree-6 polynomial for exp(r) on |r| <= ln2/2. Constants
// only (no code), so any file may include it, also after avx512_begin.h.
#pragma once

namespace kvs::kernels::exp_coeffs {
inline constexpr float kLo = -87.3f;  // below: exactly 0 (also for -inf)
inline constexpr float kHi = 88.3f;   // above: saturates near FLT_MAX
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;  // ln2 = kLn2Hi + kLn2Lo
// p(r) = ((((P0 r + P1) r + P2) r + P3) r + P4) r + P5; exp(r) ~ 1 + r + r^2 p(r)
inline constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                       kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;
}  // namespace kvs::kernels::exp_coeffs
