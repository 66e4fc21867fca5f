// The project's testbed models against their PyTorch reference (testbed/reference_logits.py):
// token ids, logits at the recorded positions, greedy tokens — through the HF directory and
// through the GGUF our writer converts it to. Skipped when no testbed model is present
// (KVS_TESTBED_DIR overrides the directory searched: testbed/models/*/).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "model/export.h"
#include "runtime/engine.h"
#include "runtime/sampler.h"
#include "test_util.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> testbed_dirs() {
  std::vector<std::string> out;
  const char* env = std::getenv("KVS_TESTBED_DIR");
  if (env && *env) {
    out.push_back(env);
    return out;
  }
  const fs::path root = fs::path(KVS_SOURCE_DIR) / "testbed" / "models";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return out;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (e.is_directory() && fs::exists(e.path() / "config.json") && fs::exists(e.path() / "reference.jsonl"))
      out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

void check(const Model& m, const std::string& ref_path, float tol) {
  // F32 K/V: the PyTorch reference keeps its cache in F32; the tolerance measures our arithmetic
  // against it, not F16 storage's rounding (the default KV type, checked on quality elsewhere).
  EngineParams ep;
  ep.kv_dtype = DType::F32;
  Engine e(m, ep);
  std::ifstream f(ref_path);
  std::string line;
  int n_cases = 0;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const std::string prompt = j["prompt"];
    SCOPED_TRACE(prompt.substr(0, 60));
    const auto tokens = j["tokens"].get<std::vector<int32_t>>();
    EXPECT_EQ(m.tokenizer->encode(prompt, true, false), tokens);
    auto cache = e.new_cache();
    const auto logits = e.forward(*cache, tokens, Logits::All);
    const auto pos = j["logits_positions"].get<std::vector<int>>();
    const auto rows = j["logits"].get<std::vector<std::vector<float>>>();
    const int V = m.hp.n_vocab;
    float worst = 0;
    for (size_t r = 0; r < pos.size(); ++r)
      for (int v = 0; v < V; ++v)
        worst = std::max(worst, std::fabs(logits[static_cast<size_t>(pos[r]) * V + v] - rows[r][static_cast<size_t>(v)]));
    EXPECT_LE(worst, tol);
    std::vector<float> last(logits.end() - V, logits.end());
    std::vector<int32_t> gen;
    const auto want = j["greedy"].get<std::vector<int32_t>>();
    for (size_t i = 0; i < want.size(); ++i) {
      const int32_t t = argmax(last);
      gen.push_back(t);
      last = e.forward(*cache, std::span<const int32_t>(&t, 1), Logits::Last);
    }
    EXPECT_EQ(gen, want);
    ++n_cases;
  }
  EXPECT_GT(n_cases, 0);
}

}  // namespace

TEST(TestbedReference, HfAndGgufMatchPyTorch) {
  const auto dirs = testbed_dirs();
  if (dirs.empty()) GTEST_SKIP() << "no testbed model under testbed/models/";
  for (const auto& d : dirs) {
    SCOPED_TRACE(d);
    auto hf = Model::load(d);
    const bool f16 = hf->tok_embd.type != DType::F32;
    // PyTorch computes in F32 from the stored weights; 4 layers of float rounding stay < 2e-3.
    check(*hf, d + "/reference.jsonl", 2e-3f);
    test::TempDir tmp("testbed_gguf");
    export_gguf(*hf, tmp / "m.gguf", f16 ? DType::F16 : DType::F32);
    auto gg = Model::load(tmp / "m.gguf");
    check(*gg, d + "/reference.jsonl", 2e-3f);
  }
}

}  // namespace kvs
