// Token sampling: greedy (temp 0), or temperature with top-k, top-p (nucleus) and min-p filters,
// reproducible from a seed.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace kvs {

struct SamplerParams {
  float temp = 0.0f;   // 0 = greedy (argmax)
  int top_k = 40;      // 0 = off
  float top_p = 0.95f; // 1 = off
  float min_p = 0.0f;  // 0 = off; keep tokens with p >= min_p * p_max
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  int32_t sample(std::span<const float> logits);
  const SamplerParams& params() const { return p_; }

 private:
  SamplerParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // [candidates] (logit / temp, token id)
  std::vector<float> e_;                          // [candidates] exp(v - max v)
  std::vector<int32_t> keep_, tie_;               // positions in cand_ kept / in top-p's cut bucket
  std::vector<double> mass_;                      // [buckets] top-p's mass per bucket
};

// Index of the largest logit (lowest index on ties; a NaN is never chosen, 0 if all are NaN).
int32_t argmax(std::span<const float> logits);
// -log softmax(logits)[token], in double.
double token_nll(std::span<const float> logits, int32_t token);

}  // namespace kvs
