// Token sampling: greedy (temp 0), or temperature with top-k, top-p (nucleus) and min-p filters,
// reproducible from a seed; before either, logit biases and presence / frequency / repetition
// penalties adjust the logits.
#pragma once
#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace kvs {

struct SamplerParams {
  float temp = 0.0f;   // 0 = greedy (argmax)
  int top_k = 40;      // 0 = off
  float top_p = 0.95f; // 1 = off
  float min_p = 0.0f;  // 0 = off; keep tokens with p >= min_p * p_max
  uint64_t seed = 0;
  // vLLM's definitions (0 / 1 = off): presence and frequency count the tokens generated so far
  // (logit -= frequency * count + presence * (count > 0)); repetition is CTRL's, over the prompt
  // and the generated tokens (a positive logit divided by it, a negative one multiplied).
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  // (token, bias) added to the logit first; a bias <= kBanBias bans the token (-inf).
  std::vector<std::pair<int32_t, float>> logit_bias;
  bool adjusts_logits() const {
    return presence_penalty != 0.0f || frequency_penalty != 0.0f || repetition_penalty != 1.0f || !logit_bias.empty();
  }
};

inline constexpr float kBanBias = -100.0f;  // OpenAI: "-100 should result in a ban"

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  int32_t sample(std::span<const float> logits);
  const SamplerParams& params() const { return p_; }
  // The penalties' history: the prompt (repetition penalty only) and each token generated.
  void set_prompt(std::span<const int32_t> prompt);
  void accept(int32_t token);
  // `logits` with the biases and penalties of the history so far applied (what sample() draws from).
  std::span<const float> adjusted(std::span<const float> logits);

 private:
  SamplerParams p_;
  std::unordered_set<int32_t> prompt_;          // tokens of the prompt (repetition penalty)
  std::unordered_map<int32_t, int32_t> counts_;  // generated token -> times generated
  std::vector<float> adj_;                       // [n_vocab] adjusted logits
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // [candidates] (logit / temp, token id)
  std::vector<float> e_;                          // [candidates] exp(v - max v)
  std::vector<int32_t> keep_, tie_;               // positions in cand_ kept / in top-p's cut bucket
  std::vector<double> mass_;                      // [buckets] top-p's mass per bucket
};

// Reference semantics of SamplerParams' adjustments, applied in place (bias, then repetition, then
// frequency and presence, as vLLM's sampler orders them): `prompt` and `counts` as Sampler keeps them.
void apply_logit_adjustments(std::span<float> logits, const SamplerParams& p, const std::unordered_set<int32_t>& prompt,
                             const std::unordered_map<int32_t, int32_t>& counts);

// Index of the largest logit (lowest index on ties; a NaN is never chosen, 0 if all are NaN).
int32_t argmax(std::span<const float> logits);
// log sum_i exp(logits[i]), in double (the max subtracted first).
double log_sum_exp(std::span<const float> logits);
// -log softmax(logits)[token], in double.
double token_nll(std::span<const float> logits, int32_t token);

}  // namespace kvs
