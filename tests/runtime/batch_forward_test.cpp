// Batched forward (continuous batching): several sequences — decode steps and a prompt being
// prefilled — in shared passes give the same logits as each sequence alone, and greedy decoding
// in a batch gives the same tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "test_util.h"

namespace kvs {
namespace {

const char* kPrompts[] = {"Once upon a time, there was a little girl named Lily.",
                          "The cat sat on the mat and looked at the big red ball. It was",
                          "Tom and Sue went to the park."};

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

TEST(BatchForward, SameAsEachSequenceAlone) {
  auto model = Model::load(test::stories_gguf());
  EngineParams ep;
  ep.n_threads = 2;
  ep.n_batch = 16;  // forces packing across passes (prompts are longer than one pass)
  // F32 storage: the comparison at 1e-4 is of our own runs, whose K/V differ by ~1e-7 between
  // batchings (other rows in the pass); F16 storage turns that into rounding flips now and then
  // (2e-3 in the logits on the AVX2 table).
  ep.kv_dtype = DType::F32;
  Engine e(*model, ep);
  const Tokenizer& tok = *model->tokenizer;
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : kPrompts) prompts.push_back(tok.encode(p, true, false));

  // Alone: prefill, then 12 greedy steps each.
  std::vector<std::vector<int32_t>> alone_tokens(3);
  std::vector<std::vector<float>> alone_first(3);
  for (int s = 0; s < 3; ++s) {
    auto c = e.new_cache();
    auto logits = e.forward(*c, prompts[s], Logits::Last);
    alone_first[s] = logits;
    for (int step = 0; step < 12; ++step) {
      const int32_t next = argmax(logits);
      alone_tokens[s].push_back(next);
      logits = e.forward(*c, std::span<const int32_t>(&next, 1), Logits::Last);
    }
  }

  // Batched: sequences 0 and 1 prefill together; sequence 2 joins later while the others decode
  // (its prompt prefill is interleaved with their decode steps).
  std::vector<std::unique_ptr<KvCache>> caches;
  for (int s = 0; s < 3; ++s) caches.push_back(e.new_cache());
  std::vector<std::vector<int32_t>> got(3);
  std::vector<int32_t> last(3, -1);
  {
    std::vector<Engine::BatchItem> items{{caches[0].get(), prompts[0]}, {caches[1].get(), prompts[1]}};
    auto out = e.forward_batch(items);
    EXPECT_LT(max_diff(out[0], alone_first[0]), 1e-4);
    EXPECT_LT(max_diff(out[1], alone_first[1]), 1e-4);
    for (int s = 0; s < 2; ++s) last[s] = argmax(out[s]);
  }
  for (int step = 0; step < 40; ++step) {
    std::vector<Engine::BatchItem> items;
    std::vector<int> who;
    for (int s = 0; s < 3; ++s) {
      if (s == 2 && step < 2) continue;  // joins at step 2
      if (static_cast<int>(got[s].size()) == 12) continue;
      if (last[s] < 0) {
        items.push_back({caches[s].get(), prompts[s]});  // prefill in the same pass as the others' decode
      } else {
        got[s].push_back(last[s]);
        if (got[s].size() == 12) continue;
        items.push_back({caches[s].get(), std::span<const int32_t>(&got[s].back(), 1)});
      }
      who.push_back(s);
    }
    if (items.empty()) break;
    auto out = e.forward_batch(items);
    for (size_t k = 0; k < who.size(); ++k) {
      if (who[k] == 2 && last[2] < 0) { EXPECT_LT(max_diff(out[k], alone_first[2]), 1e-4); }
      last[who[k]] = argmax(out[k]);
    }
  }
  for (int s = 0; s < 3; ++s) EXPECT_EQ(got[s], alone_tokens[s]) << "sequence " << s;
  for (int s = 0; s < 3; ++s)
    EXPECT_EQ(caches[s]->n_past(), static_cast<int32_t>(prompts[s].size() + 11)) << "sequence " << s;
}

// forward_batch_spans leaves the logits in the engine: each item's are its logits alone, also for
// an item finished in an earlier pass of a batch wider than n_batch rows (its row is copied aside
// before the next pass overwrites the pass's logits), empty for an item that did not ask for them,
// and forward_batch returns the same vectors.
TEST(BatchForward, SpansHoldEachItemsLogits) {
  auto model = Model::load(test::stories_gguf());
  EngineParams ep;
  ep.n_threads = 2;
  ep.n_batch = 20;
  ep.kv_dtype = DType::F32;  // as SameAsEachSequenceAlone: 1e-4 between batchings
  Engine e(*model, ep);
  const Tokenizer& tok = *model->tokenizer;
  std::vector<std::vector<int32_t>> prompts;
  for (const char* p : kPrompts) prompts.push_back(tok.encode(p, true, false));
  ASSERT_LT(prompts[0].size(), 20u);  // item 0 ends in the first pass, item 1 runs on into the second
  ASSERT_GT(prompts[0].size() + prompts[1].size(), 20u);
  std::vector<std::vector<float>> alone(3);
  for (int s = 0; s < 3; ++s) {
    auto c = e.new_cache();
    alone[s] = e.forward(*c, prompts[s], Logits::Last);
  }
  std::vector<std::unique_ptr<KvCache>> a, b;
  for (int s = 0; s < 3; ++s) {
    a.push_back(e.new_cache());
    b.push_back(e.new_cache());
  }
  auto items_of = [&](std::vector<std::unique_ptr<KvCache>>& c) {
    std::vector<Engine::BatchItem> it{{c[0].get(), prompts[0]}, {c[1].get(), prompts[1]}, {c[2].get(), prompts[2]}};
    it[2].want_logits = false;
    return it;
  };
  const auto got = e.forward_batch_spans(items_of(b));
  ASSERT_EQ(got.size(), 3u);
  for (int s = 0; s < 2; ++s)
    EXPECT_LT(max_diff(std::vector<float>(got[s].begin(), got[s].end()), alone[s]), 1e-4) << "item " << s;
  EXPECT_TRUE(got[2].empty());
  const auto vec = e.forward_batch(items_of(a));
  for (int s = 0; s < 2; ++s) EXPECT_LT(max_diff(vec[s], alone[s]), 1e-4) << "item " << s;
  EXPECT_TRUE(vec[2].empty());
  // One pass (a decode step of each): the spans point at the pass's rows.
  const int32_t next[3] = {argmax(alone[0]), argmax(alone[1]), argmax(alone[2])};
  std::vector<Engine::BatchItem> da, db;
  for (int s = 0; s < 3; ++s) {
    da.push_back({a[s].get(), std::span<const int32_t>(&next[s], 1)});
    db.push_back({b[s].get(), std::span<const int32_t>(&next[s], 1)});
  }
  const auto want1 = e.forward_batch(da);
  const auto got1 = e.forward_batch_spans(db);
  for (int s = 0; s < 3; ++s)
    EXPECT_LT(max_diff(std::vector<float>(got1[s].begin(), got1[s].end()), want1[s]), 1e-4) << "item " << s;
  e.trim_batch_logits();
}

TEST(BatchForward, RefusesTheSameSequenceTwiceAndBadTokens) {
  auto model = Model::load(test::stories_gguf());
  Engine e(*model, {});
  auto c = e.new_cache();
  const std::vector<int32_t> t{1, 2};
  std::vector<Engine::BatchItem> twice{{c.get(), t}, {c.get(), t}};
  EXPECT_THROW(e.forward_batch(twice), Error);
  const std::vector<int32_t> bad{1, 99999};
  std::vector<Engine::BatchItem> b{{c.get(), bad}};
  EXPECT_THROW(e.forward_batch(b), Error);
  EXPECT_EQ(c->n_past(), 0);
}

}  // namespace
}  // namespace kvs
