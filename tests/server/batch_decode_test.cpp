// Continuous batching gives the same tokens as each sequence alone (greedy): contexts built step
// by step (ContextBuilder, prompt chunks interleaved with other sequences' decode steps) and
// answers generated step by step (AnswerStepper) in shared batch_step() passes produce what
// CompressedContext::prefill + ask produce one sequence at a time, for presses that compress once
// and presses that keep evicting while decoding.
#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "runtime/answer_stepper.h"
#include "runtime/batch_step.h"
#include "runtime/context_builder.h"
#include "runtime/session.h"
#include "server_test_util.h"

namespace kvs {
namespace {

const char* kContexts[] = {
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
    "friends. One day, she saw a big red ball under a tree. She wanted to play with it, but it was too high.",
    "Tom had a dog named Max. Max liked to run and jump in the garden. Every morning Tom gave Max a bone and "
    "they went for a walk to the pond, where the ducks were swimming.",
    "The sun was shining and the birds were singing. Sam and his mom went to the store to buy some apples. "
    "Sam saw a toy car and asked his mom if he could have it."};
const char* kQuestions[] = {" Then Lily", " Max saw", " His mom said"};

CompressionSpec spec_for(const std::string& press, std::optional<double> keep) {
  SpecArgs a;
  a.press = press;
  a.keep = keep;
  return make_compression_spec(a);
}

struct Case {
  std::string press;
  std::optional<double> keep;
};

class BatchDecode : public test::StoriesModelSuite {};

// sampler: greedy by default; with a temperature, the batched answers must make the same draws as
// each alone (batch_step samples every sequence in parallel before the after_steps: one draw
// each, from the sequence's own sampler).
void check_case(Engine& e, const Case& c, const SamplerParams& sampler = {}) {
  SCOPED_TRACE(c.press + (sampler.temp > 0 ? " sampled" : ""));
  const Tokenizer& tok = *e.model().tokenizer;
  const CompressionSpec spec = spec_for(c.press, c.keep);
  AnswerOptions ao;
  ao.max_new_tokens = 20;
  ao.stop_at_eog = false;
  ao.sampler = sampler;
  std::vector<std::vector<int32_t>> ctx_tok, q_tok;
  for (int i = 0; i < 3; ++i) {
    ctx_tok.push_back(tok.encode(kContexts[i], true, false));
    q_tok.push_back(tok.encode(kQuestions[i], false, false));
  }
  // Each alone: the one-sequence pipeline.
  std::vector<Answer> alone;
  std::vector<size_t> alone_slots;
  for (int i = 0; i < 3; ++i) {
    CompressedContext ctx(e, spec);
    ctx.prefill(ctx_tok[i]);
    alone_slots.push_back(ctx.cache().total_slots());
    alone.push_back(ctx.ask(q_tok[i], ao));
  }
  // Together: contexts 0 and 1 are built in 16-token chunks of a shared budget; each answer starts
  // as soon as its context is ready while the others still prefill; context 2 joins at step 4.
  std::vector<std::unique_ptr<ContextBuilder>> builders(3);
  std::vector<std::shared_ptr<const BuiltContext>> built(3);
  std::vector<std::unique_ptr<AnswerStepper>> answers(3);
  builders[0] = std::make_unique<ContextBuilder>(e, spec, ctx_tok[0]);
  builders[1] = std::make_unique<ContextBuilder>(e, spec, ctx_tok[1]);
  int steps = 0, max_batch = 0;
  bool mixed = false;  // some step fed prefill rows and decode rows together
  for (; steps < 1000; ++steps) {
    if (steps == 4) builders[2] = std::make_unique<ContextBuilder>(e, spec, ctx_tok[2]);
    std::vector<Stepper*> live;
    for (int i = 0; i < 3; ++i) {
      if (builders[i] && builders[i]->phase() == Stepper::Phase::Done && !built[i]) {
        built[i] = std::make_shared<const BuiltContext>(builders[i]->take());
        EXPECT_EQ(built[i]->seq.cache->total_slots(), alone_slots[i]) << "context " << i;
        answers[i] = std::make_unique<AnswerStepper>(e, built[i]->seq.fork(), spec, q_tok[i], ao, built[i]);
      }
      if (answers[i] && answers[i]->phase() != Stepper::Phase::Done) live.push_back(answers[i].get());
      else if (builders[i] && !built[i]) live.push_back(builders[i].get());
    }
    if (live.empty()) break;
    std::vector<StepFailure> failed;
    const StepStats st = batch_step(e, live, 16, failed);
    ASSERT_TRUE(failed.empty()) << failed[0].message;
    max_batch = std::max(max_batch, st.sequences);
    mixed = mixed || (st.decode_rows > 0 && st.prefill_rows > 0);
  }
  EXPECT_TRUE(mixed) << "no step interleaved a prefill chunk with decode steps";
  EXPECT_EQ(max_batch, 3);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(answers[i]) << "sequence " << i;
    EXPECT_EQ(answers[i]->tokens(), alone[i].tokens) << "sequence " << i;
    EXPECT_EQ(answers[i]->text(), alone[i].text) << "sequence " << i;
    EXPECT_EQ(answers[i]->decode_budget(), alone[i].decode_budget) << "sequence " << i;
    EXPECT_EQ(answers[i]->sequence().cache->max_len(), alone[i].max_head_len_end) << "sequence " << i;
    // An answer that cannot compress drops the statistics it was forked with (nothing reads them,
    // and collecting them cost every step); one that can keeps them. The tokens above are the
    // same either way.
    if (AnswerStepper::compresses_while_answering(spec))
      EXPECT_EQ(answers[i]->sequence().stats != nullptr, built[i]->seq.stats != nullptr) << "sequence " << i;
    else
      EXPECT_EQ(answers[i]->sequence().stats, nullptr) << "sequence " << i;
  }
}

TEST_F(BatchDecode, SameTokensAsEachSequenceAlone) {
  EngineParams ep;
  ep.n_threads = 2;
  Engine e(*model_, ep);
  // Compress once after prefill (snapkv, knorm), evict while decoding (h2o: every step;
  // streaming_llm), and no compression.
  for (const Case& c : {Case{"full", 1.0}, Case{"snapkv", 0.5}, Case{"knorm", 0.5}, Case{"h2o", 0.5},
                        Case{"streaming_llm", 0.5}})
    check_case(e, c);
  SamplerParams hot;
  hot.temp = 1.5f;  // far from greedy: the draws differ from the argmax, so each one counts
  hot.top_k = 0;
  hot.top_p = 1.0f;
  hot.seed = 11;
  for (const Case& c : {Case{"snapkv", 0.5}, Case{"h2o", 0.5}}) check_case(e, c, hot);
  // Which of them compress while answering (and so keep their statistics): h2o's every-step
  // eviction, not the presses that compress once after prefill, not `full`.
  EXPECT_TRUE(AnswerStepper::compresses_while_answering(spec_for("h2o", 0.5)));
  EXPECT_FALSE(AnswerStepper::compresses_while_answering(spec_for("snapkv", 0.5)));
  EXPECT_FALSE(AnswerStepper::compresses_while_answering(spec_for("knorm", 0.5)));
  EXPECT_FALSE(AnswerStepper::compresses_while_answering(spec_for("full", 1.0)));
  EXPECT_TRUE(spec_for("h2o", 0.5).press.needs().stats.any());  // so the kept statistics are checked
  EXPECT_EQ(e.page_pool().pages_in_use(), 0u);  // every sequence gave its pages back
}

TEST_F(BatchDecode, CompressedPromptAsGenerate) {
  // A fresh prompt with compression (the server's plain request with kv_compression): all but its
  // last token compressed, the last token fed on the compressed cache — as `kvshrink generate`.
  EngineParams ep;
  ep.n_threads = 2;
  Engine e(*model_, ep);
  const Tokenizer& tok = *model_->tokenizer;
  const CompressionSpec spec = spec_for("snapkv", 0.5);
  std::vector<int32_t> ids = tok.encode(kContexts[0], true, false);
  AnswerOptions ao;
  ao.max_new_tokens = 16;
  ao.stop = {"."};
  CompressedContext ctx(e, spec);
  ctx.prefill(std::span<const int32_t>(ids).first(ids.size() - 1));
  const Answer want = ctx.ask(std::span<const int32_t>(ids).last(1), ao);

  ContextBuilder b(e, spec, std::vector<int32_t>(ids.begin(), ids.end() - 1));
  std::vector<StepFailure> failed;
  while (b.phase() != Stepper::Phase::Done) {
    Stepper* s = &b;
    batch_step(e, std::span<Stepper* const>(&s, 1), 7, failed);
  }
  BuiltContext bc = b.take();
  Sequence seq = std::move(bc.seq);
  auto src = std::make_shared<const BuiltContext>(std::move(bc));
  AnswerStepper a(e, std::move(seq), spec, {ids.back()}, ao, src);
  while (a.phase() != Stepper::Phase::Done) {
    Stepper* s = &a;
    batch_step(e, std::span<Stepper* const>(&s, 1), 7, failed);
  }
  ASSERT_TRUE(failed.empty());
  EXPECT_EQ(a.tokens(), want.tokens);
  EXPECT_EQ(a.text(), want.text);
  EXPECT_EQ(a.finish_reason(), want.tokens.size() < 16 ? FinishReason::Stop : FinishReason::Length);
}

TEST_F(BatchDecode, PoolCapFailsOnlyTheSequenceThatDoesNotFit) {
  // Under a cap that holds one sequence but not two, the step that cannot be planned is retried
  // item by item: one sequence advances, the other is reported and left unchanged.
  const Tokenizer& tok = *model_->tokenizer;
  std::vector<int32_t> ids = tok.encode(kContexts[0], true, false);
  EngineParams probe_p;
  probe_p.n_threads = 2;
  Engine probe(*model_, probe_p);
  const size_t one = full_context_bytes(probe.kv_layout(), static_cast<int64_t>(ids.size()) + 1);
  EngineParams ep = probe_p;
  ep.kv_max_bytes = one + one / 2;
  Engine e(*model_, ep);
  AnswerOptions ao;
  ao.max_new_tokens = 2;
  AnswerStepper a(e, Sequence{}, spec_for("full", 1.0), ids, ao);
  AnswerStepper b(e, Sequence{}, spec_for("full", 1.0), ids, ao);
  std::vector<Stepper*> both{&a, &b};
  std::vector<StepFailure> failed;
  batch_step(e, both, 1024, failed);
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_TRUE(failed[0].out_of_memory) << failed[0].message;
  EXPECT_EQ(failed[0].who, &b);
  EXPECT_EQ(a.phase(), Stepper::Phase::Decode);
  EXPECT_EQ(b.sequence().cache->n_past(), 0);
  EXPECT_LE(e.page_pool().bytes_in_use(), ep.kv_max_bytes);
}

}  // namespace
}  // namespace kvs
