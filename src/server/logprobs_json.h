// Log-probabilities in OpenAI's two response shapes: the legacy completions object
// (choices[].logprobs = {tokens, token_logprobs, top_logprobs, text_offset}; with echo the prompt's
// tokens come first, the first of them with null: nothing predicts it) and chat's
// (choices[].logprobs = {content: [{token, logprob, bytes, top_logprobs: [...]}], refusal}).
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>

#include "model/tokenizer/tokenizer.h"
#include "runtime/token_logprobs.h"

namespace kvs::server {

// Builds the legacy object in pieces (a streamed answer sends one piece per chunk). Offsets are
// byte offsets into the choice's text, counted from `offset`.
class CompletionLogprobs {
 public:
  CompletionLogprobs(const Tokenizer& tok, size_t offset = 0) : tok_(tok), offset_(offset) {}
  // The prompt: token 0 unscored (null), then lp[k] scoring tokens[k + 1].
  void add_prompt(std::span<const int32_t> tokens, std::span<const TokenLogprob> lp);
  void add(std::span<const TokenLogprob> lp);
  // Sets where the next token's text starts (after an echoed prompt: its text's length).
  void set_offset(size_t offset) { offset_ = offset; }
  // The object so far; clear() starts the next piece (the offsets run on).
  nlohmann::json json() const;
  void clear();
  bool empty() const { return tokens_.empty(); }

 private:
  void push(const std::string& text, const TokenLogprob* lp);
  const Tokenizer& tok_;
  size_t offset_;
  nlohmann::json tokens_ = nlohmann::json::array(), logprobs_ = nlohmann::json::array(),
                 top_ = nlohmann::json::array(), offsets_ = nlohmann::json::array();
};

// Chat's `content` entries of these tokens.
nlohmann::json chat_logprob_content(const Tokenizer& tok, std::span<const TokenLogprob> lp);

}  // namespace kvs::server
