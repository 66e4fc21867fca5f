// Sliding-window layers in the cache (issue 26): a local layer keeps at most its window plus the
// pages in use, whatever the context, while global layers keep every token; presses compress the
// global layers only (Gemma 2) and leave the window's layers as the window left them; a model whose
// every layer slides (Phi-3) is still compressed. The logits with the bounded cache are checked
// against an independent torch forward past the window in tests/model/arch_reference.py (decode
// steps there run on a cache that has dropped pages).
#include <gtest/gtest.h>

#include <cmath>

#include "kvcache/cache_file.h"
#include "model/presets.h"
#include "model/random_model.h"
#include "runtime/answer_stepper.h"
#include "runtime/batch_step.h"
#include "runtime/compression_spec.h"
#include "runtime/context_builder.h"
#include "runtime/engine.h"
#include "runtime/session.h"
#include "test_util.h"

namespace kvs {
namespace {

std::unique_ptr<Model> tiny_model(const std::string& shape, test::TempDir& dir) {
  const auto& p = shape_preset(shape);
  write_random_gguf(p.hp, synthetic_spm_vocab(p.hp.n_vocab), DType::F32, 5, shape, dir / (shape + ".gguf"));
  return Model::load(dir / (shape + ".gguf"));
}

std::vector<int32_t> ids(int n) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = 3 + (i * 37) % 300;
  return v;
}

TEST(SlidingWindowCache, LocalLayersHoldTheirWindowWhateverTheContext) {
  test::TempDir dir("swa_cache");
  auto m = tiny_model("tiny-gemma2", dir);  // window 48 on layers 0 and 2; layers 1 and 3 global
  const HParams& hp = m->hp;
  ASSERT_EQ(hp.n_swa, 48);
  EngineParams ep;
  ep.n_batch = 40;
  ep.page_tokens = 16;
  Engine e(*m, ep);
  auto c = e.new_cache();
  const std::vector<int32_t> prompt = ids(700);
  for (size_t b = 0; b < prompt.size(); b += 40)
    e.forward(*c, std::span<const int32_t>(prompt).subspan(b, std::min<size_t>(40, prompt.size() - b)), Logits::None);
  // Bound: the window (48) + one chunk (40) + one page (16), in whole pages.
  const int32_t bound = (48 + 40 + 16 + 15) / 16 * 16;
  for (int il = 0; il < hp.n_layer; ++il)
    for (int kvh = 0; kvh < hp.n_head_kv; ++kvh) {
      const HeadCache& h = c->head(il, kvh);
      if (hp.layer_slides(il)) {
        EXPECT_LE(h.len(), bound) << "layer " << il;
        // Every key a next query (position 700) can see is still there: positions 653..699.
        ASSERT_GT(h.len(), 0);
        EXPECT_LE(h.pos.front(), 700 - 48 + 1) << "layer " << il;
        EXPECT_EQ(h.pos.back(), 699);
        EXPECT_EQ(h.slid, 700 - h.len());
      } else {
        EXPECT_EQ(h.len(), 700) << "layer " << il;
        EXPECT_EQ(h.slid, 0);
      }
    }
  // Decoding 200 more tokens one at a time keeps the local layers within the bound.
  const size_t held_before = c->bytes_held();
  for (int t = 0; t < 200; ++t) {
    const int32_t tok = 5 + t % 100;
    e.forward(*c, std::span<const int32_t>(&tok, 1), Logits::Last);
  }
  for (int il = 0; il < hp.n_layer; ++il) {
    if (!hp.layer_slides(il)) continue;
    EXPECT_LE(c->len(il, 0), (48 + 1 + 16 + 15) / 16 * 16) << "layer " << il;
    EXPECT_EQ(c->head(il, 0).pos.back(), 899);
  }
  // Bytes grew by the global layers' 200 tokens only (whole pages), not the local layers'.
  EXPECT_LE(c->bytes_held(), held_before + static_cast<size_t>((200 + 15) / 16 + 1) * 2 * hp.n_head_kv * c->layout().page_bytes());
}

// tiny-gemma2 (16-token pages) with one 400-token context prefilled twice: uncompressed (`full`,
// also collecting what the press needs when `collect`) and with `press` at keep 0.25 (`comp`).
struct Gemma2Pair {
  test::TempDir dir;
  std::unique_ptr<Model> m;
  std::unique_ptr<Engine> e;
  SpecArgs a;
  CompressionSpec spec;
  std::unique_ptr<CompressedContext> full, comp;
  Gemma2Pair(const char* name, const char* press, bool collect) : dir(name), m(tiny_model("tiny-gemma2", dir)) {
    EngineParams ep;
    ep.page_tokens = 16;
    e = std::make_unique<Engine>(*m, ep);
    a.press = press;
    a.keep = 0.25;
    spec = make_compression_spec(a);
    full = std::make_unique<CompressedContext>(*e, make_compression_spec(SpecArgs{}));
    comp = std::make_unique<CompressedContext>(*e, spec);
    const std::vector<int32_t> ctx = ids(400);
    if (collect)
      full->prefill(ctx, spec.press.needs());
    else
      full->prefill(ctx);
    comp->prefill(ctx);
  }
};

TEST(SlidingWindowCache, PressesCompressTheGlobalLayersOnly) {
  Gemma2Pair pair("swa_press", "snapkv", /*collect=*/true);  // full collects what snapkv needs, for compress_from below
  const Model* m = pair.m.get();
  Engine& e = *pair.e;
  CompressedContext &full = *pair.full, &comp = *pair.comp;
  for (int il = 0; il < m->hp.n_layer; ++il)
    for (int kvh = 0; kvh < m->hp.n_head_kv; ++kvh) {
      if (m->hp.layer_slides(il)) {  // as the window left them, identical to the uncompressed context's
        EXPECT_EQ(comp.cache().head(il, kvh).pos, full.cache().head(il, kvh).pos) << "layer " << il;
        EXPECT_LT(comp.cache().len(il, kvh), 400);
      } else {  // keep 0.25 of the global layers' 400 tokens: the budget is spent there
        EXPECT_EQ(full.cache().len(il, kvh), 400);
        EXPECT_EQ(comp.cache().len(il, kvh), 100) << "layer " << il;
      }
    }
  // Answers run from the compressed context, and the uncompressed one still compresses from it.
  AnswerOptions ao;
  ao.max_new_tokens = 3;
  ao.stop_at_eog = false;
  EXPECT_EQ(comp.ask(ids(5), ao).tokens.size(), 3u);
  CompressedContext again(e, make_compression_spec(pair.a));
  again.compress_from(full);
  EXPECT_EQ(again.cache().total_slots(), comp.cache().total_slots());
}

TEST(SlidingWindowCache, AModelWhoseEveryLayerSlidesIsStillCompressed) {
  test::TempDir dir("swa_phi3");
  HParams hp = shape_preset("tiny-phi3").hp;
  hp.n_swa = 64;
  write_random_gguf(hp, synthetic_spm_vocab(hp.n_vocab), DType::F32, 5, "phi", dir / "phi.gguf");
  auto m = Model::load(dir / "phi.gguf");
  EngineParams ep;
  ep.page_tokens = 16;
  ep.n_batch = 32;
  Engine e(*m, ep);
  for (const char* press : {"snapkv", "compactor", "kvzip", "h2o"}) {
    SCOPED_TRACE(press);
    SpecArgs a;
    a.press = press;
    a.keep = 0.5;
    CompressedContext c(e, make_compression_spec(a));
    c.prefill(ids(300));  // past the window: every layer has dropped pages (statistics follow)
    for (int il = 0; il < hp.n_layer; ++il) {
      EXPECT_GT(c.cache().head(il, 0).slid, 0);
      EXPECT_LE(c.cache().len(il, 0), 64);  // the press kept about half of what the window left
    }
    AnswerOptions ao;
    ao.max_new_tokens = 2;
    ao.stop_at_eog = false;
    EXPECT_EQ(c.ask(ids(4), ao).tokens.size(), 2u);
  }
}

// D2O on a model with sliding-window layers (Gemma 2: 0 and 2 local, 1 and 3 global): Eq. 5's
// softmax(-F) and its factor L run over the global layers only, the local layers take no share and
// keep what their window left. The split is recomputed here from the Eq. 4 values D2O stored (F of
// the two global layers): softmax over those two, times the whole budget — a softmax over all four
// layers (local F included) would give another split.
TEST(SlidingWindowCache, D2oSpendsEq5OverTheGlobalLayers) {
  Gemma2Pair pair("swa_d2o", "d2o", /*collect=*/false);
  const HParams& hp = pair.m->hp;
  CompressedContext &full = *pair.full, &comp = *pair.comp;
  const auto& st = comp.press_state().values;
  ASSERT_TRUE(st.count("d2o.layer_F") && st.count("d2o.layer_target"));
  const std::vector<double>& F = st.at("d2o.layer_F");
  const std::vector<double>& target = st.at("d2o.layer_target");
  // The whole budget: keep 0.25 of every slot the press could choose from (the global layers').
  int64_t global_slots = 0;
  for (int il = 1; il < hp.n_layer; il += 2)
    for (int kvh = 0; kvh < hp.n_head_kv; ++kvh) global_slots += full.cache().len(il, kvh);
  ASSERT_EQ(global_slots, 2 * hp.n_head_kv * 400);
  const double total = 0.25 * static_cast<double>(global_slots);
  const double z = std::exp(-F[1]) + std::exp(-F[3]);
  int64_t kept_global = 0;
  for (int il = 0; il < hp.n_layer; ++il) {
    if (hp.layer_slides(il)) {
      EXPECT_EQ(target[static_cast<size_t>(il)], 0.0) << "layer " << il;
      for (int kvh = 0; kvh < hp.n_head_kv; ++kvh)
        EXPECT_EQ(comp.cache().head(il, kvh).pos, full.cache().head(il, kvh).pos) << "layer " << il;
      continue;
    }
    // Per KV head of layer il: softmax(-F) over the global layers x the budget / heads.
    const double want = std::exp(-F[static_cast<size_t>(il)]) / z * total / hp.n_head_kv;
    EXPECT_NEAR(target[static_cast<size_t>(il)], want, 1.0) << "layer " << il;
    for (int kvh = 0; kvh < hp.n_head_kv; ++kvh) {
      EXPECT_NEAR(comp.cache().len(il, kvh), std::min(want, 400.0), 1.0) << "layer " << il;
      kept_global += comp.cache().len(il, kvh);
    }
  }
  EXPECT_NEAR(static_cast<double>(kept_global), total, 2.0);
}

// A Gemma 3 context (five local layers that have dropped pages, one global layer compressed by
// SnapKV) answers the same through every path that holds it: an answer on a fork, again on a second
// fork (the first left the context untouched), after a .kvc round trip (every head's positions
// identical), and built and answered step by step in continuous batching beside another sequence.
TEST(SlidingWindowCache, LocalAndGlobalMixSurvivesKvcForksAndBatching) {
  test::TempDir dir("swa_mix");
  auto m = tiny_model("tiny-gemma3", dir);  // window 48 on layers 0-4, layer 5 global
  const HParams& hp = m->hp;
  EngineParams ep;
  ep.page_tokens = 16;
  ep.n_batch = 32;
  Engine e(*m, ep);
  SpecArgs a;
  a.press = "snapkv";
  a.keep = 0.25;
  const CompressionSpec spec = make_compression_spec(a);
  AnswerOptions ao;
  ao.max_new_tokens = 12;
  ao.stop_at_eog = false;
  std::vector<int32_t> ctx2 = ids(260);
  for (int32_t& t : ctx2) t = 3 + (t * 7) % 300;
  const std::vector<std::vector<int32_t>> contexts{ids(300), ctx2};
  const std::vector<std::vector<int32_t>> questions{{7, 11, 13}, {17, 19}};

  std::vector<Answer> alone;
  for (size_t i = 0; i < 2; ++i) {
    CompressedContext c(e, spec);
    c.prefill(contexts[i]);
    for (int il = 0; il < hp.n_layer; ++il) {
      if (hp.layer_slides(il)) EXPECT_GT(c.cache().head(il, 0).slid, 0) << "layer " << il;
      else EXPECT_EQ(c.cache().len(il, 0), static_cast<int32_t>(contexts[i].size()) / 4) << "layer " << il;
    }
    alone.push_back(c.ask(questions[i], ao));
    EXPECT_EQ(c.ask(questions[i], ao).tokens, alone[i].tokens);  // a second fork answers alike
    if (i > 0) continue;
    save_cache(dir / "mix.kvc", c.cache(), {});
    LoadedCache lc = load_cache(dir / "mix.kvc", e.page_pool(), e.kv_layout());
    for (int il = 0; il < hp.n_layer; ++il)
      for (int kvh = 0; kvh < hp.n_head_kv; ++kvh)
        EXPECT_EQ(lc.cache->head(il, kvh).pos, c.cache().head(il, kvh).pos) << "layer " << il;
    CompressedContext loaded(e, spec);
    loaded.adopt(std::move(lc.cache), c.full_bytes(), c.full_slots());
    EXPECT_EQ(loaded.ask(questions[i], ao).tokens, alone[i].tokens);
  }

  // Both contexts built in 16-token chunks of one budget, each answer starting when its context
  // is ready while the other may still prefill.
  std::vector<std::unique_ptr<ContextBuilder>> builders;
  std::vector<std::shared_ptr<const BuiltContext>> built(2);
  std::vector<std::unique_ptr<AnswerStepper>> answers(2);
  for (size_t i = 0; i < 2; ++i) builders.push_back(std::make_unique<ContextBuilder>(e, spec, contexts[i]));
  for (int step = 0; step < 1000; ++step) {
    std::vector<Stepper*> live;
    for (size_t i = 0; i < 2; ++i) {
      if (builders[i]->phase() == Stepper::Phase::Done && !built[i]) {
        built[i] = std::make_shared<const BuiltContext>(builders[i]->take());
        answers[i] = std::make_unique<AnswerStepper>(e, built[i]->seq.fork(), spec, questions[i], ao, built[i]);
      }
      if (answers[i] && answers[i]->phase() != Stepper::Phase::Done) live.push_back(answers[i].get());
      else if (!built[i]) live.push_back(builders[i].get());
    }
    if (live.empty()) break;
    std::vector<StepFailure> failed;
    batch_step(e, live, 16, failed);
    ASSERT_TRUE(failed.empty()) << failed[0].message;
  }
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(answers[i]) << "sequence " << i;
    EXPECT_EQ(answers[i]->tokens(), alone[i].tokens) << "sequence " << i;
  }
}

}  // namespace
}  // namespace kvs
