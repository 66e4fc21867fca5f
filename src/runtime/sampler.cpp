#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace kvs {

int32_t argmax(std::span<const float> logits) {
  KVS_ASSERT(!logits.empty());
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(i);
  return best;
}

double token_nll(std::span<const float> logits, int32_t token) {
  KVS_ASSERT(token >= 0 && static_cast<size_t>(token) < logits.size());
  float mx = logits[0];
  for (float x : logits) mx = std::max(mx, x);
  double z = 0;
  for (float x : logits) z += std::exp(static_cast<double>(x - mx));
  return std::log(z) + mx - logits[static_cast<size_t>(token)];
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {
  if (!(p.temp >= 0) || !std::isfinite(p.temp)) fail("--temp must be a finite number >= 0 (got {})", p.temp);
  if (p.top_k < 0) fail("--top-k must be >= 0 (got {})", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) fail("--top-p must be in (0, 1] (got {})", p.top_p);
  if (!(p.min_p >= 0 && p.min_p < 1)) fail("--min-p must be in [0, 1) (got {})", p.min_p);
}

int32_t Sampler::sample(std::span<const float> logits) {
  if (p_.temp <= 0.0f) return argmax(logits);
  const size_t n = logits.size();
  cand_.resize(n);
  for (size_t i = 0; i < n; ++i) cand_[i] = {logits[i] / p_.temp, static_cast<int32_t>(i)};
  size_t k = n;
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
    k = static_cast<size_t>(p_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k), cand_.end(),
                      [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  } else {
    std::sort(cand_.begin(), cand_.end(),
              [](auto& a, auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  }
  cand_.resize(k);
  const float mx = cand_[0].first;
  double sum = 0;
  for (auto& c : cand_) {
    c.first = std::exp(c.first - mx);
    sum += c.first;
  }
  // min-p, then top-p over the sorted candidates.
  size_t keep = k;
  if (p_.min_p > 0) {
    const float thr = p_.min_p * cand_[0].first;
    keep = 1;
    while (keep < k && cand_[keep].first >= thr) ++keep;
  }
  if (p_.top_p < 1.0f) {
    double cum = 0;
    size_t i = 0;
    for (; i < keep; ++i) {
      cum += cand_[i].first / sum;
      if (cum >= p_.top_p) {
        ++i;
        break;
      }
    }
    keep = std::max<size_t>(1, std::min(keep, i));
  }
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += cand_[i].first;
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng_), acc = 0;
  for (size_t i = 0; i < keep; ++i) {
    acc += cand_[i].first;
    if (r < acc) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

}  // namespace kvs
