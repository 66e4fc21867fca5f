#include "server/logprobs_json.h"

namespace kvs::server {

namespace {

nlohmann::json bytes_of(const std::string& s) {
  nlohmann::json b = nlohmann::json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

}  // namespace

void CompletionLogprobs::push(const std::string& text, const TokenLogprob* lp) {
  tokens_.push_back(text);
  offsets_.push_back(offset_);
  offset_ += text.size();
  if (!lp) {
    logprobs_.push_back(nullptr);
    top_.push_back(nullptr);
    return;
  }
  logprobs_.push_back(lp->logprob);
  nlohmann::json top = nlohmann::json::object();
  // Two tokens with the same text keep the likelier (the object's keys are texts).
  for (const auto& [t, v] : lp->top) {
    const std::string key = tok_.token_bytes(t);
    if (!top.contains(key)) top[key] = v;
  }
  top_.push_back(std::move(top));
}

void CompletionLogprobs::add_prompt(std::span<const int32_t> tokens, std::span<const TokenLogprob> lp) {
  for (size_t i = 0; i < tokens.size(); ++i)
    push(tok_.token_bytes(tokens[i]), i > 0 && i - 1 < lp.size() ? &lp[i - 1] : nullptr);
}

void CompletionLogprobs::add(std::span<const TokenLogprob> lp) {
  for (const TokenLogprob& e : lp) push(tok_.is_eog(e.token) ? std::string() : tok_.token_bytes(e.token), &e);
}

nlohmann::json CompletionLogprobs::json() const {
  return {{"tokens", tokens_}, {"token_logprobs", logprobs_}, {"top_logprobs", top_}, {"text_offset", offsets_}};
}

void CompletionLogprobs::clear() {
  tokens_ = nlohmann::json::array();
  logprobs_ = nlohmann::json::array();
  top_ = nlohmann::json::array();
  offsets_ = nlohmann::json::array();
}

nlohmann::json chat_logprob_content(const Tokenizer& tok, std::span<const TokenLogprob> lp) {
  nlohmann::json out = nlohmann::json::array();
  for (const TokenLogprob& e : lp) {
    const std::string text = tok.is_eog(e.token) ? std::string() : tok.token_bytes(e.token);
    nlohmann::json top = nlohmann::json::array();
    for (const auto& [t, v] : e.top) {
      const std::string s = tok.token_bytes(t);
      top.push_back({{"token", s}, {"logprob", v}, {"bytes", bytes_of(s)}});
    }
    out.push_back({{"token", text}, {"logprob", e.logprob}, {"bytes", bytes_of(text)}, {"top_logprobs", top}});
  }
  return out;
}

}  // namespace kvs::server
