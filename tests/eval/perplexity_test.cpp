// Streaming perplexity: without eviction it equals one full forward pass, whatever the chunk; with
// a budget every head is held to it after each chunk and the NLL changes.
#include <gtest/gtest.h>

#include <cmath>

#include "eval/perplexity.h"
#include "eval_test_util.h"
#include "press/registry.h"

namespace kvs::eval {
namespace {

CompressionSpec spec_for(const std::string& press) {
  CompressionSpec s;
  s.press = make_press(press);
  s.request.sinks = press_info(press).default_sinks;
  s.trigger = s.press.trigger;
  return s;
}

std::vector<int32_t> text_tokens(const Model& m, size_t n) {
  const std::string text =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her friends. "
      "One day, she saw a big red ball in the tree. She wanted to play with it, but it was too high. Lily asked her "
      "mom to help her get the ball. Her mom said yes and they got the ball together. Lily was very happy and said "
      "thank you to her mom. They played with the ball all day long and had lots of fun in the sun.";
  auto t = m.tokenizer->encode(text, true, false);
  while (t.size() < n) t.insert(t.end(), t.begin() + 1, t.end());
  t.resize(n);
  return t;
}

TEST(EvalPerplexity, NoEvictionEqualsOneForwardPass) {
  const Model& m = test::stories();
  EngineParams ep;
  ep.n_threads = 2;
  // F32 storage: chunkings of our own runs are compared at 2e-3; with F16 storage the ~1e-7 K/V
  // differences between chunkings become rounding flips (3e-3 on the portable kernels).
  ep.kv_dtype = DType::F32;
  Engine e(m, ep);
  const auto toks = text_tokens(m, 100);
  auto c = e.new_cache();
  const auto logits = e.forward(*c, toks, Logits::All);
  const int nv = m.hp.n_vocab;
  std::vector<double> ref;
  for (size_t i = 0; i + 1 < toks.size(); ++i) {
    const float* row = logits.data() + i * nv;
    double mx = row[0], z = 0;
    for (int v = 1; v < nv; ++v) mx = std::max<double>(mx, row[v]);
    for (int v = 0; v < nv; ++v) z += std::exp(row[v] - mx);
    ref.push_back(std::log(z) + mx - row[toks[i + 1]]);
  }
  for (int chunk : {1, 7, 64}) {
    SCOPED_TRACE(chunk);
    for (const char* press : {"full", "snapkv"}) {  // budget 0: the press never runs
      const auto r = streaming_perplexity(e, spec_for(press), toks, {chunk, 0});
      ASSERT_EQ(r.nll.size(), ref.size());
      for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(r.nll[i], ref[i], 2e-3) << i;
      EXPECT_EQ(r.evictions, 0);
      EXPECT_EQ(r.end_slots, r.full_slots);
    }
  }
}

TEST(EvalPerplexity, BudgetHoldsEveryHead) {
  const Model& m = test::stories();
  EngineParams ep;
  ep.n_threads = 2;
  Engine e(m, ep);
  const auto toks = text_tokens(m, 160);
  const auto full = streaming_perplexity(e, spec_for("full"), toks, {8, 0});
  const int heads = e.kv_layout().n_heads_total();
  for (const char* press : {"streaming_llm", "h2o", "snapkv", "tova", "knorm"}) {
    SCOPED_TRACE(press);
    const auto r = streaming_perplexity(e, spec_for(press), toks, {8, 32});
    EXPECT_GT(r.evictions, 0);
    EXPECT_LE(r.end_slots, static_cast<size_t>(32 * heads));
    EXPECT_LT(r.end_bytes, full.end_bytes);
    EXPECT_LT(r.peak_bytes, full.peak_bytes);
    EXPECT_EQ(r.full_slots, full.full_slots);
    EXPECT_TRUE(std::isfinite(r.mean_nll));
    // the first 32 tokens are scored before anything is evicted
    for (size_t i = 0; i < 31; ++i) EXPECT_NEAR(r.nll[i], full.nll[i], 2e-3);
    EXPECT_NE(r.mean_nll, full.mean_nll);
  }
}

}  // namespace
}  // namespace kvs::eval
