// Log-probabilities of tokens under a row of logits (what OpenAI's `logprobs` report): the
// model's own distribution, log softmax of the raw logits, before temperature, filters, biases
// and penalties (vLLM's default, "raw_logprobs").
#pragma once
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace kvs {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;                         // log softmax(logits)[token]
  std::vector<std::pair<int32_t, float>> top;   // the most likely tokens, most likely first (lowest id on ties)
};

// `token`'s log-probability under `logits` and the `top_n` most likely tokens (0: none). The
// token's value and the top list's values are computed by the same expression: the token equals
// its top-1 entry exactly when it is the argmax (lm-eval's is_greedy compares them with !=).
TokenLogprob score_token(std::span<const float> logits, int32_t token, int top_n);

// Rows of logits [rows][n_vocab] scoring next[r] with row r.
void score_rows(std::span<const float> logits, int64_t n_vocab, std::span<const int32_t> next, int top_n,
                std::vector<TokenLogprob>& out);

}  // namespace kvs
