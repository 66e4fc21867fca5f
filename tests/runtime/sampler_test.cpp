// Token sampling against the distribution its filters define, computed here by brute force (every
// candidate sorted by probability, lowest id first on ties; top-k, min-p, top-p applied to that
// list as their definitions say; renormalised), not with the sampler's code: the tokens drawn must
// lie in the kept set and their frequencies must match the reference probabilities.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <random>
#include <tuple>
#include <vector>

#include "runtime/sampler.h"

namespace kvs {
namespace {

// Probability of each token under temperature + filters, by brute force (double precision).
std::vector<double> reference(const std::vector<float>& logits, const SamplerParams& p) {
  const size_t n = logits.size();
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<double>(logits[i]) / p.temp;
  std::vector<int32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  size_t k = p.top_k > 0 ? std::min(n, static_cast<size_t>(p.top_k)) : n;
  order.resize(k);
  const double mx = v[order[0]];
  double sum = 0;
  for (int32_t i : order) sum += std::exp(v[i] - mx);
  size_t keep = k;
  if (p.min_p > 0) {
    keep = 0;
    while (keep < k && std::exp(v[order[keep]] - mx) >= p.min_p) ++keep;
  }
  if (p.top_p < 1) {
    double cum = 0;
    size_t i = 0;
    while (i < keep) {
      cum += std::exp(v[order[i]] - mx) / sum;
      ++i;
      if (cum >= p.top_p) break;
    }
    keep = i;
  }
  std::vector<double> prob(n, 0.0);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += std::exp(v[order[i]] - mx);
  for (size_t i = 0; i < keep; ++i) prob[order[i]] = std::exp(v[order[i]] - mx) / total;
  return prob;
}

// Draws `draws` tokens and compares the counts with the reference: no token outside the kept set,
// every frequency within 5 standard deviations (+ 3 counts) of its probability.
void check(const std::vector<float>& logits, SamplerParams p, int draws, const char* what) {
  const std::vector<double> ref = reference(logits, p);
  Sampler s(p);
  std::vector<int> count(logits.size(), 0);
  for (int d = 0; d < draws; ++d) {
    const int32_t t = s.sample(logits);
    ASSERT_GE(t, 0);
    ASSERT_LT(static_cast<size_t>(t), logits.size());
    ASSERT_GT(ref[t], 0.0) << what << ": token " << t << " is outside the kept set";
    ++count[t];
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    const double mean = ref[i] * draws, sd = std::sqrt(draws * ref[i] * (1 - ref[i]));
    EXPECT_LE(std::fabs(count[i] - mean), 5 * sd + 3) << what << ": token " << i << " drawn " << count[i]
                                                     << " times, expected " << mean;
  }
}

std::vector<float> random_logits(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng);
  return x;
}

SamplerParams params(float temp, int top_k, float top_p, float min_p) {
  SamplerParams p;
  p.temp = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = 11;
  return p;
}

}  // namespace

TEST(Sampler, MatchesTheFilteredDistribution) {
  // A peaked distribution over 300 tokens (a few hold most of the mass), and a flat one.
  const std::vector<float> peaked = random_logits(300, 2.5f, 1), flat = random_logits(300, 0.3f, 2);
  check(peaked, params(1.0f, 0, 1.0f, 0.0f), 40000, "temperature only");
  check(peaked, params(0.6f, 0, 1.0f, 0.0f), 40000, "temperature 0.6");
  check(peaked, params(1.0f, 20, 1.0f, 0.0f), 40000, "top-k 20");
  check(peaked, params(1.0f, 0, 0.8f, 0.0f), 40000, "top-p 0.8");
  check(flat, params(1.0f, 0, 0.9f, 0.0f), 40000, "top-p 0.9 of a flat distribution (past the first sorted block)");
  check(peaked, params(1.0f, 0, 1.0f, 0.05f), 40000, "min-p 0.05");
  check(peaked, params(1.3f, 50, 0.9f, 0.02f), 40000, "top-k, min-p and top-p together");
}

TEST(Sampler, TiesAreBrokenByTheLowestId) {
  // Ten tokens share the top logit: top-k 4 keeps tokens 3, 5, 7, 9 (the lowest ids of the tie).
  std::vector<float> logits(40, 0.0f);
  for (int i = 3; i < 40; i += 2) logits[i] = 5.0f;
  check(logits, params(1.0f, 4, 1.0f, 0.0f), 20000, "top-k inside a tie");
  const std::vector<double> ref = reference(logits, params(1.0f, 4, 1.0f, 0.0f));
  for (int i : {3, 5, 7, 9}) EXPECT_NEAR(ref[i], 0.25, 1e-12);
  // top-p 0.3 of 19 equal tokens and 21 small ones: the prefix stops inside the tie.
  check(logits, params(1.0f, 0, 0.3f, 0.0f), 20000, "top-p inside a tie");
}

TEST(Sampler, SameSeedSameTokensAndGreedyIsArgmax) {
  const std::vector<float> logits = random_logits(5000, 2.0f, 3);
  for (const SamplerParams& p : {params(1.0f, 0, 1.0f, 0.0f), params(0.8f, 40, 0.95f, 0.0f), params(1.0f, 0, 0.9f, 0.1f)}) {
    Sampler a(p), b(p);
    for (int i = 0; i < 200; ++i) ASSERT_EQ(a.sample(logits), b.sample(logits));
  }
  Sampler greedy(params(0.0f, 0, 1.0f, 0.0f));
  EXPECT_EQ(greedy.sample(logits), argmax(logits));
  // One candidate left by the filters: always that token (top-k 1; min-p just below 1, which only
  // the best token's probability reaches).
  Sampler one(params(1.0f, 1, 1.0f, 0.0f)), one_min_p(params(1.0f, 0, 1.0f, 0.9999999f));
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(one.sample(logits), argmax(logits));
    EXPECT_EQ(one_min_p.sample(logits), argmax(logits));
  }
}

namespace {

// The adjustments as their definitions say (OpenAI's logit_bias; vLLM's penalties: repetition over
// the prompt and the generated tokens, CTRL's divide-positive / multiply-negative; then frequency
// times the count and presence once, over the generated tokens), written here independently.
std::vector<float> ref_adjust(std::vector<float> x, const SamplerParams& p, const std::vector<int32_t>& prompt,
                              const std::vector<int32_t>& generated) {
  for (const auto& [t, b] : p.logit_bias) x[t] = b <= -100.0f ? -std::numeric_limits<float>::infinity() : x[t] + b;
  std::set<int32_t> seen(prompt.begin(), prompt.end());
  std::map<int32_t, int> count;
  for (int32_t t : generated) {
    seen.insert(t);
    ++count[t];
  }
  for (int32_t t : seen) x[t] = x[t] > 0 ? x[t] / p.repetition_penalty : x[t] * p.repetition_penalty;
  for (const auto& [t, c] : count) x[t] -= p.frequency_penalty * c + p.presence_penalty;
  return x;
}

int32_t ref_argmax(const std::vector<float>& x) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(x.size()); ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

}  // namespace

TEST(SamplerPenalties, GreedyFollowsThePenalisedArgmax) {
  // The same logits every step: without penalties greedy repeats one token; with them each step's
  // token is the argmax of the reference's adjusted logits given the history so far.
  const std::vector<float> logits = random_logits(200, 1.5f, 21);
  const std::vector<int32_t> prompt = {ref_argmax(logits), 3, 7, 11};
  for (const auto& [presence, frequency, repetition] :
       std::vector<std::tuple<float, float, float>>{{0.8f, 0.0f, 1.0f}, {0.0f, 0.5f, 1.0f}, {0.3f, 0.2f, 1.0f},
                                                   {0.0f, 0.0f, 1.7f}, {0.2f, 0.3f, 1.3f}, {-0.5f, 0.0f, 1.0f}}) {
    SamplerParams p = params(0.0f, 0, 1.0f, 0.0f);
    p.presence_penalty = presence;
    p.frequency_penalty = frequency;
    p.repetition_penalty = repetition;
    Sampler s(p);
    s.set_prompt(prompt);
    std::vector<int32_t> generated;
    std::set<int32_t> distinct;
    for (int step = 0; step < 40; ++step) {
      const int32_t want = ref_argmax(ref_adjust(logits, p, prompt, generated));
      const int32_t got = s.sample(logits);
      ASSERT_EQ(got, want) << "presence " << presence << " frequency " << frequency << " repetition " << repetition
                           << " step " << step;
      s.accept(got);
      generated.push_back(got);
      distinct.insert(got);
    }
    if (presence > 0 || frequency > 0) EXPECT_GT(distinct.size(), 1u) << "penalties must move greedy off one token";
    if (presence < 0) EXPECT_EQ(distinct.size(), 1u) << "a negative presence penalty rewards repeating";
  }
}

TEST(SamplerPenalties, SampledDistributionIsTheAdjustedOne) {
  // Temperature sampling draws from softmax(adjusted / temp): frequencies against the reference's
  // probabilities of the adjusted logits (the filters' reference above, applied to them).
  const std::vector<float> logits = random_logits(120, 2.0f, 22);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> generated = {5, 5, 9, 9, 9, 40};
  SamplerParams p = params(0.9f, 0, 0.95f, 0.0f);
  p.presence_penalty = 0.4f;
  p.frequency_penalty = 0.3f;
  p.repetition_penalty = 1.4f;
  p.logit_bias = {{ref_argmax(logits), -100.0f}, {17, 2.5f}, {18, -1.5f}};
  const std::vector<float> adj = ref_adjust(logits, p, prompt, generated);
  SamplerParams plain = p;  // the filters alone, over the adjusted logits
  plain.presence_penalty = plain.frequency_penalty = 0.0f;
  plain.repetition_penalty = 1.0f;
  plain.logit_bias.clear();
  const std::vector<double> ref = reference(adj, plain);
  EXPECT_EQ(ref[ref_argmax(logits)], 0.0);
  Sampler s(p);
  s.set_prompt(prompt);
  for (int32_t t : generated) s.accept(t);
  const int draws = 40000;
  std::vector<int> count(logits.size(), 0);
  for (int d = 0; d < draws; ++d) {
    const int32_t t = s.sample(logits);
    ASSERT_GT(ref[t], 0.0) << "token " << t << " is outside the kept set (or banned)";
    ++count[t];
  }
  for (size_t i = 0; i < logits.size(); ++i) {
    const double mean = ref[i] * draws, sd = std::sqrt(draws * ref[i] * (1 - ref[i]));
    EXPECT_LE(std::fabs(count[i] - mean), 5 * sd + 3) << "token " << i;
  }
}

TEST(SamplerPenalties, LogitBiasBansAndFavours) {
  const std::vector<float> logits = random_logits(300, 3.0f, 23);
  const int32_t best = ref_argmax(logits);
  SamplerParams p = params(1.0f, 0, 1.0f, 0.0f);
  p.logit_bias = {{best, -100.0f}};
  Sampler s(p);
  for (int i = 0; i < 5000; ++i) ASSERT_NE(s.sample(logits), best);
  SamplerParams g = params(0.0f, 0, 1.0f, 0.0f);
  g.logit_bias = {{best, -100.0f}};
  std::vector<float> without = logits;
  without[best] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(Sampler(g).sample(logits), ref_argmax(without));
  // A +100 bias makes any token the greedy choice; bias on ids past the vocabulary is ignored.
  g.logit_bias = {{42, 100.0f}, {100000, 5.0f}};
  EXPECT_EQ(Sampler(g).sample(logits), 42);
}

}  // namespace kvs
