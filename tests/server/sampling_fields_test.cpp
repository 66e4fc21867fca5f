// The sampling fields through the API: penalties and logit_bias change the answer as the sampler
// defines them, n samples and arrays of prompts give one choice per prompt x n in index order with
// seeds derived from the request's, stop lists longer than OpenAI's 4, other servers' fields
// accepted at their neutral values and refused by name at any other.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>

#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "server_test_util.h"

namespace kvs {
namespace {

using json = nlohmann::json;
using test::Reply;

class SamplingFields : public test::StoriesServerSuite {
 protected:
  Reply post(const json& b, const char* path = "/v1/completions") { return test::post(srv(), path, b); }
};

TEST_F(SamplingFields, PenaltiesAndLogitBiasChangeTheGreedyAnswer) {
  const std::string prompt = "Once upon a time";
  const json base = {{"prompt", prompt}, {"max_tokens", 160}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 0}};
  const Reply plain = post(base);
  ASSERT_EQ(plain.status, 200) << plain.body;
  auto tokens_of = [](const Reply& r) {
    std::vector<std::string> t;
    for (const auto& x : r.json["choices"][0]["logprobs"]["tokens"]) t.push_back(x.get<std::string>());
    return t;
  };
  auto distinct = [](const std::vector<std::string>& t) { return std::set<std::string>(t.begin(), t.end()).size(); };
  // Neutral values give the same answer.
  json neutral = base;
  neutral["presence_penalty"] = 0;
  neutral["frequency_penalty"] = 0;
  neutral["repetition_penalty"] = 1;
  neutral["logit_bias"] = json::object();
  EXPECT_EQ(post(neutral).json["choices"][0]["text"], plain.json["choices"][0]["text"]);
  // A strong frequency penalty spreads the answer over more distinct tokens.
  json freq = base;
  freq["frequency_penalty"] = 2.0;
  const Reply f = post(freq);
  ASSERT_EQ(f.status, 200) << f.body;
  EXPECT_NE(f.json["choices"][0]["text"], plain.json["choices"][0]["text"]);
  EXPECT_GT(distinct(tokens_of(f)), distinct(tokens_of(plain)));
  json rep = base;
  rep["repetition_penalty"] = 2.0;
  EXPECT_NE(post(rep).json["choices"][0]["text"], plain.json["choices"][0]["text"]);
  // logit_bias: the greedy first token banned, the next best comes instead (computed here from the
  // model's logits); +100 on a token makes every token that one.
  Engine eng(*model_, EngineParams{.n_threads = 2});
  auto cache = eng.new_cache();
  const std::vector<int32_t> ids = model_->tokenizer->encode(prompt, true, false);
  std::vector<float> last = eng.forward(*cache, ids, Logits::Last);
  const int32_t first = argmax(last);
  last[static_cast<size_t>(first)] = -INFINITY;
  const int32_t second = argmax(last);
  json ban = base;
  ban["max_tokens"] = 1;
  ban["logit_bias"] = {{std::to_string(first), -100}};
  const Reply b = post(ban);
  ASSERT_EQ(b.status, 200) << b.body;
  EXPECT_EQ(b.json["choices"][0]["logprobs"]["tokens"][0], model_->tokenizer->token_bytes(second));
  json force = base;
  force["max_tokens"] = 5;
  force["logit_bias"] = {{"42", 100}};
  const std::string t42 = model_->tokenizer->token_bytes(42);
  EXPECT_EQ(post(force).json["choices"][0]["text"], t42 + t42 + t42 + t42 + t42);
  // Bad values are refused by name.
  for (const json& bad : {json{{"logit_bias", {{"abc", 1}}}}, json{{"logit_bias", {{"99999", 1}}}},
                          json{{"logit_bias", {{"5", 101}}}}, json{{"presence_penalty", 3}},
                          json{{"repetition_penalty", 0}}}) {
    json r = base;
    r.update(bad);
    const Reply x = post(r);
    EXPECT_EQ(x.status, 400) << bad.dump() << " -> " << x.body;
    EXPECT_NE(x.json["error"]["param"].get<std::string>().find(bad.begin().key()), std::string::npos) << x.body;
  }
}

TEST_F(SamplingFields, NSamplesAndPromptArrays) {
  const json req = {{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 1.0}, {"n", 3}, {"seed", 7}};
  const Reply a = post(req);
  ASSERT_EQ(a.status, 200) << a.body;
  ASSERT_EQ(a.json["choices"].size(), 3u);
  std::set<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a.json["choices"][i]["index"], i);
    texts.insert(a.json["choices"][i]["text"].get<std::string>());
  }
  EXPECT_GE(texts.size(), 2u) << "independent samples";
  EXPECT_EQ(post(req).json["choices"], a.json["choices"]) << "seeded: the same samples again";
  // Sample 0 is what n = 1 with the same seed gives.
  json one = req;
  one["n"] = 1;
  EXPECT_EQ(post(one).json["choices"][0]["text"], a.json["choices"][0]["text"]);
  EXPECT_EQ(a.json["usage"]["completion_tokens"], 36);
  // Prompts x n: index = prompt * n + sample; each prompt's samples are its own (same seeds).
  const std::vector<int32_t> ids = model_->tokenizer->encode("Lily saw a big", true, false);
  json arr = req;
  arr["n"] = 2;
  arr["prompt"] = json::array({"Once upon a time", "Lily saw a big"});
  const Reply p = post(arr);
  ASSERT_EQ(p.status, 200) << p.body;
  ASSERT_EQ(p.json["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(p.json["choices"][i]["index"], i);
  EXPECT_EQ(p.json["choices"][0]["text"], a.json["choices"][0]["text"]);
  EXPECT_EQ(p.json["choices"][1]["text"], a.json["choices"][1]["text"]);
  json ids_arr = arr;
  ids_arr["prompt"] = json::array({model_->tokenizer->encode("Once upon a time", true, false), ids});
  const Reply q = post(ids_arr);
  ASSERT_EQ(q.status, 200) << q.body;
  EXPECT_EQ(q.json["choices"], p.json["choices"]) << "token ids give the same prompts";
  // Chat: n choices.
  const Reply c = post(json{{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})},
                            {"max_tokens", 6},
                            {"n", 3},
                            {"seed", 3},
                            {"temperature", 0}},
                       "/v1/chat/completions");
  ASSERT_EQ(c.status, 200) << c.body;
  ASSERT_EQ(c.json["choices"].size(), 3u);
  EXPECT_EQ(c.json["choices"][2]["message"]["content"], c.json["choices"][0]["message"]["content"]) << "greedy";
  // Streamed: every choice's chunks carry its index; each index finishes once.
  json st = arr;
  st["stream"] = true;
  httplib::Client cl = srv().client();
  std::string body;
  auto res = cl.Post("/v1/completions", st.dump(), "application/json");
  ASSERT_TRUE(res);
  std::map<int, std::string> streamed;
  std::map<int, int> finishes;
  for (size_t pos = res->body.find("data: "); pos != std::string::npos; pos = res->body.find("data: ", pos + 6)) {
    const std::string d = res->body.substr(pos + 6, res->body.find('\n', pos) - pos - 6);
    if (d == "[DONE]") continue;
    const json e = json::parse(d);
    for (const auto& ch : e["choices"]) {
      streamed[ch["index"].get<int>()] += ch["text"].get<std::string>();
      if (!ch["finish_reason"].is_null()) ++finishes[ch["index"].get<int>()];
    }
  }
  ASSERT_EQ(streamed.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(streamed[i], p.json["choices"][i]["text"]) << i;
    EXPECT_EQ(finishes[i], 1) << i;
  }
  // Too many choices, a bad prompt in the array: refused by name.
  json many = req;
  many["n"] = 129;
  EXPECT_EQ(post(many).json["error"]["param"], "n");
  json mixed = req;
  mixed["prompt"] = json::array({"a", json::array({1, 2}), 5});
  EXPECT_EQ(post(mixed).json["error"]["param"], "prompt");
}

TEST_F(SamplingFields, StopListsOfManyStrings) {
  const json base = {{"prompt", "Once upon a time"}, {"max_tokens", 40}, {"temperature", 0}};
  const Reply plain = post(base);
  const std::string text = plain.json["choices"][0]["text"];
  ASSERT_GT(text.size(), 12u);
  // Six stop strings (humaneval sends five); the one that appears cuts the text before it.
  const std::string cut = text.substr(8, 4);
  json s = base;
  s["stop"] = json::array({"\nclass", "\ndef", "\n#", "\nif", "\nprint", cut});
  const Reply r = post(s);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.json["choices"][0]["text"], text.substr(0, text.find(cut)));
  EXPECT_EQ(r.json["choices"][0]["finish_reason"], "stop");
  json many = base;
  many["stop"] = json::array();
  for (int i = 0; i < 64; ++i) many["stop"].push_back("zz" + std::to_string(i));
  EXPECT_EQ(post(many).status, 200);
  many["stop"].push_back("one too many");
  const Reply over = post(many);
  EXPECT_EQ(over.status, 400);
  EXPECT_EQ(over.json["error"]["param"], "stop");
}

TEST_F(SamplingFields, OtherServersFieldsAtNeutralValues) {
  const json neutral = {{"prompt", "Hi"},
                        {"max_tokens", 2},
                        {"repetition_penalty", 1},
                        {"cache_prompt", true},
                        {"n_probs", 0},
                        {"top_k", -1},
                        {"min_p", 0},
                        {"typical_p", 1},
                        {"ignore_eos", false},
                        {"best_of", 1},
                        {"use_beam_search", false},
                        {"skip_special_tokens", true},
                        {"spaces_between_special_tokens", true},
                        {"include_stop_str_in_output", false},
                        {"user", "u1"},
                        {"suffix", nullptr},
                        {"length_penalty", 1},
                        {"min_tokens", 0},
                        {"stop_token_ids", json::array()},
                        {"repeat_penalty", 1},
                        {"repeat_last_n", 64},
                        {"mirostat", 0},
                        {"tfs_z", 1},
                        {"id_slot", -1},
                        {"priority", 0}};
  const Reply ok = post(neutral);
  EXPECT_EQ(ok.status, 200) << ok.body;
  json chat = neutral;
  chat.erase("prompt");
  chat.erase("suffix");
  chat["messages"] = json::array({{{"role", "user"}, {"content", "Hi"}}});
  EXPECT_EQ(post(chat, "/v1/chat/completions").status, 200);
  for (const auto& [field, value] : std::vector<std::pair<std::string, json>>{{"typical_p", 0.9},
                                                                             {"n_probs", 3},
                                                                             {"best_of", 3},
                                                                             {"use_beam_search", true},
                                                                             {"mirostat", 2},
                                                                             {"skip_special_tokens", false},
                                                                             {"include_stop_str_in_output", true},
                                                                             {"min_tokens", 4},
                                                                             {"stop_token_ids", json::array({2})},
                                                                             {"kv_compresion", {{"press", "snapkv"}}},
                                                                             {"kv_press", "snapkv"},
                                                                             {"frobnicate", 1}}) {
    json b = {{"prompt", "Hi"}, {"max_tokens", 2}};
    b[field] = value;
    const Reply r = post(b);
    EXPECT_EQ(r.status, 400) << field << ": " << r.body;
    EXPECT_EQ(r.json["error"]["param"], field) << r.body;
  }
}

TEST_F(SamplingFields, ChatLogprobs) {
  const json b = {{"messages", json::array({{{"role", "user"}, {"content", "Tell a story"}}})},
                  {"max_tokens", 6},
                  {"temperature", 0},
                  {"ignore_eos", true},
                  {"logprobs", true},
                  {"top_logprobs", 3}};
  const Reply r = post(b, "/v1/chat/completions");
  ASSERT_EQ(r.status, 200) << r.body;
  const json& content = r.json["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 6u);
  std::string joined;
  for (const auto& e : content) {
    joined += e["token"].get<std::string>();
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    EXPECT_EQ(e["top_logprobs"][0]["logprob"], e["logprob"]) << "greedy: the token is the most likely";
    EXPECT_LE(e["logprob"].get<double>(), 0.0);
    EXPECT_EQ(e["bytes"].size(), e["token"].get<std::string>().size());
  }
  EXPECT_EQ(joined, r.json["choices"][0]["message"]["content"]);
  json no = b;
  no.erase("logprobs");
  EXPECT_EQ(post(no, "/v1/chat/completions").json["error"]["param"], "top_logprobs");
}

}  // namespace
}  // namespace kvs
