// `kvshrink eval --question-template / --answer-prefix`: how a task's question is rewritten.
#include <gtest/gtest.h>

#include "core/error.h"
#include "eval/prompt.h"

namespace kvs::eval {
namespace {

Question niah_question() {
  Question q;
  q.query = "\nWhat is the special magic number for quiet-harbor mentioned in the provided text?";
  q.answer_prefix = " The special magic number for quiet-harbor mentioned in the provided text is";
  return q;
}

TEST(PromptFormat, DefaultsAreTheTasksOwn) {
  const PromptFormat f;
  const Question q = niah_question();
  EXPECT_EQ(f.query(q), q.query);
  EXPECT_EQ(f.prefix(q), q.answer_prefix);
}

TEST(PromptFormat, QuestionTemplateWrapsTheTrimmedQuery) {
  PromptFormat f;
  f.question_template = "\n\nQuestion: {question}\nAnswer:";
  const Question q = niah_question();
  EXPECT_EQ(f.query(q), "\n\nQuestion: What is the special magic number for quiet-harbor mentioned in the provided text?\nAnswer:");
  EXPECT_EQ(f.prefix(q), q.answer_prefix);  // unchanged unless given
  f.question_template = "no placeholder";
  EXPECT_THROW(f.query(q), Error);
}

TEST(PromptFormat, AnswerPrefixReplacesOrWrapsTheTasks) {
  PromptFormat f;
  const Question q = niah_question();
  f.answer_prefix = "";
  EXPECT_EQ(f.prefix(q), "");
  f.answer_prefix = " Sure. {prefix}";
  EXPECT_EQ(f.prefix(q), " Sure. The special magic number for quiet-harbor mentioned in the provided text is");
}

}  // namespace
}  // namespace kvs::eval
