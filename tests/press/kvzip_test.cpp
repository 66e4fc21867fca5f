// KVzip's parts without a model (a fake probe forward): the token no repeat query attends is
// evicted first, chunked or not; the repeat pass's scores equal a brute-force max over the
// explicitly materialised (subsampled) attention matrix; head-level scores from a calibration keep
// whole heads; the global allocator's budgets. The brute force on a real model (stories260K) is in
// tests/runtime/kvzip_model_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/error.h"
#include "fake_probe.h"
#include "kernels/ops.h"
#include "kvzip_brute_force.h"
#include "press/budget/allocators.h"
#include "press/budget/global.h"
#include "press/methods/kvzip.h"
#include "press/registry.h"
#include "press/scorers/scorers.h"
#include "press_test_util.h"

namespace kvs {
namespace {

using test::contains;
using test::FakeProbe;
using test::Synth;

float hash01(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return static_cast<float>(x % 10000) / 10000.0f;
}

// Context of n tokens (ids 1000 + position); cache keys along e0 except the key at `dead`, which
// points the other way; every repeat-pass query (and key) points along e0.
struct DeadTokenCase {
  static constexpr int D = 8, H = 4, Hkv = 2, n = 48, dead = 21;
  Synth s;
  FakeProbe probe;
  DeadTokenCase()
      : s(Synth::make(2, H, Hkv, D, n,
                      [](int layer, int h, int pos, int d) {
                        if (d == 0) return pos == dead ? -6.0f : 1.0f;
                        return 0.3f * (hash01(static_cast<uint32_t>(layer * 7919 + h * 131 + pos * 17 + d)) - 0.5f);
                      })),
        probe(2, s.shape, *s.threads) {
    for (int i = 0; i < n; ++i) probe.ctx.push_back(1000 + i);
    probe.key_of = [](int, int32_t tok, float* k) {
      for (int h = 0; h < Hkv; ++h)
        for (int d = 0; d < D; ++d) k[h * D + d] = d == 0 ? 1.0f : 0.2f * (hash01(static_cast<uint32_t>(tok * 31 + d)) - 0.5f);
    };
    probe.query_of = [](int, int32_t tok, float* q) {
      for (int h = 0; h < H; ++h)
        for (int d = 0; d < D; ++d) q[h * D + d] = d == 0 ? 5.0f : 0.5f * (hash01(static_cast<uint32_t>(tok * 7 + h * 3 + d)) - 0.5f);
    };
  }
};

TEST(Kvzip, TheTokenNoRepeatQueryAttendsIsEvictedFirst) {
  for (const char* chunk : {"2048", "10"}) {
    SCOPED_TRACE(chunk);
    DeadTokenCase c;
    CompressRequest r;
    r.max_tokens = DeadTokenCase::n - 1;  // one token per head goes
    r.sinks = 4;
    Press p = make_press("kvzip", {{"chunk", chunk}, {"allocator", "uniform"}});
    compress(*c.s.cache, c.s.stats.get(), p, r, c.s.shape, *c.s.threads, {&c.probe, &c.s.state});
    for (int layer = 0; layer < 2; ++layer)
      for (int h = 0; h < DeadTokenCase::Hkv; ++h) {
        const auto kept = c.s.kept_positions(layer, h);
        EXPECT_EQ(kept.size(), static_cast<size_t>(DeadTokenCase::n - 1));
        EXPECT_FALSE(contains(kept, DeadTokenCase::dead)) << "layer " << layer << " head " << h;
      }
    // One probe forward per chunk of the 44 repeated positions (sinks are not repeated).
    EXPECT_EQ(c.probe.forwards, std::string(chunk) == "10" ? 5 : 1);
  }
}

TEST(Kvzip, PairScoresEqualTheBruteForceMaxChunkedAndUnchunked) {
  for (int chunk : {2048, 10, 7}) {
    SCOPED_TRACE(chunk);
    DeadTokenCase c;
    CompressRequest r;
    r.sinks = 4;
    const PressEnv env{*c.s.cache, c.s.shape, nullptr, *c.s.threads, r, &c.probe, nullptr};
    KvzipOptions o;
    o.chunk = chunk;
    const Scores sc = kvzip_pair_scores(env, o);
    for (int layer = 0; layer < 2; ++layer) {
      const auto want = test::kvzip_brute_force(c, layer, chunk, 4);
      for (int h = 0; h < DeadTokenCase::Hkv; ++h) {
        const auto& got = sc.at(c.s.layout, layer, h);
        for (int s = 0; s < DeadTokenCase::n; ++s) {
          if (s < 4) {
            EXPECT_TRUE(std::isinf(got[s]) && got[s] > 0) << "sink " << s;
            continue;
          }
          EXPECT_NEAR(got[s], want[h][s], 1e-5 + 1e-4 * want[h][s]) << "layer " << layer << " head " << h << " slot " << s;
        }
      }
    }
    // The probe forwards ran on forks: the cache is untouched.
    EXPECT_EQ(c.s.cache->total_slots(), static_cast<size_t>(2 * DeadTokenCase::Hkv * DeadTokenCase::n));
  }
}

TEST(Kvzip, ContinuationPromptQuotesThePreviousChunk) {
  DeadTokenCase c;
  KvzipOptions o;
  const auto first = kvzip_repeat_input(c.probe, c.probe.ctx, 4, 20, true, o);
  const auto second = kvzip_repeat_input(c.probe, c.probe.ctx, 20, 30, false, o);
  const std::string p1 = "\n\nRepeat the previous context exactly.";
  const std::string p2 = "\n\nRepeat the part of the previous context exactly, starting with ";
  ASSERT_EQ(first.size(), p1.size() + 16);
  ASSERT_EQ(second.size(), p2.size() + 8 + 10);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(second[p2.size() + i], 1000 + 12 + i);  // the last 8 of [4, 20)
  for (int i = 0; i < 10; ++i) EXPECT_EQ(second[p2.size() + 8 + i], 1000 + 20 + i);
}

// A model with a chat template: a user turn renders as the head 900..905, the text (one id per
// byte), then the tail 910, 911.
struct ChatProbe : FakeProbe {
  using FakeProbe::FakeProbe;
  bool has_chat_template() const override { return true; }
  std::vector<int32_t> encode(const std::string& text, bool chat) const override {
    std::vector<int32_t> v = FakeProbe::encode(text, false);
    if (!chat) return v;
    std::vector<int32_t> out{900, 901, 902, 903, 904, 905};
    out.insert(out.end(), v.begin(), v.end());
    out.push_back(910);
    out.push_back(911);
    return out;
  }
};

// The official code's system prompt is the chat template's prefix: with a context that starts
// with it (BOS, then the head), the whole head is protected (+inf), in every chunk's softmax and
// not repeated; a system turn other than the template's default is found by its opening.
TEST(Kvzip, ProtectsTheWholeChatTemplateHead) {
  DeadTokenCase c;
  ChatProbe probe(2, c.s.shape, *c.s.threads);
  probe.key_of = c.probe.key_of;
  probe.query_of = c.probe.query_of;
  probe.ctx = c.probe.ctx;
  probe.ctx[0] = 1;  // BOS
  for (int i = 0; i < 6; ++i) probe.ctx[static_cast<size_t>(1 + i)] = 900 + i;
  EXPECT_EQ(kvzip_chat_head_tokens(probe, probe.ctx), 7);
  EXPECT_EQ(kvzip_protected_prefix(&probe, probe.ctx, 4, DeadTokenCase::n), 7);
  EXPECT_EQ(kvzip_protected_prefix(&probe, probe.ctx, 9, DeadTokenCase::n), 9);  // more sinks than the head
  // Another system turn: the head's first two tokens, other ids, then the user turn's opening.
  std::vector<int32_t> sys = {1, 900, 901, 777, 778, 779, 903, 904, 905, 1000, 1001};
  EXPECT_EQ(kvzip_chat_head_tokens(probe, sys), 9);
  // A plain context (no head) and a model without a template: the sinks only.
  EXPECT_EQ(kvzip_chat_head_tokens(probe, c.probe.ctx), 0);
  EXPECT_EQ(kvzip_chat_head_tokens(c.probe, probe.ctx), 0);

  CompressRequest r;
  r.sinks = 4;
  const PressEnv env{*c.s.cache, c.s.shape, nullptr, *c.s.threads, r, &probe, nullptr};
  KvzipOptions o;
  o.chunk = 41;  // positions 7..47 in one chunk (4..47 would take two)
  const Scores sc = kvzip_pair_scores(env, o);
  EXPECT_EQ(probe.forwards, 1);
  for (int layer = 0; layer < 2; ++layer)
    for (int h = 0; h < DeadTokenCase::Hkv; ++h) {
      const auto& got = sc.at(c.s.layout, layer, h);
      for (int s = 0; s < DeadTokenCase::n; ++s)
        EXPECT_EQ(std::isinf(got[static_cast<size_t>(s)]), s < 7) << "slot " << s;
    }
}

TEST(Kvzip, ChatYesNeedsAChatTemplate) {
  DeadTokenCase c;
  KvzipOptions o;
  o.chat = "yes";
  EXPECT_THROW(kvzip_repeat_input(c.probe, c.probe.ctx, 4, 20, true, o), Error);
  try {
    kvzip_repeat_input(c.probe, c.probe.ctx, 4, 20, true, o);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
  }
  o.chat = "auto";
  EXPECT_NO_THROW(kvzip_repeat_input(c.probe, c.probe.ctx, 4, 20, true, o));
}

TEST(Kvzip, NeedsTheContextTokens) {
  DeadTokenCase c;
  c.probe.ctx.resize(10);  // a loaded .kvc: the cache holds more positions than the known context
  CompressRequest r;
  r.keep = 0.5;
  EXPECT_THROW(compress(*c.s.cache, nullptr, make_press("kvzip"), r, c.s.shape, *c.s.threads, {&c.probe, nullptr}),
               Error);
  EXPECT_THROW(compress(*c.s.cache, nullptr, make_press("kvzip"), r, c.s.shape, *c.s.threads, {}), Error);
}

// Head level: whole heads in head-score order keep everything, the others their sinks + window;
// the head on the boundary keeps its most recent tokens.
TEST(Kvzip, HeadLevelKeepsWholeHeadsInScoreOrder) {
  Synth s = Synth::make(2, 4, 2, 8, 100, [](int, int, int, int d) { return d * 0.1f; });
  FakeProbe probe(2, s.shape, *s.threads);
  probe.calib["kvzip"] = {{"head_scores", {{0.9, 0.1}, {0.3, 0.7}}}};
  CompressRequest r;
  r.keep = 0.6;  // 240 of 400: heads (0,0) and (1,1) whole, 40 of the next (1,0), (0,1) protected only
  r.sinks = 4;
  r.window = 6;
  compress(*s.cache, nullptr, make_press("kvzip", {{"level", "head"}}), r, s.shape, *s.threads, {&probe, nullptr});
  EXPECT_EQ(s.cache->len(0, 0), 100);
  EXPECT_EQ(s.cache->len(1, 1), 100);
  EXPECT_EQ(s.cache->len(0, 1), 10);
  EXPECT_EQ(s.cache->len(1, 0), 30);
  std::vector<int32_t> want{0, 1, 2, 3};  // sinks, then the window (6) and the 20 most recent before it
  for (int i = 74; i < 100; ++i) want.push_back(i);
  EXPECT_EQ(s.kept_positions(1, 0), want);
  EXPECT_EQ(probe.forwards, 0);                                  // no scoring pass
}

TEST(Kvzip, HeadLevelWithoutOrWithABadCalibrationIsRefused) {
  Synth s = Synth::make(2, 4, 2, 8, 50, [](int, int, int, int d) { return d * 0.1f; });
  FakeProbe probe(2, s.shape, *s.threads);
  CompressRequest r;
  r.keep = 0.5;
  const Press p = make_press("kvzip", {{"level", "head"}});
  try {
    compress(*s.cache, nullptr, p, r, s.shape, *s.threads, {&probe, nullptr});
    FAIL() << "no calibration accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kvshrink calibrate --press kvzip"), std::string::npos) << e.what();
  }
  probe.calib["kvzip"] = {{"head_scores", {{0.9, 0.1}}}};  // one layer for a two-layer model
  EXPECT_THROW(compress(*s.cache, nullptr, p, r, s.shape, *s.threads, {&probe, nullptr}), Error);
  EXPECT_EQ(s.cache->total_slots(), 200u);
}

// The global allocator: one ranking across heads and layers, protected tokens first, the uniform
// total; scope Layer equals AdaKV without its floor.
TEST(GlobalAllocator, RanksAcrossHeadsAndLayers) {
  Synth s = Synth::make(2, 2, 2, 4, 40, [](int, int, int, int) { return 0.0f; });
  Scores sc = make_scores(*s.cache);
  for (int i = 0; i < 4; ++i)
    for (int t = 0; t < 40; ++t) sc.s[i][t] = (i == 3 ? 10.0f : 0.0f) + static_cast<float>(t) * 0.01f * (i + 1);
  CompressRequest r;
  r.keep = 0.25;  // 40 of 160
  r.sinks = 2;
  const PressEnv env = s.env(r);
  const Allocation a = GlobalAllocator(GlobalAllocator::Scope::Model).allocate(sc, env);
  EXPECT_EQ(a.budgets, (Budgets{2, 2, 2, 34}));  // head 3 scores highest everywhere
  const Allocation b = GlobalAllocator(GlobalAllocator::Scope::Layer).allocate(sc, env);
  EXPECT_EQ(b.budgets[0] + b.budgets[1], 20);
  EXPECT_EQ(b.budgets[2] + b.budgets[3], 20);
  EXPECT_EQ(b.budgets[2], 2);
  EXPECT_EQ(b.budgets, AdaKvAllocator(0.0).allocate(sc, env).budgets);
  // max_tokens: the group spends budget x heads.
  CompressRequest m;
  m.max_tokens = 5;
  const PressEnv envm = s.env(m);
  const Allocation c = GlobalAllocator().allocate(sc, envm);
  EXPECT_EQ(std::accumulate(c.budgets.begin(), c.budgets.end(), 0), 20);
}

TEST(GlobalAllocator, EveryKeepMatchesTheUniformTotalAndKeepsProtectedTokens) {
  Synth s = Synth::make(3, 4, 2, 8, 77, [](int l, int h, int pos, int d) {
    return hash01(static_cast<uint32_t>(l * 1000003 + h * 10007 + pos * 101 + d)) - 0.5f;
  });
  Scores sc = make_scores(*s.cache);
  for (size_t i = 0; i < sc.s.size(); ++i)
    for (size_t t = 0; t < sc.s[i].size(); ++t) sc.s[i][t] = hash01(static_cast<uint32_t>(i * 7777 + t));
  sc.s[2][5] = std::nanf("");
  for (double keep : {0.05, 0.3, 0.77, 1.0}) {
    CompressRequest r;
    r.keep = keep;
    r.sinks = 3;
    r.window = 5;
    const Allocation g = GlobalAllocator().allocate(sc, s.env(r));
    const Allocation u = UniformAllocator().allocate(sc, s.env(r));
    EXPECT_EQ(std::accumulate(g.budgets.begin(), g.budgets.end(), 0), std::accumulate(u.budgets.begin(), u.budgets.end(), 0));
    for (int32_t b : g.budgets) {
      EXPECT_GE(b, 8);
      EXPECT_LE(b, 77);
    }
  }
}

TEST(Kvzip, RegisteredWithItsOptions) {
  const PressInfo& info = press_info("kvzip");
  EXPECT_EQ(info.default_allocator, "global");
  EXPECT_EQ(info.default_sinks, 4);
  EXPECT_THROW(make_press("kvzip", {{"level", "token"}}), Error);
  EXPECT_THROW(make_press("kvzip", {{"softmax", "none"}}), Error);
  EXPECT_THROW(make_press("kvzip", {{"chunk", "0"}}), Error);
  EXPECT_NO_THROW(make_press("kvzip", {{"allocator", "uniform"}}));
  EXPECT_NO_THROW(allocator_info("global"));
  EXPECT_EQ(make_press("kvzip").scorer->name(), "kvzip");
  EXPECT_EQ(make_press("kvzip", {{"level", "head"}}).scorer->name(), "kvzip_head");
}

// precision: bf16 / f32 as given, auto = BF16 exactly when the CPU multiplies BF16 in hardware;
// anything else refused, naming the value (the press and calibration share this parser).
TEST(Kvzip, PrecisionOption) {
  const auto specs = press_param_specs(press_info("kvzip"), "global");
  auto opts = [&](const std::string& v) { return kvzip_options(Params("kvzip", specs, {{"precision", v}})); };
  EXPECT_TRUE(opts("bf16").bf16);
  EXPECT_FALSE(opts("f32").bf16);
  EXPECT_EQ(opts("auto").bf16, kernels::native_bf16());
  EXPECT_EQ(kvzip_options(Params("kvzip", specs, {})).bf16, kernels::native_bf16()) << "auto is the default";
  try {
    make_press("kvzip", {{"precision", "fp8"}});
    ADD_FAILURE() << "precision=fp8 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvs
