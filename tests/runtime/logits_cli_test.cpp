// `kvshrink logits` (the dump scripts/compare-llamacpp-logits compares with llama.cpp's): on
// stories260K, the file holds [ids + greedy][n_vocab] float32 rows, the rows of the ids are
// llama.cpp's reference logits (within the stories reference test's loose tolerance, with
// --llamacpp-numerics), the greedy tokens are the reference's; bad input is refused by name.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "cli_shell.h"
#include "test_util.h"

namespace kvs {
namespace {

TEST(LogitsCli, StoriesMatchesLlamaCppReference) {
  if (!std::filesystem::exists(test::kvshrink_bin())) FAIL() << test::kvshrink_bin() << " is missing: build the kvshrink target first";
  const auto refs = test::load_stories_reference();
  ASSERT_FALSE(refs.empty());
  const test::RefCase& rc = refs[0];
  test::TempDir dir("logits_cli");
  std::string ids;
  for (int32_t t : rc.tokens) ids += std::to_string(t) + ",";
  const int n_greedy = std::min<int>(8, static_cast<int>(rc.greedy.size()));
  std::string out;
  ASSERT_EQ(test::kvshrink_shell("logits -m '" + test::stories_gguf() + "' -t 1 --llamacpp-numerics --ids '" + ids +
                                     "' --greedy " + std::to_string(n_greedy) + " -o '" + (dir / "l.f32") + "'",
                                 out),
            0)
      << out;
  const auto j = nlohmann::json::parse(out.substr(out.rfind('{')));
  const int V = j["n_vocab"].get<int>();
  const size_t n_pos = rc.tokens.size() + n_greedy;
  EXPECT_EQ(V, 512);
  EXPECT_EQ(j["n_pos"].get<size_t>(), n_pos);
  EXPECT_EQ(j["greedy"].get<std::vector<int32_t>>(), std::vector<int32_t>(rc.greedy.begin(), rc.greedy.begin() + n_greedy));
  ASSERT_EQ(std::filesystem::file_size(dir / "l.f32"), n_pos * V * sizeof(float));
  std::vector<float> l(n_pos * V);
  std::ifstream(dir / "l.f32", std::ios::binary).read(reinterpret_cast<char*>(l.data()), l.size() * sizeof(float));
  for (size_t t = 0; t < rc.tokens.size(); ++t) {
    float d = 0;
    for (int v = 0; v < V; ++v) d = std::max(d, std::fabs(l[t * V + v] - rc.logits[t][v]));
    EXPECT_LE(d, 5e-3f) << "position " << t;
  }
  // A greedy row is the logits after feeding the previous row's argmax: its argmax is the next
  // greedy token.
  for (int g = 0; g + 1 < n_greedy; ++g) {
    const float* row = l.data() + (rc.tokens.size() + g) * V;
    EXPECT_EQ(std::max_element(row, row + V) - row, rc.greedy[g + 1]) << g;
  }
}

TEST(LogitsCli, BadInputIsRefusedByName) {
  if (!std::filesystem::exists(test::kvshrink_bin())) FAIL() << test::kvshrink_bin() << " is missing";
  test::TempDir dir("logits_cli_bad");
  const std::string m = "logits -m '" + test::stories_gguf() + "' -t 1 -o '" + (dir / "l.f32") + "' ";
  std::string out;
  EXPECT_EQ(test::kvshrink_shell(m, out), 1) << out;
  EXPECT_NE(out.find("--ids"), std::string::npos) << out;
  EXPECT_EQ(test::kvshrink_shell(m + "--ids '1, 700'", out), 1) << out;
  EXPECT_NE(out.find("700"), std::string::npos) << out;
  EXPECT_NE(out.find("out of range"), std::string::npos) << out;
  EXPECT_EQ(test::kvshrink_shell(m + "--ids '1, x2'", out), 1) << out;
  EXPECT_NE(out.find("'x2'"), std::string::npos) << out;
  EXPECT_EQ(test::kvshrink_shell(m + "--ids ' , '", out), 1) << out;
  EXPECT_NE(out.find("no token ids"), std::string::npos) << out;
  EXPECT_FALSE(std::filesystem::exists(dir / "l.f32"));
}

}  // namespace
}  // namespace kvs
