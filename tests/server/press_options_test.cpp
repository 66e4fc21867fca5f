// kv_compression fields over HTTP: every value has its JSON type (a number given as a string is a
// 400 naming the field, top-level or press option), a token budget is 1 or more (0 refused by
// name, as documented), and sinks / window given explicitly that alone protect more of the
// context than the keep ratio keeps are refused naming them instead of silently keeping everything.
#include <gtest/gtest.h>

#include "server_test_util.h"

namespace kvs {
namespace {

using nlohmann::json;
using test::post;
using test::Reply;

class PressOptions : public test::StoriesModelSuite {
 protected:
  static void SetUpTestSuite() {
    StoriesModelSuite::SetUpTestSuite();
    server_ = new test::TestServer(*model_, test::test_options());
  }
  static void TearDownTestSuite() {
    delete server_;
    StoriesModelSuite::TearDownTestSuite();
  }
  static Reply complete(const json& compression) {
    return post(*server_, "/v1/completions",
                json{{"prompt", test::kStory}, {"max_tokens", 2}, {"temperature", 0}, {"kv_compression", compression}});
  }
  static void expect_refused(const json& compression, const std::string& param, const std::string& says) {
    const Reply r = complete(compression);
    EXPECT_EQ(r.status, 400) << compression.dump() << " -> " << r.body;
    test::expect_error_shape(r.json, compression.dump());
    if (!r.json.is_object() || !r.json.contains("error")) return;
    if (!param.empty()) EXPECT_EQ(r.json["error"]["param"], param) << compression.dump() << " -> " << r.body;
    EXPECT_NE(r.json["error"]["message"].get<std::string>().find(says), std::string::npos)
        << compression.dump() << " -> " << r.body;
  }
  inline static test::TestServer* server_ = nullptr;
};

TEST_F(PressOptions, ValuesMustHaveTheirJsonType) {
  expect_refused({{"press", "snapkv"}, {"keep", "0.5"}}, "kv_compression.keep", "ratio");
  expect_refused({{"press", "snapkv"}, {"keep", 0.5}, {"options", {{"window_size", "8"}}}},
                 "kv_compression.options.window_size", "must be a JSON number (an integer option), got string \"8\"");
  expect_refused({{"press", "h2o"}, {"keep", 0.5}, {"options", {{"recent_fraction", "0.25"}}}},
                 "kv_compression.options.recent_fraction", "must be a JSON number, got string");
  expect_refused({{"press", "tova"}, {"keep", 0.5}, {"options", {{"per_head", "true"}}}},
                 "kv_compression.options.per_head", "must be a JSON boolean");
  expect_refused({{"press", "tova"}, {"keep", 0.5}, {"options", {{"per_head", 1}}}}, "kv_compression.options.per_head",
                 "must be a JSON boolean");
  expect_refused({{"press", "snapkv"}, {"keep", 0.5}, {"options", {{"allocator", 5}}}},
                 "kv_compression.options.allocator", "must be a JSON string, got integer");
  // The options of the allocator chosen (adakv's alpha) are typed too.
  expect_refused({{"press", "snapkv"}, {"keep", 0.5}, {"options", {{"allocator", "adakv"}, {"alpha", "0.2"}}}},
                 "kv_compression.options.alpha", "must be a JSON number");
  for (const char* f : {"sinks", "window", "budget", "seed", "quality"})
    expect_refused({{"press", "snapkv"}, {f, "4"}}, std::string("kv_compression.") + f, "got string");
  // The same values as JSON numbers and booleans are accepted.
  for (const json& ok : {json{{"press", "snapkv"}, {"keep", 0.5}, {"options", {{"window_size", 8}}}},
                         json{{"press", "h2o"}, {"keep", 0.5}, {"options", {{"recent_fraction", 0.25}}}},
                         json{{"press", "tova"}, {"keep", 0.5}, {"options", {{"per_head", true}}}},
                         json{{"press", "snapkv"}, {"keep", 0.5}, {"options", {{"allocator", "adakv"}, {"alpha", 0.2}}}}}) {
    const Reply r = complete(ok);
    EXPECT_EQ(r.status, 200) << ok.dump() << " -> " << r.body;
  }
}

TEST_F(PressOptions, BudgetIsOneOrMore) {
  expect_refused({{"press", "knorm"}, {"budget", 0}}, "kv_compression.budget", "leave it out");
  expect_refused({{"press", "knorm"}, {"keep", 0.5}, {"budget", 0.0}}, "kv_compression.budget", "[1, ");
  expect_refused({{"press", "knorm"}, {"budget", -1}}, "kv_compression.budget", "[1, ");
  EXPECT_EQ(complete({{"press", "knorm"}, {"budget", 8}}).status, 200);
  const Reply c = post(*server_, "/v1/contexts", json{{"text", test::kStory}, {"kv_compression", {{"press", "knorm"}, {"budget", 8}}}});
  ASSERT_EQ(c.status, 200) << c.body;
  EXPECT_EQ(c.json["kv_compression"]["budget"], 8) << c.body;
  // null is "not given", as for every field.
  EXPECT_EQ(complete({{"press", "knorm"}, {"keep", 0.5}, {"budget", nullptr}}).status, 200);
}

TEST_F(PressOptions, ProtectedTokensBeyondTheKeepBudgetAreRefusedByName) {
  expect_refused({{"press", "knorm"}, {"keep", 0.5}, {"sinks", 1000000000}}, "", "sinks 1000000000 protects");
  expect_refused({{"press", "knorm"}, {"keep", 0.5}, {"window", 1000000000}}, "", "window 1000000000 protects");
  expect_refused({{"press", "snapkv"}, {"keep", 0.25}, {"sinks", 40}, {"window", 40}}, "",
                 "sinks 40 and window 40 protect");
  expect_refused({{"press", "knorm"}, {"budget", 4}, {"window", 10}}, "", "the budget of 4");
  // The same through POST /v1/contexts (refused before any prefill, nothing stored).
  const Reply c = post(*server_, "/v1/contexts",
                       json{{"text", test::kStory}, {"kv_compression", {{"press", "knorm"}, {"keep", 0.5}, {"sinks", 1000000000}}}});
  EXPECT_EQ(c.status, 400) << c.body;
  // Protection within the budget is fine, and so are the press's own defaults on any prompt.
  EXPECT_EQ(complete({{"press", "knorm"}, {"keep", 0.5}, {"sinks", 4}, {"window", 8}}).status, 200);
  EXPECT_EQ(complete({{"press", "snapkv"}, {"keep", 0.05}}).status, 200);
  const Reply shortp = post(*server_, "/v1/completions",
                            json{{"prompt", "Once upon"}, {"max_tokens", 1}, {"kv_compression", {{"press", "snapkv"}, {"keep", 0.5}}}});
  EXPECT_EQ(shortp.status, 200) << shortp.body;
}

}  // namespace
}  // namespace kvs
