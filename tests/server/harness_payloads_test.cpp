// What evaluation and benchmark harnesses send, replayed over raw HTTP exactly as they send it:
// lm-evaluation-harness's loglikelihood and generate_until payloads and `vllm bench serve`'s, answered
// 200 with the fields those clients read; lm-eval's loglikelihood of a known continuation equals the
// one computed here from `kvshrink logits` of the same tokens (full cache); under compression the
// prompt's scores follow the rule docs/server.md states.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "cli_process.h"
#include "server_test_util.h"

namespace kvs {
namespace {

using json = nlohmann::json;
using test::Reply;

class HarnessPayloads : public test::StoriesServerSuite {
 protected:
  // A JSON POST as raw bytes on a fresh connection (closed after the response).
  std::string raw(const std::string& path, const std::string& body) {
    return test::raw_exchange(srv().port(), test::raw_post(path, body, "Connection: close\r\n"));
  }
  std::vector<int32_t> encode(const std::string& s, bool bos = true) { return model_->tokenizer->encode(s, bos, false); }
};

// The data: events of a streamed response's body (a chunked body: the events' lines are read
// from the raw bytes as they are, chunk sizes skipped).
std::vector<json> sse_events(const std::string& resp) {
  std::vector<json> out;
  const size_t start = resp.find("\r\n\r\n");
  for (size_t p = resp.find("data: ", start); p != std::string::npos; p = resp.find("data: ", p + 6)) {
    const size_t e = resp.find('\n', p);
    const std::string d = resp.substr(p + 6, e - p - 6);
    if (d.rfind("[DONE]", 0) == 0) continue;
    out.push_back(json::parse(d, nullptr, false));
  }
  return out;
}

// log softmax(row)[t] in double, from raw logits.
double log_softmax(const float* row, int V, int32_t t) {
  double mx = row[0];
  for (int v = 0; v < V; ++v) mx = std::max<double>(mx, row[v]);
  double z = 0;
  for (int v = 0; v < V; ++v) z += std::exp(row[v] - mx);
  return row[t] - mx - std::log(z);
}

// lm_eval/models/openai_completions.py LocalCompletionsAPI.parse_logprobs: the continuation's
// logprob sum over token_logprobs[ctxlen:-1], greedy when each equals its top entry's maximum.
std::pair<double, bool> lm_eval_parse(const json& choice, size_t ctxlen) {
  const json& lp = choice["logprobs"];
  const json& tl = lp["token_logprobs"];
  const json& top = lp["top_logprobs"];
  double sum = 0;
  bool greedy = true;
  for (size_t i = ctxlen; i + 1 < tl.size(); ++i) {
    sum += tl[i].get<double>();
    double best = -INFINITY;
    for (const auto& [k, v] : top[i].items()) best = std::max(best, v.get<double>());
    if (tl[i].get<double>() != best) greedy = false;
  }
  return {sum, greedy};
}

TEST_F(HarnessPayloads, LmEvalLoglikelihoodEqualsKvshrinkLogits) {
  // A context and a continuation, tokenized as lm-eval's tokenized requests send them.
  const std::vector<int32_t> ctx = encode("Once upon a time, there was a little girl named Lily. She loved to");
  const std::vector<int32_t> cont = encode(" play outside in the park.", false);
  std::vector<int32_t> all = ctx;
  all.insert(all.end(), cont.begin(), cont.end());
  // lm_eval/models/openai_completions.py, LocalCompletionsAPI._create_payload(generate=False): a
  // batch of token-id prompts (here 2: the pair twice, as a batch of two requests would).
  const json payload = {{"model", "stories260K"}, {"prompt", json::array({all, ctx})}, {"temperature", 0},
                        {"max_tokens", 1},        {"logprobs", 1},                       {"seed", 1234},
                        {"echo", true}};
  const std::string resp = raw("/v1/completions", payload.dump());
  ASSERT_EQ(test::raw_status(resp), 200) << resp;
  const json out = test::raw_body_json(resp);
  ASSERT_EQ(out["choices"].size(), 2u);
  std::vector<json> choices = out["choices"].get<std::vector<json>>();
  std::sort(choices.begin(), choices.end(), [](const json& a, const json& b) { return a["index"] < b["index"]; });
  EXPECT_EQ(choices[0]["index"], 0);
  EXPECT_EQ(choices[1]["index"], 1);
  const json& lp = choices[0]["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), all.size() + 1) << "every prompt token, then the generated one";
  EXPECT_TRUE(lp["token_logprobs"][0].is_null()) << "nothing predicts the first prompt token";
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_EQ(lp["tokens"].size(), all.size() + 1);
  EXPECT_EQ(lp["text_offset"].size(), all.size() + 1);
  for (size_t i = 1; i < lp["top_logprobs"].size(); ++i) EXPECT_EQ(lp["top_logprobs"][i].size(), 1u) << i;
  const auto [sum, greedy] = lm_eval_parse(choices[0], ctx.size());

  // The reference: `kvshrink logits` of the same ids (the full forward pass), log softmax here.
  test::TempDir dir("harness_logits");
  std::string ids;
  for (int32_t t : all) ids += std::to_string(t) + ",";
  const test::ProcResult pr = test::run_process(
      {test::kvshrink_binary(), "logits", "-m", test::stories_gguf(), "-t", "1", "--ids", ids, "-o", dir.str() + "/l.f32"},
      dir.str(), "logits");
  ASSERT_EQ(pr.exit_code, 0) << pr.err;
  const int V = model_->hp.n_vocab;
  std::vector<float> l(all.size() * V);
  std::ifstream(dir.str() + "/l.f32", std::ios::binary).read(reinterpret_cast<char*>(l.data()), l.size() * sizeof(float));
  double ref = 0;
  bool ref_greedy = true;
  for (size_t i = ctx.size(); i < all.size(); ++i) {
    const float* row = l.data() + (i - 1) * V;
    ref += log_softmax(row, V, all[i]);
    ref_greedy = ref_greedy && std::max_element(row, row + V) - row == all[i];
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), log_softmax(row, V, all[i]), 1e-3) << "token " << i;
  }
  EXPECT_NEAR(sum, ref, 2e-3);
  EXPECT_EQ(greedy, ref_greedy);
  EXPECT_LT(sum, 0.0);

  // The same as text (tokenized_requests=False, batch of 1: a string prompt), and with max_tokens 0.
  const json text = {{"model", "stories260K"}, {"prompt", "Once upon a time"}, {"temperature", 0},
                     {"max_tokens", 0},        {"logprobs", 1},              {"seed", 1234},
                     {"echo", true}};
  const std::string r2 = raw("/v1/completions", text.dump());
  ASSERT_EQ(test::raw_status(r2), 200) << r2;
  const json o2 = test::raw_body_json(r2);
  EXPECT_EQ(o2["choices"][0]["text"], "Once upon a time");
  EXPECT_EQ(o2["choices"][0]["logprobs"]["token_logprobs"].size(), encode("Once upon a time").size());
  EXPECT_EQ(o2["usage"]["completion_tokens"], 0);
}

TEST_F(HarnessPayloads, LmEvalGenerateUntil) {
  // lm_eval/models/openai_completions.py, LocalCompletionsAPI._create_payload(generate=True): the
  // batch's token ids, max_gen_toks, temperature 0, `until` + the EOS string as stop, the seed.
  const json payload = {{"prompt", json::array({encode("Once upon a time"), encode("Lily saw a big")})},
                        {"model", "stories260K"},
                        {"max_tokens", 64},
                        {"temperature", 0},
                        {"stop", json::array({"\n\n", "Question:", "</s>"})},
                        {"seed", 1234}};
  const std::string resp = raw("/v1/completions", payload.dump());
  ASSERT_EQ(test::raw_status(resp), 200) << resp;
  const json out = test::raw_body_json(resp);
  ASSERT_EQ(out["choices"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(out["choices"][i]["index"], i);
    EXPECT_TRUE(out["choices"][i]["text"].is_string());
    EXPECT_FALSE(out["choices"][i]["text"].get<std::string>().empty());
  }
  // Each choice is the answer its prompt gets alone.
  const Reply one = test::post(srv(), "/v1/completions",
                               json{{"prompt", encode("Lily saw a big")}, {"max_tokens", 64}, {"temperature", 0},
                                    {"stop", json::array({"\n\n", "Question:", "</s>"})}});
  EXPECT_EQ(one.json["choices"][0]["text"], out["choices"][1]["text"]);
}

TEST_F(HarnessPayloads, VllmBenchServe) {
  // vllm/benchmarks/lib/endpoint_request_func.py async_request_openai_completions (with
  // --ignore-eos and the default sampling extra_body {"temperature": 0.0}).
  const json payload = {{"model", "stories260K"},
                        {"prompt", "Once upon a time, there was a little girl"},
                        {"repetition_penalty", 1.0},
                        {"max_tokens", 16},
                        {"logprobs", nullptr},
                        {"stream", true},
                        {"stream_options", {{"include_usage", true}}},
                        {"ignore_eos", true},
                        {"temperature", 0.0}};
  for (const bool llama_cpp : {false, true}) {
    json p = payload;
    if (llama_cpp) p["cache_prompt"] = false;  // the llama.cpp backend's extra field
    const std::string resp = raw("/v1/completions", p.dump());
    ASSERT_EQ(test::raw_status(resp), 200) << resp;
    const std::vector<json> ev = sse_events(resp);
    std::string text;
    bool usage = false;
    for (const json& e : ev) {
      if (!e["choices"].empty()) text += e["choices"][0].value("text", "");
      if (e.contains("usage") && e["usage"].is_object()) {
        usage = true;
        EXPECT_EQ(e["usage"]["completion_tokens"], 16);
        EXPECT_GT(e["usage"]["prompt_tokens"].get<int>(), 0);
      }
    }
    EXPECT_TRUE(usage);
    EXPECT_FALSE(text.empty());
  }
  // async_request_openai_chat_completions: messages with a text part, max_completion_tokens.
  const json chat = {{"model", "stories260K"},
                     {"messages", json::array({{{"role", "user"},
                                                {"content", json::array({{{"type", "text"}, {"text", "Tell a story"}}})}}})},
                     {"max_completion_tokens", 8},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}},
                     {"ignore_eos", true},
                     {"temperature", 0.0}};
  const std::string resp = raw("/v1/chat/completions", chat.dump());
  ASSERT_EQ(test::raw_status(resp), 200) << resp;
  bool usage = false;
  for (const json& e : sse_events(resp))
    if (e.contains("usage") && e["usage"].is_object()) usage = e["usage"]["completion_tokens"] == 8;
  EXPECT_TRUE(usage) << resp;
}

TEST_F(HarnessPayloads, EchoUnderCompressionScoresTheContextByTheFullPass) {
  // With the whole prompt as the context (all but its last token compressed), every prompt token
  // is scored by the full-cache pass: the same values as without compression; the generated
  // tokens are scored on the compressed cache.
  const std::vector<int32_t> ids = encode(test::kStory);
  json b = {{"prompt", ids}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 2}, {"echo", true}};
  const Reply full = test::post(srv(), "/v1/completions", b);
  ASSERT_EQ(full.status, 200) << full.body;
  b["kv_compression"] = {{"press", "snapkv"}, {"keep", 0.25}};
  const Reply comp = test::post(srv(), "/v1/completions", b);
  ASSERT_EQ(comp.status, 200) << comp.body;
  EXPECT_EQ(comp.json["usage"]["kv_press"], "snapkv");
  const json& a = full.json["choices"][0]["logprobs"]["token_logprobs"];
  const json& c = comp.json["choices"][0]["logprobs"]["token_logprobs"];
  ASSERT_GE(c.size(), ids.size());
  for (size_t i = 1; i < ids.size(); ++i) EXPECT_NEAR(a[i].get<double>(), c[i].get<double>(), 1e-6) << i;
  EXPECT_TRUE(c[0].is_null());
  // Streamed: the prompt (text and scores) comes first, then the answer's tokens.
  b["stream"] = true;
  const std::string resp = raw("/v1/completions", b.dump());
  ASSERT_EQ(test::raw_status(resp), 200) << resp;
  const std::vector<json> ev = sse_events(resp);
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev[0]["choices"][0]["logprobs"]["token_logprobs"].size(), ids.size());
  size_t streamed = 0;
  for (size_t i = 1; i < ev.size(); ++i)
    if (!ev[i]["choices"].empty() && ev[i]["choices"][0]["logprobs"].is_object())
      streamed += ev[i]["choices"][0]["logprobs"]["token_logprobs"].size();
  EXPECT_EQ(streamed, c.size() - ids.size());
  // On a stored context the first question token's prediction is gone: refused by name.
  const Reply ctx = test::post(srv(), "/v1/contexts", json{{"text", test::kStory}});
  ASSERT_EQ(ctx.status, 200) << ctx.body;
  const Reply on_ctx = test::post(srv(), "/v1/completions",
                                  json{{"prompt", " The end"}, {"context_id", ctx.json["id"]}, {"echo", true}, {"logprobs", 1}});
  EXPECT_EQ(on_ctx.status, 400);
  EXPECT_EQ(on_ctx.json["error"]["param"], "echo");
}

}  // namespace
}  // namespace kvs
