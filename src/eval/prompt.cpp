#include "eval/prompt.h"

#include "core/error.h"
#include "eval/text_util.h"
#include "runtime/chat_parts.h"

namespace kvs::eval {

Prompter::Prompter(const Tokenizer& tok, PromptFormat f) : tok_(tok), f_(std::move(f)) {
  if (!f_.chat) return;
  const ChatParts parts = split_chat_template(tok_, f_.system);
  chat_head_ = parts.head;
  chat_tail_ = parts.tail;
}

std::string Prompter::context_text(const std::string& context) const {
  return f_.chat ? chat_head_ + context : context;
}

std::string Prompter::question_text(const Question& q) const {
  if (!f_.chat) return q.query + q.answer_prefix;
  return q.query + chat_tail_ + ltrim(q.answer_prefix);
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
