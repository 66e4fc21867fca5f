// Tokenization on the server: bounded by the token limit (issue 23, defect 3: a 7.9 MB prompt
// was tokenized whole, 14-19 s of CPU, before its 400), and POST /tokenize, /detokenize in
// llama-server's shape.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include "server/bounded_tokenize.h"
#include "server_test_util.h"

namespace kvs {
namespace {

using nlohmann::json;
using test::post;
using test::Reply;

class Tokenize : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model_ = Model::load(test::stories_gguf()).release();
    server::ServeOptions o = test::test_options();
    o.http.limits.max_body_bytes = 8 << 20;
    server_ = new test::TestServer(*model_, o);
  }
  static void TearDownTestSuite() {
    delete server_;
    delete model_;
  }
  static Model* model_;
  static test::TestServer* server_;
};
Model* Tokenize::model_ = nullptr;
test::TestServer* Tokenize::server_ = nullptr;

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

std::string story_text(size_t bytes) {
  const std::string s = "Once upon a time, there was a little girl named Lily. She loved to play outside.\n";
  std::string out;
  while (out.size() < bytes) out += s;
  return out;
}

TEST_F(Tokenize, PiecesEndBeforeAWordBoundary) {
  const std::string t = story_text(100 << 10);
  for (size_t from = 0; from < t.size();) {
    const size_t end = server::piece_end(t, from, 16 << 10);
    ASSERT_GT(end, from);
    if (end < t.size()) {
      EXPECT_TRUE(t[end] == ' ' || t[end] == '\n') << end;
      EXPECT_FALSE(t[end - 1] == ' ' || t[end - 1] == '\n') << end;
    }
    from = end;
  }
  // No space at all: cut at a UTF-8 character boundary.
  const std::string e = [] {
    std::string s;
    while (s.size() < (40 << 10)) s += "\xc3\xa9";  // é
    return s;
  }();
  const size_t end = server::piece_end(e, 0, 16 << 10);
  EXPECT_LT(end, e.size());
  EXPECT_NE(static_cast<unsigned char>(e[end]) & 0xC0, 0x80u);
}

// Within the limit the tokens are exactly Tokenizer::encode's; a text of exactly `limit` tokens
// (many pieces long) is not refused, one token fewer allowed is.
TEST_F(Tokenize, ExactWithinTheLimitRefusedBeyond) {
  const Tokenizer& tok = *model_->tokenizer;
  const std::string t = story_text(60 << 10);
  const std::vector<int32_t> want = tok.encode(t, true, false);
  const int64_t n = static_cast<int64_t>(want.size());
  const server::BoundedTokens at = server::encode_within(tok, t, true, false, n);
  EXPECT_FALSE(at.over);
  EXPECT_EQ(at.tokens, want);
  const server::BoundedTokens below = server::encode_within(tok, t, true, false, n - 1);
  EXPECT_TRUE(below.over);
  EXPECT_TRUE(below.tokens.empty());
}

// The work is bounded by the limit: 4 MiB of text against a limit of 400 tokens stops after
// counting about one piece of it, not the whole text.
TEST_F(Tokenize, WorkBoundedByTheLimit) {
  const Tokenizer& tok = *model_->tokenizer;
  const std::string t = story_text(4 << 20);
  const server::BoundedTokens b = server::encode_within(tok, t, true, false, 400);
  EXPECT_TRUE(b.over);
  EXPECT_LT(b.counted, 400 + 20000) << "counted far past the limit";
  // Over HTTP (8 MiB body limit here): refused in well under a second. The whole text would be
  // ~1M tokens (the old server tokenized all of it before refusing).
  for (const char* path : {"/v1/completions", "/v1/contexts"}) {
    const json body = std::string(path) == "/v1/completions" ? json{{"prompt", t}, {"max_tokens", 4}} : json{{"text", t}};
    // CPU time of this process (the server runs in it), not wall time: the machine may be loaded.
    const double cpu0 = process_cpu_seconds();
    const Reply r = post(*server_, path, body);
    const double cpu = process_cpu_seconds() - cpu0;
    EXPECT_EQ(r.status, 400) << r.body.substr(0, 300);
    EXPECT_EQ(r.json["error"]["code"], "context_length_exceeded");
    EXPECT_LT(cpu, 3.0) << path << ": tokenizing the whole text takes ~10 s of CPU";
  }
  const Reply chat = post(*server_, "/v1/chat/completions",
                          json{{"messages", json::array({{{"role", "user"}, {"content", t}}})}});
  EXPECT_EQ(chat.status, 400);
  EXPECT_EQ(chat.json["error"]["code"], "context_length_exceeded");
  // JSON arrays are bounded too: 2M token ids are refused while parsing.
  std::string ids = "[1";
  while (ids.size() < (4 << 20)) ids += ",1";
  const Reply many = post(*server_, "/v1/completions", R"({"prompt": )" + ids + "]}");
  EXPECT_EQ(many.status, 400) << many.body.substr(0, 300);
}

TEST_F(Tokenize, TokenizeAndDetokenizeEndpoints) {
  const Tokenizer& tok = *model_->tokenizer;
  const std::string text = "Once upon a time, Lily saw a big red ball.";
  const Reply a = post(*server_, "/tokenize", json{{"content", text}});
  ASSERT_EQ(a.status, 200) << a.body;
  EXPECT_EQ(a.json["tokens"].get<std::vector<int32_t>>(), tok.encode(text, false, true));
  const Reply b = post(*server_, "/tokenize", json{{"content", text}, {"add_special", true}});
  EXPECT_EQ(b.json["tokens"].get<std::vector<int32_t>>(), tok.encode(text, true, true));
  EXPECT_EQ(b.json["tokens"][0], tok.bos());
  // Pieces: each token's bytes; together (past BOS) the text, with SentencePiece's leading space.
  const Reply p = post(*server_, "/tokenize", json{{"content", text}, {"with_pieces", true}});
  ASSERT_EQ(p.status, 200) << p.body;
  std::string joined;
  for (const auto& x : p.json["tokens"]) {
    EXPECT_TRUE(x["id"].is_number_integer());
    joined += x["piece"].get<std::string>();
  }
  EXPECT_EQ(joined, " " + text);
  // Mixed content: strings and ids.
  const std::vector<int32_t> hello = tok.encode("Hello", false, true);
  const Reply m = post(*server_, "/tokenize", json{{"content", json::array({"Hello", 42})}});
  std::vector<int32_t> want = hello;
  want.push_back(42);
  EXPECT_EQ(m.json["tokens"].get<std::vector<int32_t>>(), want);
  // Back again.
  const Reply d = post(*server_, "/detokenize", json{{"tokens", a.json["tokens"]}});
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.json["content"], text);
  // Refusals name the field.
  for (const auto& [path, body, param] : std::vector<std::tuple<std::string, json, std::string>>{
           {"/tokenize", json::object(), "content"},
           {"/tokenize", json{{"content", 5}}, "content"},
           {"/tokenize", json{{"content", "x"}, {"bogus", 1}}, "bogus"},
           {"/detokenize", json{{"tokens", json::array({1, 999999})}}, "tokens"},
           {"/detokenize", json{{"tokens", "abc"}}, "tokens"}}) {
    const Reply r = post(*server_, path, body);
    EXPECT_EQ(r.status, 400) << path << " " << body.dump();
    EXPECT_EQ(r.json["error"]["param"], param) << r.body;
  }
  EXPECT_EQ(post(*server_, "/tokenize", json{{"content", story_text(1 << 20)}}).json["error"]["code"],
            "context_length_exceeded");
}

}  // namespace
}  // namespace kvs
