// The CLI's rough edges (issue 15): `tokenize` / `detokenize` with a tokenizer-only Hugging Face
// folder (no config.json, no weights), detokenize as the inverse of tokenize, and `eval` taking a
// question template and an answer prefix (recorded in run.json; a bad template is refused).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_process.h"
#include "kvcache/cache_file.h"
#include "runtime/test_util.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;

std::string source(const std::string& rel) { return std::string(KVS_SOURCE_DIR) + "/" + rel; }

class CliPromptTools : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(test::kvshrink_binary())) GTEST_FAIL() << test::kvshrink_binary() << " is missing: build kvshrink first";
  }
};

TEST_F(CliPromptTools, TokenizeATokenizerOnlyFolderAndDetokenizeBack) {
  test::TempDir d("cli_tokenizer_only");
  // Only the tokenizer files of the testbed model: no config.json, no model.safetensors.
  const fs::path tok = fs::path(d.str()) / "tok";
  fs::create_directories(tok);
  for (const char* f : {"tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"})
    fs::copy_file(source(std::string("testbed/models/v7s1/") + f), tok / f);
  const std::string text = "The special magic number for quiet-harbor is 4071589.";
  auto r = test::run_kvshrink({"tokenize", "-m", tok.string(), "-p", text, "--ids"}, d.str(), "tok");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string ids = r.out;
  ASSERT_EQ(ids.front(), '[');
  // The same ids as through the GGUF model.
  r = test::run_kvshrink({"tokenize", "-m", source("testbed/models/v7s1/model-f16.gguf"), "-p", text, "--ids"}, d.str(), "tok_gguf");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, ids);
  // detokenize takes tokenize's output as it is printed ("[1, 2, 3]") and gives the text back.
  r = test::run_kvshrink({"detokenize", "-m", tok.string(), "--skip-special", ids}, d.str(), "detok");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, text + "\n");
  // ... also from a file, and with plain spaces.
  {
    std::ofstream(d / "ids.txt") << ids;
  }
  r = test::run_kvshrink({"detokenize", "-m", tok.string(), "--skip-special", "--no-newline", "-f", d / "ids.txt"}, d.str(), "detok_f");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, text);
  // Errors name the bad id.
  r = test::run_kvshrink({"detokenize", "-m", tok.string(), "1", "99999999"}, d.str(), "detok_bad");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("99999999"), std::string::npos) << r.err;
  r = test::run_kvshrink({"detokenize", "-m", tok.string(), "1", "x2"}, d.str(), "detok_bad2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'x2'"), std::string::npos) << r.err;
}

TEST_F(CliPromptTools, EvalTakesAQuestionTemplateAndAnswerPrefix) {
  test::TempDir d("cli_eval_template");
  const std::string model = source("testbed/models/v7s1/model-f16.gguf");
  const std::string data = test::test_data("eval");  // the NIAH haystacks
  auto r = test::run_kvshrink({"eval", "-m", model, "--data", data, "--tasks", "niah", "--presses", "full", "--samples", "1", "--lengths", "256",
                               "--depths", "0.5", "--max-new", "8", "-t", "2", "--no-progress", "--no-report",
                               "--question-template", "\n{question}", "--answer-prefix", "{prefix}", "-o", d / "out"},
                              d.str(), "eval", 120);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto run = nlohmann::json::parse(test::read_all(d / "out/run.json"));
  EXPECT_NE(run.dump().find("\"question_template\":\"\\n{question}\""), std::string::npos) << run.dump();
  EXPECT_NE(run.dump().find("\"answer_prefix\":\"{prefix}\""), std::string::npos) << run.dump();
  // The format matters: the testbed model (trained on "\n{question} {answer prefix}") retrieves
  // with its own format and not with a Question:/Answer: one without the answer prefix.
  auto mean_score = [&](const std::string& dir) {
    std::istringstream in(test::read_all(dir + "/results.jsonl"));
    std::string line;
    double sum = 0;
    int n = 0;
    while (std::getline(in, line))
      if (!line.empty()) sum += nlohmann::json::parse(line).value("score", 0.0), ++n;
    return n ? sum / n : -1.0;
  };
  const std::vector<std::string> grid = {"eval", "-m", model, "--data", data, "--tasks", "niah", "--presses", "full", "--samples", "1",
                                         "--lengths", "512", "--depths", "0.3,0.7", "--max-new", "8", "-t", "2",
                                         "--no-progress", "--no-report"};
  auto own = grid, other = grid;
  own.insert(own.end(), {"-o", d / "own"});
  other.insert(other.end(), {"--question-template", "\n\nQuestion: {question}\nAnswer:", "--answer-prefix", "", "-o", d / "other"});
  ASSERT_EQ(test::run_kvshrink(own, d.str(), "eval_own", 120).exit_code, 0);
  ASSERT_EQ(test::run_kvshrink(other, d.str(), "eval_other", 120).exit_code, 0);
  EXPECT_GT(mean_score(d / "own"), mean_score(d / "other"));
  EXPECT_GE(mean_score(d / "other"), 0.0);

  r = test::run_kvshrink({"eval", "-m", model, "--tasks", "niah", "--presses", "full", "--question-template", "no placeholder",
                          "-o", d / "out2"},
                         d.str(), "eval_bad");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--question-template must contain {question}"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvs

namespace kvs {
namespace {

size_t count_of(const std::string& s, const std::string& needle) {
  size_t n = 0;
  for (size_t at = 0; (at = s.find(needle, at)) != std::string::npos; at += needle.size()) ++n;
  return n;
}

// `kvshrink run --inspect` and `kvshrink inspect` without a browser: the page's token count, the
// placeholder page without the text, and a text that is not the compressed one.
TEST(InspectCli, RunInspectAndInspectWithoutOrWithWrongText) {
  if (!fs::exists(test::kvshrink_binary())) GTEST_FAIL() << test::kvshrink_binary() << " is missing: build kvshrink first";
  test::TempDir d("cli_inspect");
  const std::string model = source("testbed/models/v7s1/model-f16.gguf");
  const std::string context = source("eval/examples/needle_context.txt");
  auto r = test::run_kvshrink({"run", "-m", model, "--press", "keydiff", "--keep", "0.4", "--context", context, "--question",
                               "What is it?", "-n", "2", "-t", "2", "--inspect", d / "run.html", "--inspect-png", d / "run.png"},
                              d.str(), "run");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string run_html = test::read_all(d / "run.html");
  EXPECT_EQ(count_of(run_html, "<span class=\"tok"), 1042u);
  EXPECT_EQ(test::read_all(d / "run.png").substr(1, 3), "PNG");

  r = test::run_kvshrink({"compress", "-m", model, "--press", "snapkv", "--keep", "0.4", "--context", context, "-t", "2", "-o",
                          d / "c.kvc"},
                         d.str(), "compress");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // No text given: the header records the context's token ids, so the page shows the text.
  const nlohmann::json header = read_cache_header(d / "c.kvc");
  ASSERT_TRUE(header.contains("context_ids") && header.at("context_ids").is_array());
  EXPECT_EQ(header.at("context_ids").size(), header.at("context_tokens").template get<size_t>());
  r = test::run_kvshrink({"inspect", d / "c.kvc"}, d.str(), "inspect_notext");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("tokens are shown as dots"), std::string::npos) << r.err;
  const std::string html = test::read_all(d / "c.html");  // the default output path
  EXPECT_EQ(count_of(html, "<span class=\"tok"), 1042u);
  EXPECT_NE(html.find("> special<"), std::string::npos);  // a word of the context, not dots
  // The same page with the text given.
  r = test::run_kvshrink({"inspect", d / "c.kvc", "--context", context, "-o", d / "t.html"}, d.str(), "inspect_text");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(test::read_all(d / "t.html"), html);
  // A text that is not the compressed context.
  r = test::run_kvshrink({"inspect", d / "c.kvc", "--context-text", "Some other text.", "-o", d / "x.html"}, d.str(), "inspect_bad");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is not the one the header records"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvs
