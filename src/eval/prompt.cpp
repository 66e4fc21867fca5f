#include "eval/prompt.h"

#include "core/error.h"
#include "eval/text_util.h"
#include "runtime/chat_parts.h"

namespace kvs::eval {

namespace {
std::string trim_ws(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}
// `t` with every `key` replaced by `value`.
std::string fill_in(std::string t, const std::string& key, const std::string& value) {
  for (size_t p = 0; (p = t.find(key, p)) != std::string::npos; p += value.size()) t.replace(p, key.size(), value);
  return t;
}
}  // namespace

std::string PromptFormat::query(const Question& q) const {
  if (question_template.empty()) return q.query;
  if (question_template.find("{question}") == std::string::npos)
    fail("--question-template must contain {{question}}, got '{}'", question_template);
  return fill_in(question_template, "{question}", trim_ws(q.query));
}

std::string PromptFormat::prefix(const Question& q) const {
  if (!answer_prefix) return q.answer_prefix;
  return fill_in(*answer_prefix, "{prefix}", ltrim(q.answer_prefix));
}

Prompter::Prompter(const Tokenizer& tok, PromptFormat f) : tok_(tok), f_(std::move(f)) {
  if (!f_.question_template.empty() && f_.question_template.find("{question}") == std::string::npos)
    fail("--question-template must contain {{question}}, got '{}'", f_.question_template);
  if (!f_.chat) return;
  const ChatParts parts = split_chat_template(tok_, f_.system);
  chat_head_ = parts.head;
  chat_tail_ = parts.tail;
}

std::string Prompter::context_text(const std::string& context) const {
  return f_.chat ? chat_head_ + context : context;
}

std::string Prompter::question_text(const Question& q) const {
  if (!f_.chat) return f_.query(q) + f_.prefix(q);
  return f_.query(q) + chat_tail_ + ltrim(f_.prefix(q));
}

size_t Prompter::count(const std::string& text) const { return tok_.encode(text, true, f_.chat).size(); }

std::vector<int32_t> Prompter::context_tokens(const std::string& context) const {
  return tok_.encode(context_text(context), true, f_.chat);
}

QuestionTokens Prompter::question_tokens(const std::string& context, const std::vector<int32_t>& ctx,
                                         const Question& q) const {
  const std::string qt = question_text(q);
  if (qt.empty()) fail("empty question");
  const auto all = tok_.encode(context_text(context) + qt, true, f_.chat);
  QuestionTokens r;
  if (all.size() > ctx.size() && std::equal(ctx.begin(), ctx.end(), all.begin())) {
    r.ids.assign(all.begin() + static_cast<std::ptrdiff_t>(ctx.size()), all.end());
    return r;
  }
  // The last context token merged with the question's first characters: tokenize apart.
  r.exact = false;
  r.ids = tok_.encode(qt, false, f_.chat);
  return r;
}

size_t Prompter::prompt_tokens(const std::string& context, const Question& q) const {
  return count(context_text(context) + question_text(q));
}

int64_t fit_largest(int64_t lo, int64_t hi, int64_t target, const std::function<int64_t(int64_t)>& cost) {
  if (hi < lo || cost(lo) > target) return lo - 1;
  // invariant: cost(lo) <= target; answer in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (cost(mid) <= target)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

}  // namespace kvs::eval
