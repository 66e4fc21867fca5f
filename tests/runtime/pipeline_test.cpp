// The compress-once / ask-many pipeline on real models: keep 1.0 is exact for every press, memory
// really drops and pages are reused, decode-time eviction holds the budget, save/load/ask agrees
// with the in-memory cache, and the memory-cap trigger bounds the pool.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>

#include "core/error.h"
#include "core/mapped_file.h"
#include "kvcache/cache_file.h"
#include "model/presets.h"
#include "model/random_model.h"
#include "press/registry.h"
#include "runtime/calibration_store.h"
#include "runtime/session.h"
#include "test_util.h"

namespace kvs {
namespace {

const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she "
    "saw a big, red ball. She wanted to play with it, but it was too high. Lily asked her mom to help her. Her mom "
    "said, \"Let's go to the park and play with the ball.\" Lily was very happy.";

// keep < 1 is not given to an adaptive press (it chooses its own); keep 1 is the identity for all.
CompressionSpec spec_for(const std::string& press, double keep, ParamMap opts = {}) {
  SpecArgs a;
  a.press = press;
  a.options = std::move(opts);
  if (keep >= 1.0 || !make_press(press, a.options).adaptive()) a.keep = keep;
  return make_compression_spec(a);
}


std::vector<float> question_logits(Engine& e, CompressedContext& ctx, const std::vector<int32_t>& q) {
  auto fork = ctx.cache().fork();
  return e.forward(*fork, q, Logits::All);
}

}  // namespace

TEST(Pipeline, KeepOneIsExactForEveryPress) {
  auto model = Model::load(test::stories_gguf());
  EngineParams ep;
  ep.n_threads = 2;
  Engine e(*model, ep);
  const auto ctx_ids = model->tokenizer->encode(kStory, true, false);
  const auto q_ids = model->tokenizer->encode(" Lily", false, false);
  CompressedContext full(e, spec_for("full", 1.0));
  full.prefill(ctx_ids);
  const auto ref = question_logits(e, full, q_ids);
  AnswerOptions ao;
  ao.max_new_tokens = 24;
  ao.stop_at_eog = false;
  const auto ref_answer = full.ask(q_ids, ao).tokens;
  for (const auto& info : press_registry()) {
    SCOPED_TRACE(info.name);
    CompressedContext c(e, spec_for(info.name, 1.0));
    c.prefill(ctx_ids);
    EXPECT_EQ(c.cache().total_slots(), full.cache().total_slots());
    EXPECT_EQ(question_logits(e, c, q_ids), ref);  // bit-identical
    EXPECT_EQ(c.ask(q_ids, ao).tokens, ref_answer);
  }
}

TEST(Pipeline, MemoryReallyDropsAndFreedPagesAreReused) {
  test::TempDir dir("pipeline_mem");
  const auto& p = shape_preset("tiny");
  write_random_gguf(p.hp, synthetic_spm_vocab(p.hp.n_vocab), DType::F32, 3, "tiny", dir / "tiny.gguf");
  auto model = Model::load(dir / "tiny.gguf");
  EngineParams ep;
  ep.n_threads = 2;
  Engine e(*model, ep);
  std::vector<int32_t> ids(4096);
  for (int i = 0; i < 4096; ++i) ids[i] = 3 + (i * 131) % (p.hp.n_vocab - 3);
  PagePool& pool = e.page_pool();
  {
    CompressedContext c(e, spec_for("snapkv", 0.25));
    c.prefill(ids);
    const size_t full = c.full_bytes();
    const size_t page = e.kv_layout().page_bytes();
    const size_t heads = static_cast<size_t>(e.kv_layout().n_heads_total());
    EXPECT_EQ(full, heads * 128 * page);  // 4096 tokens / 32 per page
    EXPECT_EQ(c.cache().total_slots(), heads * 1024);
    EXPECT_LE(pool.bytes_in_use(), full / 4 + heads * page);  // within one page per head
    EXPECT_GE(pool.bytes_in_use(), full / 4);
    const size_t reserved = pool.bytes_reserved();
    // A second context of 3/4 the size fits in the freed pages: no new memory.
    auto c2 = e.new_cache();
    e.forward(*c2, std::span<const int32_t>(ids).first(3072), Logits::None);
    EXPECT_EQ(pool.bytes_reserved(), reserved);
    EXPECT_EQ(pool.bytes_in_use(), c.cache().bytes_held() + c2->bytes_held());
  }
  EXPECT_EQ(pool.bytes_in_use(), 0u);
}

TEST(Pipeline, DecodeTimeEvictionHoldsTheBudget) {
  auto model = Model::load(test::stories_gguf());
  Engine e(*model, {});
  const auto ctx_ids = model->tokenizer->encode(kStory, true, false);
  for (const char* press : {"h2o", "tova", "streaming_llm"}) {
    SCOPED_TRACE(press);
    CompressionSpec s = spec_for(press, 0.5);
    s.trigger = {Trigger::Kind::EveryN, 1, 0};
    CompressedContext c(e, s);
    c.prefill(ctx_ids);
    const int32_t budget = c.cache().max_len();
    AnswerOptions ao;
    ao.max_new_tokens = 30;
    ao.stop_at_eog = false;
    auto q = model->tokenizer->encode(" She", false, false);
    Answer a = c.ask(q, ao);
    EXPECT_EQ(a.tokens.size(), 30u);
    // Context head lengths are untouched (answers run on forks)...
    EXPECT_EQ(c.cache().max_len(), budget);
    // ...and the fork was evicted back to the kept context + the question at every step (without
    // eviction it would hold budget + question + 29 tokens; the question is never trimmed).
    const int32_t want = budget + static_cast<int32_t>(q.size());
    EXPECT_EQ(a.decode_budget, want);
    EXPECT_EQ(a.max_head_len_end, want);
    EXPECT_LE(a.kv_bytes_peak, c.cache().bytes_held() + 2 * e.kv_layout().page_bytes() * e.kv_layout().n_heads_total());
  }
}

TEST(Pipeline, SaveLoadAskMatchesInMemory) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("kvc");
  for (DType kv : {DType::F32, DType::F16}) {
    EngineParams ep;
    ep.kv_dtype = kv;
    Engine e(*model, ep);
    CompressedContext c(e, spec_for("snapkv", 0.4, {{"window_size", "16"}}));
    c.prefill(model->tokenizer->encode(kStory, true, false));
    AnswerOptions ao;
    ao.max_new_tokens = 20;
    const auto q = model->tokenizer->encode(" Who helped Lily?", false, false);
    const auto want = c.ask(q, ao).tokens;
    save_cache(dir / "c.kvc", c.cache(), {{"note", "test"}});
    LoadedCache lc = load_cache(dir / "c.kvc", e.page_pool(), e.kv_layout());
    EXPECT_EQ(lc.meta["note"], "test");
    EXPECT_EQ(lc.cache->total_slots(), c.cache().total_slots());
    EXPECT_EQ(lc.cache->n_past(), c.cache().n_past());
    CompressedContext loaded(e, spec_for("snapkv", 0.4));
    loaded.adopt(std::move(lc.cache), c.full_bytes(), c.full_slots());
    EXPECT_EQ(loaded.ask(q, ao).tokens, want);
  }
}

// A loaded context has no statistics; presses that evict while decoding (H2O needs accumulated
// attention) must still answer from it, and keep evicting back to the budget.
TEST(Pipeline, LoadedContextKeepsDecodeTimeEviction) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("kvc_decode");
  Engine e(*model, {});
  for (const char* press : {"h2o", "tova"}) {
    SCOPED_TRACE(press);
    CompressedContext c(e, spec_for(press, 0.4));
    c.prefill(model->tokenizer->encode(kStory, true, false));
    const int32_t budget = c.cache().max_len();
    save_cache(dir / "c.kvc", c.cache(), {});
    LoadedCache lc = load_cache(dir / "c.kvc", e.page_pool(), e.kv_layout());
    CompressedContext loaded(e, spec_for(press, 0.4));
    loaded.adopt(std::move(lc.cache), c.full_bytes(), c.full_slots());
    AnswerOptions ao;
    ao.max_new_tokens = 24;
    ao.stop_at_eog = false;
    const auto q = model->tokenizer->encode(" Who helped Lily?", false, false);
    const Answer a = loaded.ask(q, ao);
    EXPECT_EQ(a.tokens.size(), 24u);
    EXPECT_EQ(a.max_head_len_end, budget + static_cast<int32_t>(q.size()));
    EXPECT_EQ(loaded.cache().max_len(), budget);  // the loaded context itself is untouched
  }
}

TEST(Pipeline, CorruptOrForeignCacheFilesAreRejected) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("kvc_bad");
  Engine e(*model, {});
  CompressedContext c(e, spec_for("knorm", 0.5));
  c.prefill(model->tokenizer->encode(kStory, true, false));
  save_cache(dir / "c.kvc", c.cache(), {});
  std::string bytes = read_file(dir / "c.kvc");
  auto write = [&](const std::string& name, const std::string& b) {
    std::ofstream(dir / name, std::ios::binary) << b;
    return dir / name;
  };
  auto expect_error = [&](const std::string& path, const std::string& needle) {
    try {
      load_cache(path, e.page_pool(), e.kv_layout());
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(needle), std::string::npos) << err.what();
    }
  };
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x40;
  expect_error(write("flip.kvc", flipped), "checksum");
  expect_error(write("trunc.kvc", bytes.substr(0, bytes.size() - 100)), "checksum");
  expect_error(write("magic.kvc", "XXXX" + bytes.substr(4)), "bad magic");
  expect_error(write("tiny.kvc", "KV"), "too short");
  KvLayout other = e.kv_layout();
  other.n_layer = 3;
  PagePool pool2(other.page_bytes());
  try {
    load_cache(dir / "c.kvc", pool2, other);
    ADD_FAILURE();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("does not match"), std::string::npos);
  }
}

TEST(Pipeline, MemoryCapTriggerBoundsThePool) {
  test::TempDir dir("pipeline_cap");
  const auto& p = shape_preset("tiny");
  write_random_gguf(p.hp, synthetic_spm_vocab(p.hp.n_vocab), DType::F32, 3, "tiny", dir / "tiny.gguf");
  auto model = Model::load(dir / "tiny.gguf");
  EngineParams ep;
  ep.n_batch = 256;
  Engine e(*model, ep);
  std::vector<int32_t> ids(3000);
  for (int i = 0; i < 3000; ++i) ids[i] = 3 + (i * 17) % (p.hp.n_vocab - 3);
  const size_t cap = 1024 * static_cast<size_t>(e.kv_layout().n_heads_total()) / 32 * e.kv_layout().page_bytes();
  CompressionSpec s = spec_for("knorm", 0.5);
  s.trigger = {Trigger::Kind::MemoryCap, 1, cap};
  CompressedContext c(e, s);
  c.prefill(ids);
  EXPECT_LE(e.page_pool().high_water_bytes(), cap);
  EXPECT_LT(c.cache().total_slots(), 3000u * e.kv_layout().n_heads_total());
}

// Query-aware compression sees the question: SnapKV's window then holds the question, so what is
// kept of the context depends on it (two questions keep different context tokens) and the
// question's own tokens are kept; query-agnostic compression keeps one set for every question.
TEST(Pipeline, QueryAwareSeesTheQuestion) {
  auto model = Model::load(test::stories_gguf());
  Engine e(*model, {});
  CompressedContext c(e, spec_for("snapkv", 0.3, {{"window_size", "8"}}));
  const auto ctx_ids = model->tokenizer->encode(kStory, true, false);
  c.prefill(ctx_ids);
  const int32_t n_ctx = static_cast<int32_t>(ctx_ids.size());
  const auto qa = model->tokenizer->encode(" What was red? The ball was red and big.", false, false);
  const auto qb = model->tokenizer->encode(" Who is Lily's mom? Her mom said to go.", false, false);
  auto context_part = [&](const KvCache& kc, int layer, int kvh) {
    std::vector<int32_t> v;
    for (int32_t p : kc.head(layer, kvh).pos)
      if (p < n_ctx) v.push_back(p);
    return v;
  };
  std::vector<float> la, lb;
  Sequence sa = c.prefill_query_aware(qa, &la);
  Sequence sb = c.prefill_query_aware(qb, &lb);
  const KvLayout& l = e.kv_layout();
  int differ_a_b = 0, differ_a_agnostic = 0;
  for (int layer = 0; layer < l.n_layer; ++layer)
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      differ_a_b += context_part(*sa.cache, layer, kvh) != context_part(*sb.cache, layer, kvh);
      differ_a_agnostic += context_part(*sa.cache, layer, kvh) != c.cache().head(layer, kvh).pos;
      // The window (the last 8 positions) lies in the question: kept.
      const auto& pa = sa.cache->head(layer, kvh).pos;
      for (int32_t p = n_ctx + static_cast<int32_t>(qa.size()) - 8; p < n_ctx + static_cast<int32_t>(qa.size()); ++p)
        EXPECT_TRUE(std::find(pa.begin(), pa.end(), p) != pa.end()) << p;
    }
  EXPECT_GT(differ_a_b, l.n_heads_total() / 2);
  EXPECT_GT(differ_a_agnostic, l.n_heads_total() / 2);
  // And the answers come from those caches (logits of the question's last token).
  AnswerOptions ao;
  ao.max_new_tokens = 4;
  EXPECT_EQ(c.ask_query_aware(qa, ao).tokens[0], argmax(la));
}

}  // namespace kvs

namespace kvs {

// One prefill serving a grid: deriving each press from a shared prefill gives exactly the cache
// (positions and answers) a fresh prefill + compress gives — for every registered press: the
// presses that need a per-model calibration (UNComp's groups) get one written for the test, so
// none is skipped.
TEST(Pipeline, CompressFromSharedPrefillEqualsFreshPrefill) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir calib("pipeline_calib");
  ::setenv("KVSHRINK_CALIB_DIR", calib.str().c_str(), 1);
  struct Unset {
    ~Unset() { ::unsetenv("KVSHRINK_CALIB_DIR"); }
  } unset;
  nlohmann::json groups;
  groups["groups"] = 8;
  groups["kv_head_groups"] = std::vector<std::vector<int>>(5, std::vector<int>{0, 2, 5, 7});
  groups["layer_groups"] = {0, 0, 1, 1, 2};
  save_calibration(*model, "uncomp", groups);
  Engine e(*model, {});
  const auto ctx_ids = model->tokenizer->encode(kStory, true, false);
  Needs all;
  for (const auto& info : press_registry()) all |= make_press(info.name).needs();
  CompressedContext base(e, spec_for("full", 1.0));
  base.prefill(ctx_ids, all);
  const auto q = model->tokenizer->encode(" Lily", false, false);
  AnswerOptions ao;
  ao.max_new_tokens = 12;
  for (const auto& info : press_registry()) {
    SCOPED_TRACE(info.name);
    CompressedContext fresh(e, spec_for(info.name, 0.4));
    fresh.prefill(ctx_ids);
    CompressedContext derived(e, spec_for(info.name, 0.4));
    derived.compress_from(base);
    const KvLayout& l = e.kv_layout();
    for (int i = 0; i < l.n_heads_total(); ++i)
      EXPECT_EQ(derived.cache().head(i / l.n_head_kv, i % l.n_head_kv).pos, fresh.cache().head(i / l.n_head_kv, i % l.n_head_kv).pos);
    EXPECT_EQ(derived.full_slots(), fresh.full_slots());
    EXPECT_EQ(derived.ask(q, ao).tokens, fresh.ask(q, ao).tokens);
  }
  EXPECT_EQ(base.cache().total_slots(), base.full_slots());  // the base is untouched
}

}  // namespace kvs
