// The `kvshrink` binary with UNComp: `presses` lists it with its variants; without a calibration
// it is refused with the command that makes one; `calibrate --press uncomp` makes one (stories260K,
// a few windows, in a temporary KVSHRINK_CALIB_DIR); on the testbed model, with the calibration
// committed beside it (testbed/models/v7s1/model-f16.gguf.kvshrink-calib/uncomp.json, so a fresh
// clone works), run, compress (.kvc) + ask, and eval with both variants.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <set>

#include "cli_shell.h"
#include "test_util.h"

namespace kvs {
namespace {

TEST(UncompCli, PressesCalibrateRunCompressAskEval) {
  if (!std::filesystem::exists(test::kvshrink_bin())) FAIL() << test::kvshrink_bin() << " is missing: build the kvshrink target first";
  test::TempDir dir("uncomp_cli");
  std::string out;
  ASSERT_EQ(test::kvshrink_shell("presses", out), 0) << out;
  for (const char* s : {"\nuncomp ", "variant=group", "group-stage", "layer_groups=calibrated"})
    EXPECT_NE(out.find(s), std::string::npos) << s;
  // No calibration for stories260K in an empty folder: refused, naming the command; then made.
  const std::string stories = "-m '" + test::stories_gguf() + "' -t 1";
  const std::string env = "KVSHRINK_CALIB_DIR='" + (dir / "calib") + "'";
  const std::string story_ctx = dir / "story.txt";
  {
    std::ofstream(story_ctx) << "Once upon a time, there was a little girl named Lily. She loved to play outside in "
                                "the park. One day, she saw a big red ball under a tree.";
  }
  EXPECT_EQ(test::kvshrink_shell("run " + stories + " --press uncomp --keep 0.5 --context '" + story_ctx + "' --question ' Lily' -n 2", out, env), 1)
      << out;
  EXPECT_NE(out.find("kvshrink calibrate --press uncomp"), std::string::npos) << out;
  ASSERT_EQ(test::kvshrink_shell("calibrate " + stories + " --data " + test::test_data("eval") + " --press uncomp --samples 4 --tokens 32 --no-progress", out, env), 0) << out;
  EXPECT_EQ(test::kvshrink_shell("run " + stories + " --press uncomp --keep 0.5 --context '" + story_ctx + "' --question ' Lily' -n 2", out, env), 0)
      << out;
  // The testbed model with its committed calibration (no KVSHRINK_CALIB_DIR).
  const std::string model = "-m '" + std::string(KVS_SOURCE_DIR) + "/testbed/models/v7s1/model-f16.gguf' -t 1";
  const std::string ctx = std::string(KVS_SOURCE_DIR) + "/eval/examples/needle_context.txt";
  ASSERT_EQ(test::kvshrink_shell("run " + model + " --press uncomp --keep 0.25 --context '" + ctx + "' --question 'Who?' -n 4", out), 0) << out;
  ASSERT_EQ(test::kvshrink_shell("compress " + model + " -b 2048 --press uncomp --opt variant=group-stage --opt layer_groups=0,1,2,3 "
                "--keep 0.25 --context '" + ctx + "' -o '" + (dir / "u.kvc") + "'",
                out),
            0)
      << out;
  ASSERT_EQ(test::kvshrink_shell("ask " + model + " '" + (dir / "u.kvc") + "' -n 4 'What is it?'", out), 0) << out;
  ASSERT_EQ(test::kvshrink_shell("eval " + model + " --tasks niah --presses uncomp,uncomp:variant=group-stage:layer_groups=0/1/2/3 "
                "--keep 0.25 --samples 1 --lengths 512 --depths 0.5 --no-progress --no-report -o '" + (dir / "eval") + "'",
                out),
            0)
      << out;
  std::ifstream f(dir / "eval/results.jsonl");
  std::set<std::string> presses;
  for (std::string line; std::getline(f, line);) {
    const auto j = nlohmann::json::parse(line);
    presses.insert(j.at("press").get<std::string>());
    EXPECT_NEAR(j.at("measured_keep").get<double>(), 0.25, 0.01) << line.substr(0, 300);
  }
  EXPECT_EQ(presses, (std::set<std::string>{"uncomp", "uncomp:variant=group-stage:layer_groups=0/1/2/3"}));
}

}  // namespace
}  // namespace kvs
