// How a sample becomes tokens: the context (prefilled and compressed before any question is
// seen) and each question (fed after it), plainly or inside the model's chat template.
//
// Plain:  context_ids = encode(context) with BOS
//         question    = query + answer_prefix, tokenized as it continues the context: the ids of
//                       encode(context + question) after the context's ids, so the model sees the
//                       ids it would see for the whole prompt as one string (what the testbed
//                       model was trained on).
// Chat:   context = template header + context; question = query + end of the user turn +
//         assistant header + answer_prefix (leading whitespace removed).
// PromptFormat::question_template replaces each task's query ("{question}" = the task's query
// without its surrounding whitespace) and answer_prefix replaces its answer prefix ("{prefix}" =
// the task's own, leading whitespace removed): `kvshrink eval --question-template/--answer-prefix`,
// for a model trained on another question format.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace kvs::eval {

struct Question {
  std::string text;           // the question as shown in results (e.g. the SQuAD question)
  std::string query;          // what follows the context, e.g. "\nWhat is the special magic ...?"
  std::string answer_prefix;  // what the answer continues, e.g. " The special magic number ... is"
  std::vector<std::string> references;
  std::string metric;                      // see metrics.h
  std::vector<std::string> extra_metrics;  // also recorded (e.g. exact_match next to token_f1)
  int max_new_tokens = 32;
  std::vector<std::string> stop;           // generation stops at the first of these (not included)
};

struct PromptFormat {
  bool chat = false;
  std::string system;  // chat only: optional system message
  std::string question_template;             // "" = each task's own query; else must hold {question}
  std::optional<std::string> answer_prefix;  // none = each task's own; may hold {prefix}
  // The query and answer prefix of `q` in this format. Throws kvs::Error if question_template
  // lacks {question}.
  std::string query(const Question& q) const;
  std::string prefix(const Question& q) const;
};

struct QuestionTokens {
  std::vector<int32_t> ids;
  bool exact = true;  // false: the whole prompt did not tokenize as context ids + question ids
};

class Prompter {
 public:
  Prompter(const Tokenizer& tok, PromptFormat f);

  std::string context_text(const std::string& context) const;
  std::string question_text(const Question& q) const;
  std::vector<int32_t> context_tokens(const std::string& context) const;
  QuestionTokens question_tokens(const std::string& context, const std::vector<int32_t>& context_ids,
                                 const Question& q) const;
  // Tokens of the whole prompt (context + question), BOS included: what generators fit.
  size_t prompt_tokens(const std::string& context, const Question& q) const;
  size_t count(const std::string& text_with_bos) const;

  const Tokenizer& tokenizer() const { return tok_; }
  const PromptFormat& format() const { return f_; }

 private:
  const Tokenizer& tok_;
  PromptFormat f_;
  std::string chat_head_, chat_tail_;  // rendered template around the user content
};

// Largest n in [lo, hi] with cost(n) <= target, for cost non-decreasing in n (binary search).
// Returns lo - 1 when even cost(lo) > target.
int64_t fit_largest(int64_t lo, int64_t hi, int64_t target, const std::function<int64_t(int64_t)>& cost);

}  // namespace kvs::eval
