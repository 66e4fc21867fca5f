#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/ops.h"

namespace kvs {

int32_t argmax(std::span<const float> logits) {
  KVS_ASSERT(!logits.empty() && logits.size() < static_cast<size_t>(INT32_MAX));
  return static_cast<int32_t>(kernels::argmax_f32(logits.data(), static_cast<int64_t>(logits.size())));
}

double log_sum_exp(std::span<const float> logits) {
  KVS_ASSERT(!logits.empty());
  float mx = logits[0];
  for (float x : logits) mx = std::max(mx, x);
  double z = 0;
  for (float x : logits) z += std::exp(static_cast<double>(x - mx));
  return std::log(z) + mx;
}

double token_nll(std::span<const float> logits, int32_t token) {
  KVS_ASSERT(token >= 0 && static_cast<size_t>(token) < logits.size());
  return log_sum_exp(logits) - logits[static_cast<size_t>(token)];
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {
  if (!(p.temp >= 0) || !std::isfinite(p.temp)) fail("--temp must be a finite number >= 0 (got {})", p.temp);
  if (p.top_k < 0) fail("--top-k must be >= 0 (got {})", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) fail("--top-p must be in (0, 1] (got {})", p.top_p);
  if (!(p.min_p >= 0 && p.min_p < 1)) fail("--min-p must be in [0, 1) (got {})", p.min_p);
  if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty))
    fail("presence and frequency penalties must be finite");
  if (!(p.repetition_penalty > 0) || !std::isfinite(p.repetition_penalty))
    fail("the repetition penalty must be a finite number > 0 (got {})", p.repetition_penalty);
  for (const auto& [t, b] : p.logit_bias)
    if (t < 0 || std::isnan(b)) fail("logit bias: token {} or bias {} is invalid", t, b);
}

void apply_logit_adjustments(std::span<float> logits, const SamplerParams& p, const std::unordered_set<int32_t>& prompt,
                             const std::unordered_map<int32_t, int32_t>& counts) {
  const auto n = static_cast<int64_t>(logits.size());
  for (const auto& [t, b] : p.logit_bias) {
    if (t >= n) continue;
    float& x = logits[static_cast<size_t>(t)];
    x = b <= kBanBias ? -std::numeric_limits<float>::infinity() : x + b;
  }
  if (p.repetition_penalty != 1.0f) {
    auto penalise = [&](int32_t t) {
      if (t < 0 || t >= n) return;
      float& x = logits[static_cast<size_t>(t)];
      x = x > 0 ? x / p.repetition_penalty : x * p.repetition_penalty;
    };
    for (int32_t t : prompt) penalise(t);
    for (const auto& [t, c] : counts)
      if (!prompt.count(t)) penalise(t);
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    for (const auto& [t, c] : counts) {
      if (t < 0 || t >= n || c <= 0) continue;
      logits[static_cast<size_t>(t)] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
    }
  }
}

void Sampler::set_prompt(std::span<const int32_t> prompt) {
  prompt_.clear();
  if (p_.repetition_penalty == 1.0f) return;  // only the repetition penalty reads the prompt
  prompt_.insert(prompt.begin(), prompt.end());
}

void Sampler::accept(int32_t token) {
  if (p_.adjusts_logits()) ++counts_[token];
}

std::span<const float> Sampler::adjusted(std::span<const float> logits) {
  if (!p_.adjusts_logits()) return logits;
  adj_.assign(logits.begin(), logits.end());
  apply_logit_adjustments(adj_, p_, prompt_, counts_);
  return adj_;
}

// The distribution is the one the filters define on the candidates sorted by probability (lowest
// id first on ties): top-k, then min-p (p >= min_p * p_max), then top-p (the shortest prefix whose
// mass reaches top_p of the top-k candidates' mass), renormalised. Nothing sorts the vocabulary
// (milliseconds per token at 49k-262k tokens, for every request at the server's default temperature 1;
// docs/benchmarks/issue25-server-step-1-2026-11-28.md, "Sampling"): top-k is a partial sort of the best k; top-p puts the candidates in buckets of
// 1/32 nat below the best logit, takes every bucket whose cumulative mass stays below top_p, and
// sorts only the bucket where the mass reaches it, to find the exact cut.
// A draw walks the kept candidates in token order (then the sorted part of the cut bucket): the
// same distribution as a walk in sorted order, not the same token per seed as versions before
// 2026-11-28.
int32_t Sampler::sample(std::span<const float> raw) {
  const std::span<const float> logits = adjusted(raw);
  if (p_.temp <= 0.0f) return argmax(logits);
  const size_t n = logits.size();
  KVS_ASSERT(n > 0);
  // cand_ [m]: (scaled logit, token id) of the candidates, in token order unless top-k reordered them.
  cand_.resize(n);
  for (size_t i = 0; i < n; ++i) cand_[i] = {logits[i] / p_.temp, static_cast<int32_t>(i)};
  if (p_.adjusts_logits()) {  // banned tokens (-inf) are no candidates: the vector exp would not give them exactly 0
    std::erase_if(cand_, [](const std::pair<float, int32_t>& c) { return c.first == -std::numeric_limits<float>::infinity(); });
    if (cand_.empty()) return argmax(logits);
  }
  const size_t n_cand = cand_.size();
  auto before = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n_cand) {
    // A heap of the best k: about one comparison per token for the usual small k (nth_element
    // measured 3.4x slower at k = 40).
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), before);
    cand_.resize(static_cast<size_t>(p_.top_k));
  }
  const size_t m = cand_.size();
  // e_ [m]: exp(v - max v), the candidates' probabilities up to a common factor.
  e_.resize(m);
  for (size_t j = 0; j < m; ++j) e_[j] = cand_[j].first;
  const float mx = kernels::max_f32(e_.data(), static_cast<int64_t>(m));
  kernels::exp_sub_sum(e_.data(), static_cast<int64_t>(m), mx);
  double sum = 0;  // mass of the top-k candidates (top-p's denominator)
  for (size_t j = 0; j < m; ++j) sum += e_[j];
  // keep_ : positions in cand_ / e_ of the candidates kept, min-p first (relative to the best
  // token, whose e is exp(0) = 1 up to the vector exp's 2e-7: the best is kept whatever min_p).
  keep_.clear();
  for (size_t j = 0; j < m; ++j)
    if (e_[j] >= p_.min_p || cand_[j].first == mx) keep_.push_back(static_cast<int32_t>(j));
  if (p_.top_p < 1.0f) {
    constexpr float kPerNat = 32.0f;
    constexpr int kBuckets = 32 * 40;  // 40 nats below the best; anything further in the last bucket
    auto bucket = [&](int32_t j) {
      const float d = (mx - cand_[static_cast<size_t>(j)].first) * kPerNat;
      return d < static_cast<float>(kBuckets - 1) ? static_cast<int>(d) : kBuckets - 1;
    };
    mass_.assign(kBuckets, 0.0);
    for (int32_t j : keep_) mass_[static_cast<size_t>(bucket(j))] += e_[static_cast<size_t>(j)];
    const double target = static_cast<double>(p_.top_p) * sum;
    double cum = 0;
    int cut = 0;
    while (cut < kBuckets && cum + mass_[static_cast<size_t>(cut)] < target) cum += mass_[static_cast<size_t>(cut++)];
    if (cut < kBuckets) {  // the mass reaches top_p inside bucket `cut`: keep the buckets above, sort that one
      tie_.clear();
      size_t w = 0;
      for (int32_t j : keep_) {
        const int b = bucket(j);
        if (b < cut) keep_[w++] = j;
        else if (b == cut) tie_.push_back(j);
      }
      keep_.resize(w);
      std::sort(tie_.begin(), tie_.end(), [&](int32_t a, int32_t b) { return before(cand_[static_cast<size_t>(a)], cand_[static_cast<size_t>(b)]); });
      for (int32_t j : tie_) {
        keep_.push_back(j);
        cum += e_[static_cast<size_t>(j)];
        if (cum >= target) break;
      }
    }
  }
  double total = 0;
  for (int32_t j : keep_) total += e_[static_cast<size_t>(j)];
  std::uniform_real_distribution<double> u(0.0, total);
  const double r = u(rng_);
  double acc = 0;
  for (int32_t j : keep_) {
    acc += e_[static_cast<size_t>(j)];
    if (r < acc) return cand_[static_cast<size_t>(j)].second;
  }
  return cand_[static_cast<size_t>(keep_.back())].second;
}

}  // namespace kvs
