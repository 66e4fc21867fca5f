#include "runtime/token_logprobs.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/sampler.h"

namespace kvs {

TokenLogprob score_token(std::span<const float> logits, int32_t token, int top_n) {
  KVS_ASSERT(!logits.empty() && token >= 0 && static_cast<size_t>(token) < logits.size());
  const double lse = log_sum_exp(logits);
  auto lp = [&](int32_t t) { return static_cast<float>(static_cast<double>(logits[static_cast<size_t>(t)]) - lse); };
  TokenLogprob out;
  out.token = token;
  out.logprob = lp(token);
  const size_t k = std::min(static_cast<size_t>(std::max(top_n, 0)), logits.size());
  if (k == 0) return out;
  // The k best ids by logit (lowest id on ties), kept sorted in a small array: one pass.
  std::vector<int32_t> best;
  best.reserve(k + 1);
  auto before = [&](int32_t a, int32_t b) {
    const float xa = logits[static_cast<size_t>(a)], xb = logits[static_cast<size_t>(b)];
    return xa > xb || (xa == xb && a < b);
  };
  for (int32_t i = 0; i < static_cast<int32_t>(logits.size()); ++i) {
    if (best.size() == k && !before(i, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), i, before), i);
    if (best.size() > k) best.pop_back();
  }
  for (int32_t t : best) out.top.emplace_back(t, lp(t));
  return out;
}

void score_rows(std::span<const float> logits, int64_t n_vocab, std::span<const int32_t> next, int top_n,
                std::vector<TokenLogprob>& out) {
  KVS_ASSERT(static_cast<int64_t>(logits.size()) >= static_cast<int64_t>(next.size()) * n_vocab);
  for (size_t r = 0; r < next.size(); ++r)
    out.push_back(score_token(logits.subspan(r * static_cast<size_t>(n_vocab), static_cast<size_t>(n_vocab)), next[r], top_n));
}

}  // namespace kvs
