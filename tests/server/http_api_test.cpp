// The HTTP API end to end on an in-process server (stories260K, loopback): completions, chat,
// streaming, contexts (create, ask, list, delete, persisted and reloaded), metrics — and the
// refusals: every malformed request is a 4xx in OpenAI's error shape.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <set>

#include "runtime/cli_shell.h"
#include "server_test_util.h"

namespace kvs {
namespace {

using nlohmann::json;
using test::post;
using test::Reply;

class HttpApi : public ::testing::Test {
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
  const test::TestServer& srv() const { return *server_; }
};
Model* HttpApi::model_ = nullptr;
test::TestServer* HttpApi::server_ = nullptr;

// About 130 tokens: compression at keep 0.5 frees whole pages (32 tokens per page).
const char* kStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
    "friends. One day, she saw a big red ball under a tree. She wanted to play with it, but it was too high. "
    "Lily asked her mom for help. Her mom smiled and took the ball down from the tree. Lily was very happy. "
    "She played with the ball all day long, and when the sun went down, she went home and had a warm bath.";

// `kvshrink generate` (greedy, 2 threads, the same model) on `prompt` written to a file: its
// stdout. The independent reference for the server's prompt assembly and detokenization.
std::string cli_generate(const std::string& prompt, const std::string& args) {
  test::TempDir dir("cli_prompt");
  const std::string file = (dir.path / "prompt.txt").string();
  { std::ofstream(file, std::ios::binary) << prompt; }
  std::string out;
  const int rc = test::kvshrink_shell("generate -m '" + test::stories_gguf() + "' -t 2 -q --temp 0 -f '" + file + "' " + args +
                                          " 2>/dev/null",
                                      out);
  EXPECT_EQ(rc, 0) << out;
  return out;
}

// Issue 29 item 5: the greedy completion is the CLI's for the same prompt (before, it was only
// compared with another answer of the same server, which a wrong prompt assembly or
// detokenization in the HTTP layer passes).
TEST_F(HttpApi, CompletionGreedyMatchesTheCli) {
  const json body = {{"prompt", kStory}, {"max_tokens", 12}, {"temperature", 0}};
  const Reply a = post(srv(), "/v1/completions", body);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.json["object"], "text_completion");
  EXPECT_EQ(a.json["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(a.json["usage"]["completion_tokens"], 12);
  EXPECT_EQ(a.json["usage"]["prompt_tokens"], model_->tokenizer->encode(kStory, true, false).size());
  EXPECT_EQ(a.json["usage"]["kv_press"], "full");
  EXPECT_GT(a.json["usage"]["kv_bytes_held"].get<size_t>(), 0u);
  // The CLI echoes the prompt, then the completion, then a newline.
  const std::string cli = cli_generate(kStory, "-n 12");
  ASSERT_EQ(cli.rfind(kStory, 0), 0u) << cli;
  const std::string text = a.json["choices"][0]["text"];
  EXPECT_EQ(text, cli.substr(std::string(kStory).size(), cli.size() - std::string(kStory).size() - 1));
  EXPECT_FALSE(text.empty());
  // Token ids as the prompt: the same answer.
  const std::vector<int32_t> ids = model_->tokenizer->encode(kStory, true, false);
  const Reply c = post(srv(), "/v1/completions", json{{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}});
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(text, c.json["choices"][0]["text"]);
}

// Issue 29 item 7: the keep ratio is the exact count of slots held, computed by hand (before:
// accepted within 0.1 of 0.5). SnapKV keep 0.5 (uniform allocator, no sinks or window by
// default) compresses the prompt but its last token (n - 1 tokens) to lround(0.5 (n - 1)) per head;
// the last prompt token and 7 of the 8 generated tokens follow (the 8th is never fed), so every
// head holds K + 8 of the n + 7 positions at the end. The text is the CLI's with the same press.
TEST_F(HttpApi, CompressedCompletionReportsKv) {
  const json body = {{"prompt", kStory},
                     {"max_tokens", 8},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"kv_compression", {{"press", "snapkv"}, {"keep", 0.5}, {"options", {{"window_size", 8}}}}}};
  const Reply r = post(srv(), "/v1/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  const json& u = r.json["usage"];
  EXPECT_EQ(u["kv_press"], "snapkv");
  const int64_t n = u["prompt_tokens"].get<int64_t>();
  ASSERT_EQ(n, static_cast<int64_t>(model_->tokenizer->encode(kStory, true, false).size()));
  const int64_t K = std::lround(0.5 * static_cast<double>(n - 1));
  EXPECT_DOUBLE_EQ(u["kv_keep_ratio"].get<double>(), static_cast<double>(K + 8) / static_cast<double>(n + 7));
  const Engine probe(*model_, test::test_options().engine);
  const KvLayout& l = probe.kv_layout();
  // Whole pages per head (the sequence's own; nothing shared).
  const size_t pages = static_cast<size_t>((K + 8 + l.page_tokens - 1) / l.page_tokens);
  EXPECT_EQ(u["kv_bytes_held"].get<size_t>(), pages * static_cast<size_t>(l.n_heads_total()) * l.page_bytes());
  EXPECT_EQ(u["kv_bytes_full"].get<size_t>(), full_context_bytes(l, n + 7));
  const std::string cli = cli_generate(kStory, "-n 8 --ignore-eos --press snapkv --keep 0.5 --opt window_size=8");
  ASSERT_EQ(cli.rfind(kStory, 0), 0u) << cli;
  EXPECT_EQ(r.json["choices"][0]["text"], cli.substr(std::string(kStory).size(), cli.size() - std::string(kStory).size() - 1));
  // An adaptive press reports the keep ratio it chose.
  const Reply ad = post(srv(), "/v1/completions",
                        json{{"prompt", kStory},
                             {"max_tokens", 4},
                             {"kv_compression", {{"press", "snapkv"}, {"options", {{"allocator", "nucleus"}, {"mass", 0.9}}}}}});
  ASSERT_EQ(ad.status, 200) << ad.body;
  EXPECT_TRUE(ad.json["usage"]["kv_keep_chosen"].is_number()) << ad.body;
}

TEST_F(HttpApi, ChatAndStreaming) {
  const json chat = {{"messages", json::array({{{"role", "system"}, {"content", "You tell stories."}},
                                                {{"role", "user"}, {"content", kStory}}})},
                     {"max_tokens", 10},
                     {"temperature", 0},
                     {"ignore_eos", true}};
  const Reply r = post(srv(), "/v1/chat/completions", chat);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["object"], "chat.completion");
  EXPECT_EQ(r.json["choices"][0]["message"]["role"], "assistant");
  const std::string full = r.json["choices"][0]["message"]["content"];
  // The CLI's chat answer for the same conversation (issue 29 item 5).
  const std::string cli = cli_generate(kStory, "-n 10 --ignore-eos --chat --system 'You tell stories.'");
  EXPECT_EQ(full + "\n", cli);

  json s = chat;
  s["stream"] = true;
  s["stream_options"] = {{"include_usage", true}};
  const Reply st = post(srv(), "/v1/chat/completions", s);
  ASSERT_EQ(st.status, 200);
  // data: {...}\n\n events, the last one [DONE]; the deltas add up to the whole answer.
  std::string text, finish;
  bool done = false, usage = false;
  size_t p = 0;
  while ((p = st.body.find("data: ", p)) != std::string::npos) {
    const size_t e = st.body.find("\n\n", p);
    ASSERT_NE(e, std::string::npos);
    const std::string data = st.body.substr(p + 6, e - p - 6);
    p = e;
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const json j = json::parse(data);
    EXPECT_EQ(j["object"], "chat.completion.chunk");
    if (j.contains("usage")) {
      usage = true;
      EXPECT_EQ(j["usage"]["completion_tokens"], 10);
      continue;
    }
    const json& c = j["choices"][0];
    if (c["delta"].contains("content")) text += c["delta"]["content"].get<std::string>();
    if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
  }
  EXPECT_TRUE(done);
  EXPECT_TRUE(usage);
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(text, full);
}

TEST_F(HttpApi, StopStrings) {
  const Reply r = post(srv(), "/v1/completions",
                       json{{"prompt", kStory}, {"max_tokens", 60}, {"temperature", 0}, {"stop", json::array({"."})}});
  ASSERT_EQ(r.status, 200) << r.body;
  const std::string t = r.json["choices"][0]["text"];
  EXPECT_EQ(t.find('.'), std::string::npos) << t;
  EXPECT_EQ(r.json["choices"][0]["finish_reason"], "stop");
}

TEST_F(HttpApi, ContextsLifecycle) {
  const Reply c = post(srv(), "/v1/contexts",
                       json{{"text", kStory}, {"kv_compression", {{"press", "knorm"}, {"keep", 0.5}}}});
  ASSERT_EQ(c.status, 200) << c.body;
  const std::string id = c.json["id"];
  EXPECT_EQ(c.json["object"], "context");
  EXPECT_LT(c.json["kv_bytes_held"].get<size_t>(), c.json["kv_bytes_full"].get<size_t>());
  EXPECT_EQ(test::get(srv(), "/v1/contexts/" + id).json["id"], id);
  bool listed = false;
  const Reply all = test::get(srv(), "/v1/contexts");
  for (const auto& x : all.json["data"]) listed = listed || x["id"] == id;
  EXPECT_TRUE(listed);
  // Many questions, one prefill: each answer on a fork, the context unchanged.
  const json q = {{"context_id", id}, {"prompt", " Then she"}, {"max_tokens", 8}, {"temperature", 0}};
  const Reply a1 = post(srv(), "/v1/completions", q);
  ASSERT_EQ(a1.status, 200) << a1.body;
  EXPECT_EQ(a1.json["usage"]["prompt_tokens_details"]["cached_tokens"], c.json["tokens"]);
  EXPECT_EQ(a1.json["usage"]["kv_press"], "knorm");
  const Reply a2 = post(srv(), "/v1/completions", q);
  EXPECT_EQ(a1.json["choices"][0]["text"], a2.json["choices"][0]["text"]);
  EXPECT_EQ(test::get(srv(), "/v1/contexts/" + id).json["kv_bytes_held"], c.json["kv_bytes_held"]);
  // Chat on a text context is refused; kv_compression with context_id too.
  const Reply bad = post(srv(), "/v1/chat/completions",
                         json{{"context_id", id}, {"messages", json::array({{{"role", "user"}, {"content", "hi"}}})}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.json["error"]["param"], "context_id");
  const Reply bad2 = post(srv(), "/v1/completions",
                          json{{"context_id", id}, {"prompt", "x"}, {"kv_compression", {{"press", "knorm"}, {"keep", 0.5}}}});
  EXPECT_EQ(bad2.status, 400);
  EXPECT_EQ(bad2.json["error"]["param"], "kv_compression");
  // Delete: gone.
  EXPECT_EQ(test::del(srv(), "/v1/contexts/" + id).json["deleted"], true);
  EXPECT_EQ(test::get(srv(), "/v1/contexts/" + id).status, 404);
  const Reply gone = post(srv(), "/v1/completions", q);
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(gone.json["error"]["code"], "context_not_found");
  EXPECT_EQ(test::del(srv(), "/v1/contexts/" + id).status, 404);
}

TEST_F(HttpApi, ChatContext) {
  const Reply c = post(srv(), "/v1/contexts",
                       json{{"messages", json::array({{{"role", "system"}, {"content", "You tell stories."}},
                                                      {{"role", "user"}, {"content", kStory}}})},
                            {"kv_compression", {{"press", "streaming_llm"}, {"keep", 0.5}}}});
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.json["format"], "chat");
  const Reply a = post(srv(), "/v1/chat/completions",
                       json{{"context_id", c.json["id"]},
                            {"messages", json::array({{{"role", "user"}, {"content", "What did Lily love?"}}})},
                            {"max_tokens", 6},
                            {"temperature", 0}});
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.json["usage"]["completion_tokens"], 6);
  test::del(srv(), "/v1/contexts/" + c.json["id"].get<std::string>());
}

// One malformed request per class: status, error shape, and the field named.
TEST_F(HttpApi, MalformedRequestsAre4xx) {
  struct Bad {
    std::string path, body;
    int status;
    std::string param;  // expected error.param ("" = not checked)
  };
  const std::vector<Bad> cases = {
      {"/v1/completions", "{not json", 400, ""},
      {"/v1/completions", "[1,2]", 400, ""},
      {"/v1/completions", "", 400, ""},
      {"/v1/completions", R"({"max_tokens": 5})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": 12})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": ["a", 3]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": [1, 99999]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": [1, -1]})", 400, "prompt"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": "5"})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 1e30})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 5.5})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 100000})", 400, "max_tokens"},
      {"/v1/completions", R"({"prompt": "x", "temperature": -1})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "x", "temperature": "hot"})", 400, "temperature"},
      {"/v1/completions", R"({"prompt": "x", "top_p": 0})", 400, "top_p"},
      {"/v1/completions", R"({"prompt": "x", "stop": [1]})", 400, "stop"},
      {"/v1/completions", R"({"prompt": "x", "stop": ["", "b"]})", 400, "stop"},
      {"/v1/completions", R"({"prompt": "x", "n": 0})", 400, "n"},
      {"/v1/completions", R"({"prompt": "x", "logprobs": 21})", 400, "logprobs"},
      {"/v1/completions", R"({"prompt": "x", "stream": "yes"})", 400, "stream"},
      {"/v1/completions", R"({"prompt": "x", "stream_options": {"include_usage": true}})", 400, "stream_options"},
      {"/v1/completions", R"({"prompt": "x", "bogus": 1})", 400, "bogus"},
      {"/v1/completions", R"({"prompt": "x", "kv_compression": {"press": "nope", "keep": 0.5}})", 400, "kv_compression"},
      {"/v1/completions", R"({"prompt": "x y z", "kv_compression": {"keep": 0.5}})", 400, "kv_compression.press"},
      {"/v1/completions", R"({"prompt": "x y z", "kv_compression": {"press": "snapkv", "keep": 2}})", 400,
       "kv_compression.keep"},
      {"/v1/completions", R"({"prompt": "x y z", "kv_compression": {"press": "snapkv", "keep": 0}})", 400,
       "kv_compression.keep"},
      {"/v1/completions", R"({"prompt": "x y z", "kv_compression": {"press": "snapkv"}})", 400, "kv_compression"},
      {"/v1/completions", R"({"prompt": "x y z", "kv_compression": {"press": "snapkv", "keep": 0.5, "options": {"nope": 1}}})",
       400, "kv_compression"},
      {"/v1/completions", R"({"prompt": "x y z", "kv_compression": {"press": "snapkv", "keep": 0.5, "options": {"window_size": -3}}})",
       400, "kv_compression"},
      {"/v1/completions", R"({"prompt": "x y z", "kv_compression": {"press": "snapkv", "keep": 0.5, "trigger": "sometimes"}})",
       400, "kv_compression"},
      {"/v1/completions", R"({"prompt": "x y z", "kv_compression": "snapkv"})", 400, "kv_compression"},
      {"/v1/completions", R"({"prompt": "x y z", "kv_compression": {"press": "snapkv", "keep": 0.5, "frobnicate": 1}})",
       400, "kv_compression.frobnicate"},
      {"/v1/completions", R"({"prompt": "x", "context_id": "ctx_doesnotexist"})", 404, ""},
      {"/v1/completions", R"({"prompt": "x", "context_id": "../../etc/passwd"})", 400, "context_id"},
      {"/v1/completions", R"({"prompt": "x", "context_id": 5})", 400, "context_id"},
      {"/v1/chat/completions", R"({"messages": []})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": "hi"})", 400, "messages"},
      {"/v1/chat/completions", R"({"messages": [{"role": "wizard", "content": "x"}]})", 400, "messages[0].role"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user"}]})", 400, "messages[0].content"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 7}]})", 400, "messages[0].content"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400, ""},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", 400,
       "tools"},
      {"/v1/contexts", R"({})", 400, "text"},
      {"/v1/contexts", R"({"text": ""})", 400, "text"},
      {"/v1/contexts", R"({"text": "a b c", "messages": [{"role": "user", "content": "x"}]})", 400, "text"},
      {"/v1/contexts", R"({"text": "a b c d e f", "kv_compression": {"press": "snapkv", "keep": -1}})", 400,
       "kv_compression.keep"},
  };
  for (const Bad& b : cases) {
    const Reply r = post(srv(), b.path, b.body);
    EXPECT_EQ(r.status, b.status) << b.path << " " << b.body << " -> " << r.body;
    test::expect_error_shape(r.json, b.body);
    if (!b.param.empty() && r.json.is_object() && r.json.contains("error")) {
      EXPECT_EQ(r.json["error"]["param"], b.param) << b.body << " -> " << r.body;
    }
  }
  // A prompt longer than the server's limits, and one that would run past its context size.
  std::string lng;
  for (int i = 0; i < 300; ++i) lng += "The cat sat on the mat. ";
  const Reply too_long = post(srv(), "/v1/completions", json{{"prompt", lng}, {"max_tokens", 4}});
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(too_long.json["error"]["code"], "context_length_exceeded");
  std::string mid;
  for (int i = 0; i < 60; ++i) mid += "The cat sat on the mat. ";
  std::vector<int32_t> ids = model_->tokenizer->encode(mid, true, false);
  ASSERT_GT(ids.size(), 300u);
  ids.resize(300);  // 300 prompt tokens + 256 new > the test server's 512 positions
  const Reply past_ctx = post(srv(), "/v1/completions", json{{"prompt", ids}, {"max_tokens", 256}});
  EXPECT_EQ(past_ctx.status, 400) << past_ctx.body;
  EXPECT_EQ(past_ctx.json["error"]["param"], "max_tokens");
  // The server still answers.
  EXPECT_EQ(post(srv(), "/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 2}}).status, 200);
}

TEST_F(HttpApi, HttpLevelRefusals) {
  // Unknown path, wrong method, malformed HTTP, body over the limit: 4xx, error shape.
  const test::Reply nf = test::get(srv(), "/v2/nothing");
  EXPECT_EQ(nf.status, 404);
  test::expect_error_shape(nf.json, "404");
  const test::Reply wm = test::get(srv(), "/v1/completions");
  EXPECT_EQ(wm.status, 405);
  test::expect_error_shape(wm.json, "405");
  const std::string garbage = test::raw_exchange(srv().port(), "THIS IS NOT HTTP\r\n\r\n");
  EXPECT_GE(test::raw_status(garbage), 400);
  EXPECT_LT(test::raw_status(garbage), 500);
  // A body over the limit, announced by its Content-Length: 413 before the body is read (the
  // lying, chunked and slow variants are in hostile_clients_test.cpp).
  const std::string big(9u << 20, 'x');
  const std::string r413 = test::raw_exchange(
      srv().port(), "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
                        std::to_string(big.size()) + "\r\nConnection: close\r\n\r\n" + big);
  EXPECT_EQ(test::raw_status(r413), 413) << r413.substr(0, 200);
  test::expect_error_shape(test::raw_body_json(r413), "413");
  EXPECT_EQ(post(srv(), "/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 1}}).status, 200);
}

TEST_F(HttpApi, ModelsHealthMetricsPresses) {
  EXPECT_EQ(test::get(srv(), "/health").json["status"], "ok");
  const Reply m = test::get(srv(), "/v1/models");
  ASSERT_EQ(m.status, 200);
  const std::string id = m.json["data"][0]["id"];
  EXPECT_EQ(m.json["data"][0]["meta"]["weight_bytes"], model_->weight_bytes());
  EXPECT_EQ(m.json["data"][0]["meta"]["n_vocab"], model_->hp.n_vocab);
  EXPECT_EQ(test::get(srv(), "/v1/models/" + id).status, 200);
  EXPECT_EQ(test::get(srv(), "/v1/models/nope").status, 404);
  const Reply p = test::get(srv(), "/v1/presses");
  std::set<std::string> names;
  for (const auto& x : p.json["data"]) names.insert(x["name"].get<std::string>());
  EXPECT_TRUE(names.count("snapkv"));
  post(srv(), "/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 2}});
  const std::string text = test::get(srv(), "/metrics").body;
  for (const char* k : {"kvshrink_requests_total", "kvshrink_generated_tokens_total", "kvshrink_prompt_tokens_total",
                        "kvshrink_kv_bytes", "kvshrink_kv_bytes_high_water", "kvshrink_sequences_running",
                        "kvshrink_sequences_queued", "kvshrink_compressions_total", "kvshrink_batch_steps_total"})
    EXPECT_NE(text.find(k), std::string::npos) << k;
  EXPECT_GT(test::metric(text, "kvshrink_requests_total{endpoint=\"/v1/completions\",status=\"200\"}"), 0);
  EXPECT_GT(test::metric(text, "kvshrink_generated_tokens_total"), 0);
  // The pool's memory: whole 2 MiB huge pages, at least its high-water mark of pages, and (the
  // stories model's pages fill less than one chunk here) no more than one chunk beyond it.
  constexpr double kHuge = 2.0 * 1024 * 1024;
  const double allocated = test::metric(text, "kvshrink_kv_bytes_allocated");
  const double high_water = test::metric(text, "kvshrink_kv_bytes_high_water");
  EXPECT_GT(high_water, 0);
  EXPECT_GE(allocated, high_water);
  EXPECT_EQ(std::fmod(allocated, kHuge), 0.0) << allocated;
  EXPECT_LT(allocated, high_water + kHuge);
}

TEST(HttpAuth, BearerKeyRequired) {
  auto model = Model::load(test::stories_gguf());
  server::ServeOptions o = test::test_options();
  o.http.api_key = "s3cret-key";
  test::TestServer s(*model, o);
  const json body = {{"prompt", "Hi"}, {"max_tokens", 1}};
  const Reply none = post(s, "/v1/completions", body.dump());
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(none.json["error"]["type"], "authentication_error");
  EXPECT_EQ(post(s, "/v1/completions", body.dump(), {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(post(s, "/v1/completions", body.dump(), {{"Authorization", "Bearer s3cret-keyX"}}).status, 401);
  EXPECT_EQ(post(s, "/v1/completions", body.dump(), {{"Authorization", "s3cret-key"}}).status, 401);
  EXPECT_EQ(post(s, "/v1/completions", body.dump(), {{"Authorization", "Bearer s3cret-key"}}).status, 200);
  EXPECT_EQ(test::get(s, "/metrics").status, 401);
  EXPECT_EQ(test::get(s, "/health").status, 200);  // health stays open
  EXPECT_TRUE(server::constant_time_equal("abc", "abc"));
  EXPECT_FALSE(server::constant_time_equal("abc", "abd"));
  EXPECT_FALSE(server::constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(server::constant_time_equal("", "a"));
}

TEST(HttpContexts, PersistedAndReloaded) {
  auto model = Model::load(test::stories_gguf());
  test::TempDir dir("server_contexts");
  server::ServeOptions o = test::test_options();
  o.contexts_dir = dir.str();
  std::string id, answer;
  const auto ask = [&](const test::TestServer& s) {
    return post(s, "/v1/completions", json{{"context_id", id}, {"prompt", " Then"}, {"max_tokens", 8}, {"temperature", 0}});
  };
  {
    test::TestServer s(*model, o);
    const Reply c = post(s, "/v1/contexts", json{{"text", kStory}, {"kv_compression", {{"press", "knorm"}, {"keep", 0.5}}}});
    ASSERT_EQ(c.status, 200) << c.body;
    EXPECT_EQ(c.json["persisted"], true);
    id = c.json["id"];
    EXPECT_TRUE(std::filesystem::exists(dir.path / (id + ".kvc")));
    const Reply a = ask(s);
    ASSERT_EQ(a.status, 200);
    answer = a.json["choices"][0]["text"];
  }
  // A file that is not a .kvc must not stop the server from starting.
  { std::ofstream(dir.path / "ctx_garbage.kvc") << "not a kvc file"; }
  test::TestServer s2(*model, o);
  EXPECT_EQ(s2.srv->restore_problems().size(), 1u);
  const Reply info = test::get(s2, "/v1/contexts/" + id);
  ASSERT_EQ(info.status, 200) << info.body;
  EXPECT_EQ(info.json["kv_compression"]["press"], "knorm");
  const Reply a = ask(s2);
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.json["choices"][0]["text"], answer);
  EXPECT_EQ(test::del(s2, "/v1/contexts/" + id).status, 200);
  EXPECT_FALSE(std::filesystem::exists(dir.path / (id + ".kvc")));
}

}  // namespace
}  // namespace kvs
