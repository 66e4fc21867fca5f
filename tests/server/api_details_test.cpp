// Details of the API (issue 23, defects 10 and 11, and the contexts page size): usage reports what
// is held after memory-triggered compression and tiny keeps; current OpenAI fields that are null
// or harmless are accepted; error messages keep a NUL the client sent; the Bearer scheme is
// case-insensitive; GET /v1/contexts pages.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "server_test_util.h"

namespace kvs {
namespace {

using nlohmann::json;
using test::post;
using test::Reply;

const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
    "friends. One day, she saw a big red ball under a tree. She wanted to play with it, but it was too high. "
    "Lily asked her mom for help. Her mom smiled and took the ball down from the tree. Lily was very happy. "
    "She played with the ball all day long, and when the sun went down, she went home and had a warm bath.";

class ApiDetails : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Model::load(test::stories_gguf()).release();
    server_ = new test::TestServer(*model_, test::test_options());
  }
  static void TearDownTestSuite() {
    delete server_;
    delete model_;
  }
  static Model* model_;
  static test::TestServer* server_;
};
Model* ApiDetails::model_ = nullptr;
test::TestServer* ApiDetails::server_ = nullptr;

// Defect 10: keep 1e-300 keeps no slot of the compressed prompt (lround(1e-300 (n - 1)) = 0); the
// last prompt token and 3 of the 4 generated tokens follow: 4 slots of n + 3 per head at the end
// (before: 0.0 reported while pages were held).
TEST_F(ApiDetails, TinyKeepReportsWhatIsHeld) {
  const Reply r = post(*server_, "/v1/completions",
                       json{{"prompt", kStory},
                            {"max_tokens", 4},
                            {"temperature", 0},
                            {"ignore_eos", true},
                            {"kv_compression", {{"press", "snapkv"}, {"keep", 1e-300}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const int64_t n = r.json["usage"]["prompt_tokens"];
  EXPECT_DOUBLE_EQ(r.json["usage"]["kv_keep_ratio"].get<double>(), 4.0 / static_cast<double>(n + 3));
  EXPECT_GT(r.json["usage"]["kv_bytes_held"].get<size_t>(), 0u);
}

// Defect 10: a memory trigger that fires while answering counts as an eviction and the keep ratio
// reports the slots held then (before: bytes dropped, keep ratio 1.0, evictions 0).
TEST_F(ApiDetails, MemoryTriggerReportsEvictionsAndKeep) {
  const Engine probe(*model_, test::test_options().engine);
  const KvLayout& l = probe.kv_layout();
  // Room for 3 pages per head: the ~155-token story (5 pages) cannot stay whole.
  const size_t cap = 3 * l.page_bytes() * static_cast<size_t>(l.n_heads_total());
  const Reply r = post(*server_, "/v1/completions",
                       json{{"prompt", kStory},
                            {"max_tokens", 40},
                            {"temperature", 0},
                            {"ignore_eos", true},
                            {"kv_compression", {{"press", "knorm"}, {"keep", 0.5}, {"trigger", "memory:" + std::to_string(cap)}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json& u = r.json["usage"];
  EXPECT_GE(u["kv_evictions"].get<int>(), 1) << r.body;
  EXPECT_LE(u["kv_bytes_held"].get<size_t>(), cap);
  const double keep = u["kv_keep_ratio"].get<double>();
  EXPECT_LT(keep, 1.0);
  // Held slots, in whole pages, cover the bytes held.
  const double positions = static_cast<double>(u["prompt_tokens"].get<int64_t>() + 40 - 1);
  const double slots_per_head = keep * positions;
  EXPECT_NEAR(slots_per_head, std::round(slots_per_head), 1e-6) << "not a whole number of slots per head";
  EXPECT_LE(std::ceil(slots_per_head / l.page_tokens) * l.page_bytes() * l.n_heads_total(),
            static_cast<double>(u["kv_bytes_held"].get<size_t>()));
}

// Defect 11: current OpenAI fields, null or harmless, are accepted; those that change the answer
// are refused by name.
TEST_F(ApiDetails, CurrentOpenAIFields) {
  const json msgs = json::array({{{"role", "user"}, {"content", "Hi"}}});
  const Reply ok = post(*server_, "/v1/chat/completions",
                        json{{"messages", msgs},
                             {"max_tokens", 2},
                             {"prediction", nullptr},
                             {"modalities", json::array({"text"})},
                             {"reasoning_effort", "low"},
                             {"audio", nullptr},
                             {"web_search_options", nullptr},
                             {"verbosity", "medium"},
                             {"prompt_cache_key", "k"},
                             {"safety_identifier", "u1"},
                             {"functions", nullptr},
                             {"store", false},
                             {"logprobs", false},
                             {"top_logprobs", nullptr}});
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(post(*server_, "/v1/chat/completions",
                 json{{"messages", msgs}, {"max_tokens", 2}, {"prediction", {{"type", "content"}, {"content", "Hello"}}}})
                .status,
            200);
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{
           {"modalities", json::array({"text", "audio"})},
           {"audio", {{"voice", "alloy"}, {"format", "wav"}}},
           {"verbosity", "high"},
           {"web_search_options", json::object()},
           {"reasoning_effort", "extreme"}}) {
    json b = {{"messages", msgs}, {"max_tokens", 2}};
    b[field] = value;
    const Reply r = post(*server_, "/v1/chat/completions", b);
    EXPECT_EQ(r.status, 400) << field << ": " << r.body;
    EXPECT_EQ(r.json["error"]["param"], field) << r.body;
  }
}

// Defect 11: a NUL the client sent is kept in the error message (before: cut there).
TEST_F(ApiDetails, ErrorMessagesKeepNul) {
  const std::string key = std::string("bad") + '\0' + "field";
  json b = {{"prompt", "x"}};
  b[key] = 1;
  const Reply r = post(*server_, "/v1/completions", b);
  EXPECT_EQ(r.status, 400);
  const std::string msg = r.json["error"]["message"];
  EXPECT_NE(msg.find(key), std::string::npos) << msg;
  EXPECT_EQ(r.json["error"]["param"], key);
  const Reply p = post(*server_, "/v1/completions",
                       json{{"prompt", "x y z"}, {"kv_compression", {{"press", std::string("snap") + '\0' + "kv"}, {"keep", 0.5}}}});
  EXPECT_EQ(p.status, 400);
  EXPECT_NE(p.json["error"]["message"].get<std::string>().find("control characters"), std::string::npos) << p.body;
}

// GET /v1/contexts in pages: limit, after, order; OpenAI's list fields.
TEST_F(ApiDetails, ContextsPages) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    const Reply c = post(*server_, "/v1/contexts", json{{"text", std::string(kStory).substr(0, 40 + 10 * i)}});
    ASSERT_EQ(c.status, 200) << c.body;
    ids.push_back(c.json["id"]);
  }
  // Oldest first, two at a time.
  std::vector<std::string> seen;
  std::string after;
  for (int page = 0; page < 3; ++page) {
    const Reply p = test::get(*server_, "/v1/contexts?order=asc&limit=2" + (after.empty() ? "" : "&after=" + after));
    ASSERT_EQ(p.status, 200) << p.body;
    EXPECT_EQ(p.json["object"], "list");
    for (const auto& x : p.json["data"]) seen.push_back(x["id"]);
    EXPECT_EQ(p.json["has_more"], page < 2) << page;
    EXPECT_EQ(p.json["first_id"], p.json["data"][0]["id"]);
    after = p.json["last_id"];
  }
  EXPECT_EQ(seen, ids);  // created in order; `created` has a second's resolution, ties by id
  // The default: newest first, 20 at most.
  const Reply d = test::get(*server_, "/v1/contexts");
  EXPECT_EQ(d.json["data"].size(), 5u);
  EXPECT_EQ(d.json["data"][0]["id"], ids.back());
  EXPECT_EQ(d.json["has_more"], false);
  for (const std::string q : {"limit=0", "limit=101", "limit=abc", "order=up", "bogus=1", "after=ctx_nope"})
    EXPECT_EQ(test::get(*server_, "/v1/contexts?" + q).status, 400) << q;
  for (const std::string& id : ids) test::del(*server_, "/v1/contexts/" + id);
}

// Defect 11: the Bearer scheme is case-insensitive (RFC 9110); the key is not.
TEST(ApiAuth, BearerSchemeCaseInsensitive) {
  auto model = Model::load(test::stories_gguf());
  server::ServeOptions o = test::test_options();
  o.http.api_key = "Key-123";
  test::TestServer s(*model, o);
  const std::string body = json{{"prompt", "Hi"}, {"max_tokens", 1}}.dump();
  for (const std::string h : {"Bearer Key-123", "bearer Key-123", "BEARER  Key-123", "Bearer\tKey-123"})
    EXPECT_EQ(post(s, "/v1/completions", body, {{"Authorization", h}}).status, 200) << h;
  for (const std::string h : {"Bearer key-123", "Bearer", "BearerKey-123", "Basic Key-123", "Bearer Key-1234"})
    EXPECT_EQ(post(s, "/v1/completions", body, {{"Authorization", h}}).status, 401) << h;
}

}  // namespace
}  // namespace kvs
