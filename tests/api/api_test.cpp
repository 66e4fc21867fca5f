// The public C++ API (include/kvshrink/kvshrink.h) through libkvshrink.so only: loading, errors,
// compress/ask, save/load round trips, one prefill serving several presses, kept positions and
// scores, generation.
#include <gtest/gtest.h>

#include <kvshrink/kvshrink.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "api_test_util.h"

namespace {

const std::string kModel = std::string(KVS_SOURCE_DIR) + "/testbed/models/v7s1/model-f16.gguf";
const std::string kQuestion =
    "What is the special magic number for quiet-harbor mentioned in the provided text? The special magic number for "
    "quiet-harbor mentioned in the provided text is";

using kvs_api_test::needle_context;

std::string tmp_path(const std::string& name) {
  const auto dir = std::filesystem::path(KVS_BINARY_DIR) / "test_tmp" / "api";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

kvshrink::CompressOptions keydiff(double keep) {
  kvshrink::CompressOptions o;
  o.press = "keydiff";
  o.keep = keep;
  o.question_template = "\n{question}";
  return o;
}

kvshrink::AskOptions short_answer() {
  kvshrink::AskOptions a;
  a.max_new_tokens = 8;
  return a;
}

kvshrink::Model& model() {
  static kvshrink::Model m(kModel, [] {
    kvshrink::ModelOptions o;
    o.threads = 1;  // robust under a loaded machine
    return o;
  }());
  return m;
}

// The message of the kvshrink::Error `fn` throws ("" when it throws none).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const kvshrink::Error& e) {
    return e.what();
  }
  return "";
}

TEST(Api, ListsPresses) {
  const auto ps = kvshrink::presses();
  auto has = [&](const std::string& n) {
    return std::any_of(ps.begin(), ps.end(), [&](const auto& p) { return p.name == n; });
  };
  EXPECT_TRUE(has("full"));
  EXPECT_TRUE(has("snapkv"));
  EXPECT_TRUE(has("keydiff"));
  EXPECT_FALSE(kvshrink::allocators().empty());
  EXPECT_EQ(kvshrink::version(), KVSHRINK_VERSION_STRING);
}

TEST(Api, ErrorsCarryTheEngineMessage) {
  const std::string bad = tmp_path("no-such-model.gguf");
  EXPECT_NE(error_of([&] { kvshrink::Model m(bad); }).find("no-such-model.gguf"), std::string::npos);
  kvshrink::CompressOptions o;
  o.press = "no-such-press";
  o.keep = 0.5;
  const std::string msg = error_of([&] { model().compress("some context", o); });
  EXPECT_NE(msg.find("no-such-press"), std::string::npos) << msg;
  o = keydiff(0.5);
  o.options["no_such_option"] = "1";
  EXPECT_NE(error_of([&] { model().compress("some context", o); }).find("no_such_option"), std::string::npos);
  o = keydiff(1.5);
  EXPECT_NE(error_of([&] { model().compress("some context", o); }).find("keep"), std::string::npos);
  kvshrink::ModelOptions mo;
  mo.kv_type = "q4";
  EXPECT_NE(error_of([&] { kvshrink::Model m(kModel, mo); }).find("kv_type"), std::string::npos);
  EXPECT_NE(error_of([&] { model().load(tmp_path("missing.kvc")); }).find("missing.kvc"), std::string::npos);
}

// F16 is the default KV storage (issue 14); "f32" doubles the bytes, and a context saved by an F32
// model loads into a default one (rows converted) and gives the same kept positions.
TEST(Api, KvTypeDefaultsToF16AndF32FilesLoad) {
  EXPECT_EQ(kvshrink::ModelOptions{}.kv_type, "f16");
  kvshrink::ModelOptions f32o;
  f32o.threads = 1;
  f32o.kv_type = "f32";
  kvshrink::Model f32m(kModel, f32o);
  kvshrink::Context c32 = f32m.compress(needle_context(), keydiff(0.4));
  kvshrink::Context c16 = model().compress(needle_context(), keydiff(0.4));
  EXPECT_EQ(c32.full_kv_bytes(), 2 * c16.full_kv_bytes());
  const std::string path = tmp_path("keydiff_f32.kvc");
  c32.save(path);
  kvshrink::Context loaded = kvshrink::load(path, model());
  EXPECT_EQ(loaded.kv_bytes() * 2, c32.kv_bytes());
  for (int l = 0; l < c32.n_layer(); ++l)
    for (int h = 0; h < c32.n_head_kv(); ++h) EXPECT_EQ(loaded.kept_positions(l, h), c32.kept_positions(l, h));
  EXPECT_EQ(loaded.ask(kQuestion, short_answer()).text.rfind(" 4071589", 0), 0u);
}

TEST(Api, CompressAskSaveLoad) {
  kvshrink::Context ctx = model().compress(needle_context(), keydiff(0.4));
  EXPECT_EQ(ctx.n_layer(), model().info().n_layer);
  EXPECT_EQ(ctx.n_head_kv(), model().info().n_head_kv);
  EXPECT_GT(ctx.context_tokens(), 1000);
  EXPECT_NEAR(ctx.keep_measured(), 0.4, 0.02);
  EXPECT_LT(ctx.kv_bytes(), ctx.full_kv_bytes());
  const std::string answer = ctx.ask(kQuestion, short_answer()).text;
  EXPECT_EQ(answer.rfind(" 4071589", 0), 0u) << answer;
  // Asking leaves the context as it was.
  EXPECT_EQ(ctx.ask(kQuestion, short_answer()).text, answer);

  const std::string path = tmp_path("keydiff.kvc");
  ctx.save(path);
  kvshrink::Context loaded = kvshrink::load(path, model());
  EXPECT_EQ(loaded.options().press, "keydiff");
  EXPECT_EQ(loaded.options().keep, 0.4);
  EXPECT_EQ(loaded.options().question_template, "\n{question}");
  EXPECT_EQ(loaded.context_tokens(), ctx.context_tokens());
  EXPECT_DOUBLE_EQ(loaded.keep_measured(), ctx.keep_measured());
  for (int l = 0; l < ctx.n_layer(); ++l)
    for (int h = 0; h < ctx.n_head_kv(); ++h) EXPECT_EQ(loaded.kept_positions(l, h), ctx.kept_positions(l, h));
  EXPECT_EQ(loaded.ask(kQuestion, short_answer()).text, answer);
  EXPECT_FALSE(loaded.has_scores());
  EXPECT_NE(error_of([&] { (void)loaded.scores(0, 0); }).find("keep_scores"), std::string::npos);
  EXPECT_NE(error_of([&] { (void)loaded.kept_positions(ctx.n_layer(), 0); }).find("layer"), std::string::npos);
}

TEST(Api, OnePrefillManyPresses) {
  kvshrink::Context base = model().prefill(needle_context(), {keydiff(0.4)});
  EXPECT_DOUBLE_EQ(base.keep_measured(), 1.0);
  kvshrink::Context a = base.compress(keydiff(0.4));
  kvshrink::Context direct = model().compress(needle_context(), keydiff(0.4));
  for (int l = 0; l < a.n_layer(); ++l)
    for (int h = 0; h < a.n_head_kv(); ++h) EXPECT_EQ(a.kept_positions(l, h), direct.kept_positions(l, h));
  EXPECT_EQ(a.ask(kQuestion, short_answer()).text, direct.ask(kQuestion, short_answer()).text);
  // A press the prefill was not prepared for prefills again, with the same result.
  kvshrink::CompressOptions snap;
  snap.press = "snapkv";
  snap.keep = 0.25;
  kvshrink::Context b = base.compress(snap);
  kvshrink::Context b_direct = model().compress(needle_context(), snap);
  EXPECT_EQ(b.kept_positions(1, 2), b_direct.kept_positions(1, 2));
  EXPECT_NE(error_of([&] { (void)a.compress(snap); }).find("already compressed"), std::string::npos);
}

TEST(Api, ScoresRankTheKeptPositions) {
  kvshrink::CompressOptions o = keydiff(0.4);
  o.keep_scores = true;
  kvshrink::Context ctx = model().compress(needle_context(), o);
  ASSERT_TRUE(ctx.has_scores());
  const int n = ctx.context_tokens();
  int sinks = 0, window = 0;  // protected: kept whatever their score
  for (const auto& p : kvshrink::presses())
    if (p.name == "keydiff") sinks = p.default_sinks, window = p.default_window;
  for (int l = 0; l < ctx.n_layer(); ++l)
    for (int h = 0; h < ctx.n_head_kv(); ++h) {
      const std::vector<float> s = ctx.scores(l, h);
      ASSERT_EQ(static_cast<int>(s.size()), n);
      for (float x : s) ASSERT_TRUE(std::isfinite(x));
      // Top-k per head: no dropped position scores above a kept one (protected sinks / window aside).
      const std::vector<int32_t> kept = ctx.kept_positions(l, h);
      std::vector<bool> is_kept(static_cast<size_t>(n), false);
      for (int32_t p : kept) is_kept[static_cast<size_t>(p)] = true;
      float min_kept = INFINITY, max_dropped = -INFINITY;
      for (int p = sinks; p < n - window; ++p) {
        if (is_kept[static_cast<size_t>(p)]) min_kept = std::min(min_kept, s[static_cast<size_t>(p)]);
        else max_dropped = std::max(max_dropped, s[static_cast<size_t>(p)]);
      }
      EXPECT_GE(min_kept, max_dropped) << "layer " << l << " head " << h;
    }
  // The same positions as without scores.
  kvshrink::Context plain = model().compress(needle_context(), keydiff(0.4));
  EXPECT_EQ(plain.kept_positions(3, 1), ctx.kept_positions(3, 1));
}

TEST(Api, GeneratesAndTokenizes) {
  kvshrink::GenerateOptions g;
  g.max_new_tokens = 6;
  g.stop_at_eog = false;
  const kvshrink::Answer a = model().generate("One of the special magic numbers for quiet-harbor is:", g);
  EXPECT_EQ(a.tokens.size(), 6u);
  EXPECT_FALSE(a.text.empty());
  const auto ids = model().tokenize("hello world");
  EXPECT_EQ(model().detokenize(std::vector<int32_t>(ids.begin() + 1, ids.end())), "hello world");
  EXPECT_NE(error_of([&] { model().detokenize({-1}); }).find("-1"), std::string::npos);
  EXPECT_NE(error_of([&] { model().generate("", g); }).find("empty"), std::string::npos);
}

}  // namespace
