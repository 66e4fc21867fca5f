// Statistical leverage scores of a key matrix, exact and approximate — Compactor's outlier score
// (Chari & Van Durme 2025, "Compactor: Calibrated KV Cache Compression with Approximate Leverage
// Scores", ../shared/papers/compactor.txt): Definition 1 / Eq. 1, Eq. 2 and Algorithm 1.
//
// Definition (Eq. 1): K = U Σ V^T (thin SVD), leverage l_i = ||U_i||^2 (row i of U). Scores lie in
// [0, 1] and sum to rank(K). Via Eq. 2, U = K V Σ^-1 with V, Σ^2 from the d x d Gram K^T K, so
// l_i = sum_j (K_i . v_j)^2 / λ_j — what both functions compute (the exact one on K, the
// approximate one on the sketch K Φ).
//
// Keys: [n][row_stride] row-major floats, the first d of each row used (row_stride = d for a
// plain [n][d] matrix; n_head_kv * head_dim to read one head of a [n][n_head_kv][head_dim] block
// at keys + kvh * head_dim). Compactor scores PRE-RoPE keys (§3.1); the caller provides them.
//
// Choices where the paper is open (official code checked: vnchari/compactor-vllm
// compression/compactor.py::approximate_leverage_scores; NVIDIA/kvpress leverage_press.py):
//  - Centering (`center`): both official implementations subtract the mean key before sketching
//    (compactor-vllm per chunk of 512 tokens, kvpress over the sequence); the paper's Eq. 1 does
//    not. Keys share a large common component, which without centering is the top singular
//    direction and makes leverage mostly a norm; centred leverage is the Mahalanobis distance to
//    the mean. Centred over the rows passed; chunked scoring (compactor-vllm) is the caller
//    calling this per chunk. Compactor's preset=paper does not centre, preset=official does.
//  - Gram route + clamping (Algorithm 1 line 6 and Appendix C "Gram-matrix eigendecomposition"):
//    λ_j <- max(λ_j, clamp_rel * λ_max). The paper clamps at an absolute 1e-6; we make it
//    relative because the key scale differs by model and layer (an absolute floor on a Gram of
//    32k tokens is no floor at all). compactor-vllm instead adds 5e-3 to the diagonal and kvpress
//    uses a Cholesky solve with jitter 1e-2 — both absolute regularisers of the same kind.
//    `ridge` > 0 is compactor-vllm's: λ_j <- λ_j + ridge (absolute, its regularizer 5e-3), no
//    relative floor.
//    Computed in double, the Gram route loses nothing that matters at k = 48.
//  - Sketch Φ (Algorithm 1 line 3): entries N(0, 1/k), from core/rng.h (SplitMix64 + polar
//    normals), so the same seed gives the same scores everywhere. compactor-vllm draws one Φ for
//    the whole model; gaussian_sketch() makes one Φ the caller may reuse for every head and layer.
//  - Exact scores are rank-aware: directions with σ_j <= rank_tol * σ_max are dropped (a relative
//    threshold; default 1e-5, above float rounding of the keys), so scores sum to the numerical rank.
//
// Complexity (n tokens, d = head dim, k = sketch dim): approximate O(n d k + n k^2) time, O(n k)
// memory (the sketched keys) + O(k^2); exact O(n d^2) time, O(d^2) memory. Single-threaded: the
// caller runs heads in parallel (the sketch and whitening products are cblas_sgemm calls; the k x k
// Gram is accumulated in double). Measured, one core, n = 32k, d = 64, k = 48: approximate 0.05 s,
// exact 0.07 s per head.
// Note: for d <= ~64 the exact scores cost no more than the sketch (n d^2 / 2 vs n d k + n k^2 / 2
// multiply-adds), and the sketch only approximates well while rank(K) <= k (tests: Spearman rho vs
// exact 1.00 at rank 32, 0.92 at rank 56, 0.85 at full rank 64, 0.57 at full rank 128).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace kvs::math {

struct ExactLeverageOptions {
  bool center = true;      // subtract the mean key first (see above)
  double rank_tol = 1e-5;  // singular values <= rank_tol * σ_max count as zero
};

struct ExactLeverage {
  std::vector<double> scores;  // [n], in [0, 1], sum = rank
  int rank = 0;                // numerical rank of the (centred) keys
};

// Exact leverage scores (Eq. 1 via Eq. 2, in double). n >= 0, 1 <= d <= row_stride.
ExactLeverage exact_leverage(std::span<const float> keys, int64_t n, int d, int64_t row_stride,
                             const ExactLeverageOptions& opt = {});

// Gaussian right sketch Φ: [d][k] row-major, entries i.i.d. N(0, 1/k), deterministic in `seed`.
std::vector<float> gaussian_sketch(int d, int k, uint64_t seed);

struct ApproxLeverageOptions {
  int sketch_dim = 48;          // k (the paper's default, §4 "Implementation")
  uint64_t seed = 0xC0A7AC70u;  // seed of Φ when approx_leverage builds it
  bool center = true;           // see above
  double clamp_rel = 1e-6;      // eigenvalue floor relative to the largest
};

// Approximate leverage scores (Algorithm 1): K̂ = K Φ, G = K̂^T K̂, G = Ṽ Λ Ṽ^T, Ũ = K̂ Ṽ Λ^-1/2,
// l̃_i = ||Ũ_i||^2. sketch: [d][k] (from gaussian_sketch). All scores 0 if the (centred) keys are 0.
std::vector<float> approx_leverage(std::span<const float> keys, int64_t n, int d, int64_t row_stride,
                                   std::span<const float> sketch, int k, bool center = true,
                                   double clamp_rel = 1e-6, double ridge = 0.0);
// Same, building Φ from opt.seed.
std::vector<float> approx_leverage(std::span<const float> keys, int64_t n, int d, int64_t row_stride,
                                   const ApproxLeverageOptions& opt = {});

}  // namespace kvs::math
