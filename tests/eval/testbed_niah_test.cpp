// Retrieval accuracy in the default suite (issue 29 item 4): the committed v7s1 testbed model
// retrieves the 7-digit needle of NIAH at 1,024 tokens with the full cache, and every press at
// keep 1 — the uncompressed reference each press must reproduce — gives exactly the full cache's
// answers, through the eval harness (prompt assembly, the shared prefill, forks, decoding, scoring).
// A regression in the forward, the tokenizer, the prompt format or a press's keep-1 path shows here.
// (The larger grid, with compressed cells, is tests/slow/testbed_quality_test.cpp.)
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "eval/runner.h"
#include "eval_test_util.h"
#include "press/registry.h"

namespace kvs::eval {
namespace {

TEST(TestbedNiah, FullCacheRetrievesAndEveryPressAtKeepOneMatchesIt) {
  auto model = Model::load(std::string(KVS_SOURCE_DIR) + "/testbed/models/v7s1/model-f16.gguf");
  test::TempDir dir("testbed_niah");
  EvalOptions o;
  o.tasks = {"niah"};
  std::vector<std::string> fixed;
  for (const auto& info : press_registry()) {
    const PressEntry e = parse_press_entry(info.name);
    if (e.adaptive) continue;  // adaptive presses choose their own keep: no keep-1 cell
    o.presses.push_back(e);
    fixed.push_back(info.name);
  }
  ASSERT_GE(fixed.size(), 14u);
  o.keeps = {1.0};
  o.task.lengths = {1024};
  o.task.depths = {0.1, 0.5, 0.9};
  o.task.samples = 1;
  o.data_dir = test::data_dir();
  o.out_dir = dir.str();
  o.progress = false;
  EngineParams ep;
  ep.n_threads = 2;
  const auto s = run_eval(o, *model, ep);
  ASSERT_EQ(s.failed, 0u);
  std::map<std::string, std::map<std::string, std::string>> answers;  // press -> sample -> answer
  std::map<std::string, double> score;
  std::ifstream f(s.results_path);
  std::string line;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    const std::string press = j["press"].get<std::string>();
    answers[press][j["sample"].get<std::string>()] = j["answers"].dump();
    score[press] += j["score"].get<double>() / 3.0;
  }
  EXPECT_DOUBLE_EQ(score.at("full"), 1.0) << "v7s1 retrieves the needle at 10%, 50% and 90% depth";
  for (const auto& p : fixed) {
    SCOPED_TRACE(p);
    ASSERT_EQ(answers.count(p), 1u);
    EXPECT_EQ(answers.at(p), answers.at("full"));
  }
}

}  // namespace
}  // namespace kvs::eval
