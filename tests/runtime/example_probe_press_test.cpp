// The worked example of docs/adding-a-press.md (example_probe_press.h) on the real stories260K
// model: composed into a press, it compresses through the ordinary pipeline (probe and statistics
// provided by the runtime), keeps what its scores rank highest, and is refused without a probe.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "example_probe_press.h"
#include "press/budget/allocators.h"
#include "runtime/engine_probe.h"
#include "runtime/session.h"
#include "test_util.h"

namespace kvs {
namespace {

const char* kText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she "
    "saw a big, red ball. She wanted to play with it, but it was too high. Lily asked her mom to help her.";

TEST(ExampleProbePress, CompressesThroughThePipelineWithTheProbe) {
  auto model = Model::load(test::stories_gguf());
  Engine e(*model, {});
  const auto tokens = model->tokenizer->encode(kText, true, false);
  auto scorer = std::make_shared<example::MeanQueryScorer>();
  CompressionSpec spec;
  spec.press = compose("mean_query", scorer, std::make_shared<UniformAllocator>());
  spec.request.keep = 0.25;
  CompressedContext ctx(e, spec);
  ctx.prefill(tokens);
  EXPECT_NEAR(ctx.keep_measured(), 0.25, 0.01);

  // The kept slots are the top quarter of the scores computed on the uncompressed cache.
  CompressedContext full(e, [] {
    CompressionSpec s;
    s.press.name = "full";
    return s;
  }());
  full.prefill(tokens, scorer->needs());
  EngineProbe probe(e, tokens);
  CompressRequest r = spec.request;
  const Scores sc = scorer->score({full.cache(), e.attn_shape(), full.stats(), e.pool(), r, &probe, nullptr});
  const KvLayout& l = e.kv_layout();
  for (int i = 0; i < l.n_heads_total(); ++i) {
    const auto& s = sc.s[static_cast<size_t>(i)];
    std::vector<int32_t> order(s.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
    const auto& kept = ctx.cache().head(i / l.n_head_kv, i % l.n_head_kv).pos;
    const size_t n_keep = kept.size();
    // Every kept position scores at least the n_keep-th best (ties aside).
    const float threshold = s[static_cast<size_t>(order[n_keep - 1])];
    for (int32_t p : kept) EXPECT_GE(s[static_cast<size_t>(p)], threshold - 1e-7f) << "head " << i << " pos " << p;
  }

  // Without the model (a synthetic use of compress()), the press is refused.
  auto c2 = full.cache().fork();
  auto st = full.stats()->clone();
  EXPECT_THROW(compress(*c2, st.get(), spec.press, r, e.attn_shape(), e.pool()), Error);
}

}  // namespace
}  // namespace kvs
