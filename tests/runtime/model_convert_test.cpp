// Model conversions as whole outputs: GGUF -> HF folders are staged and swapped in (files of an
// earlier conversion do not survive, a failure leaves the old folder or nothing), concurrent
// writers of one GGUF leave a loadable model, and a model without BOS (Qwen-like byte-level BPE
// with an NFC normalizer) round-trips GGUF -> HF -> GGUF with its tokenizer intact.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "core/atomic_output.h"
#include "core/error.h"
#include "model/export.h"
#include "model/gguf/gguf.h"
#include "model/presets.h"
#include "model/random_model.h"
#include "model/synthetic_vocab.h"
#include "model/tokenizer/hf_export.h"
#include "runtime/engine.h"
#include "cli_shell.h"
#include "test_util.h"

namespace kvs {
namespace {

namespace fs = std::filesystem;

std::vector<float> logits(const Model& m) {
  EngineParams ep;
  ep.n_threads = 2;
  Engine e(m, ep);
  auto c = e.new_cache();
  std::vector<int32_t> ids;
  for (int i = 0; i < 12; ++i) ids.push_back((i * 37 + 5) % m.hp.n_vocab);
  return e.forward(*c, ids, Logits::All);
}

float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

std::set<std::string> files_in(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

size_t temporaries_in(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    n += e.path().filename().string().find(kTempTag) != std::string::npos;
  return n;
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

struct HookGuard {
  ~HookGuard() { detail::set_output_fault_hook({}); }
};

// A tiny Qwen2 model whose vocabulary is the Qwen-like tokenizer (no BOS, NFC normalizer).
std::string write_qwen_like_gguf(const test::TempDir& dir, const std::string& name, uint64_t seed) {
  const std::string tok = test::write_tokenizer_dir(dir / "qwen_tok", test::qwen_like_tokenizer_json(),
                                                    test::qwen_like_tokenizer_config());
  const std::string path = dir / name;
  write_random_gguf(shape_preset("tiny-qwen2").hp, vocab_from_hf_dir(tok), DType::F32, seed, "qwen-like", path);
  return path;
}

}  // namespace

TEST(ModelConvert, NoBosModelRoundTripsAndReplacesAnEarlierConversion) {
  test::TempDir dir("convert_nobos");
  const std::string hf = dir / "hf";
  // An earlier conversion of another model (SentencePiece: tokenizer.model) in the target folder.
  write_random_gguf(shape_preset("tiny").hp, synthetic_spm_vocab(320), DType::F32, 3, "spm", dir / "spm.gguf");
  export_hf(*Model::load(dir / "spm.gguf"), hf, DType::F32);
  EXPECT_TRUE(files_in(hf).count("tokenizer.model"));

  auto gg = Model::load(write_qwen_like_gguf(dir, "q.gguf", 7));
  EXPECT_EQ(gg->tokenizer->bos(), -1);
  export_hf(*gg, hf, DType::F32);
  // Exactly the new conversion's files: the old tokenizer.model is gone.
  EXPECT_EQ(files_in(hf), (std::set<std::string>{"config.json", "model.safetensors", "tokenizer.json",
                                                  "tokenizer_config.json"}));
  const auto cfg = nlohmann::json::parse(slurp(hf + "/config.json"));
  EXPECT_TRUE(cfg.at("bos_token_id").is_null());
  EXPECT_EQ(cfg.at("eos_token_id"), gg->tokenizer->eos());
  auto h = Model::load(hf);
  EXPECT_EQ(h->tokenizer->bos(), -1);
  EXPECT_EQ(h->tokenizer->eos(), gg->tokenizer->eos());
  EXPECT_EQ(first_tokenization_difference(*gg->tokenizer, *h->tokenizer), "");
  EXPECT_EQ(h->tokenizer->encode("cafe\xCC\x81"), gg->tokenizer->encode("caf\xC3\xA9"));  // NFC kept
  EXPECT_LE(max_diff(logits(*gg), logits(*h)), 1e-4f);
  // And back to GGUF: still no BOS, same tokens, normalizer carried.
  export_gguf(*h, dir / "q2.gguf", DType::F32);
  auto g2 = GgufFile::open(dir / "q2.gguf");
  EXPECT_FALSE(g2->has("tokenizer.ggml.bos_token_id"));
  EXPECT_EQ(g2->get_str("tokenizer.ggml.pre"), "qwen2");
  auto m2 = Model::load(dir / "q2.gguf");
  EXPECT_EQ(first_tokenization_difference(*gg->tokenizer, *m2->tokenizer), "");
  EXPECT_LE(max_diff(logits(*gg), logits(*m2)), 1e-4f);
  EXPECT_EQ(temporaries_in(dir.str()), 0u);
}

TEST(ModelConvert, FailedConversionLeavesTheOldFolderOrNothing) {
  test::TempDir dir("convert_fail");
  const std::string hf = dir / "hf";
  auto gg = Model::load(write_qwen_like_gguf(dir, "q.gguf", 9));
  export_hf(*gg, hf, DType::F32);
  const std::string old_cfg = slurp(hf + "/config.json"), old_st = slurp(hf + "/model.safetensors");
  auto spm = [&] {
    write_random_gguf(shape_preset("tiny").hp, synthetic_spm_vocab(320), DType::F16, 4, "spm", dir / "spm.gguf");
    return Model::load(dir / "spm.gguf");
  }();
  HookGuard g;
  // A failure while the tokenizer files are written, and one at the moment of the swap.
  for (const char* where : {"tokenizer.json", "hf"}) {
    SCOPED_TRACE(where);
    detail::set_output_fault_hook([where](const std::string& p) {
      const std::string f = fs::path(p).filename().string();
      if (f == where || (std::string(where) == "hf" && f == "new")) throw Error(std::string("injected failure at ") + f);
    });
    EXPECT_NE(error_of([&] { export_hf(*spm, hf, DType::F16); }).find("injected"), std::string::npos);
    EXPECT_EQ(slurp(hf + "/config.json"), old_cfg);
    EXPECT_EQ(slurp(hf + "/model.safetensors"), old_st);
    EXPECT_EQ(files_in(hf).count("tokenizer.model"), 0u);
    EXPECT_LE(max_diff(logits(*gg), logits(*Model::load(hf))), 1e-4f);  // the old model, loadable
    // Into a new folder: nothing at all.
    EXPECT_NE(error_of([&] { export_hf(*spm, dir / "new", DType::F16); }), "");
    EXPECT_FALSE(fs::exists(dir / "new"));
    EXPECT_EQ(temporaries_in(dir.str()), 0u);
  }
  detail::set_output_fault_hook({});
  // A real failure: a byte-level vocabulary that tokenizer.json cannot hold (a token that is not
  // valid UTF-8) fails the conversion after the weights were written: no folder appears.
  VocabSpec bad = vocab_from_hf_dir(dir / "qwen_tok");
  bad.tokens[270] = "\xFF\xFE";
  write_random_gguf(shape_preset("tiny-qwen2").hp, bad, DType::F32, 2, "bad", dir / "bad.gguf");
  const std::string err = error_of([&] { export_hf(*Model::load(dir / "bad.gguf"), dir / "bad_hf", DType::F32); });
  EXPECT_NE(err.find("not valid UTF-8"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir / "bad_hf"));
  EXPECT_EQ(temporaries_in(dir.str()), 0u);
  // A folder of other things is never replaced.
  fs::create_directories(dir / "mine");
  std::ofstream(dir / "mine/notes.txt") << "keep";
  EXPECT_NE(error_of([&] { export_hf(*gg, dir / "mine", DType::F32); }).find("without config.json"), std::string::npos);
  EXPECT_EQ(slurp(dir / "mine/notes.txt"), "keep");
}

// Two conversions writing the same GGUF at once: the file is one of the two complete models.
TEST(ModelConvert, ConcurrentWritersOfOneGgufLeaveALoadableModel) {
  test::TempDir dir("convert_concurrent");
  write_random_gguf(shape_preset("tiny").hp, synthetic_spm_vocab(320), DType::F32, 1, "a", dir / "a.gguf");
  write_random_gguf(shape_preset("tiny").hp, synthetic_spm_vocab(320), DType::F32, 2, "b", dir / "b.gguf");
  auto a = Model::load(dir / "a.gguf");
  auto b = Model::load(dir / "b.gguf");
  ASSERT_NE(a->fingerprint, b->fingerprint);
  const std::string out = dir / "out.gguf";
  auto writer = [&](const Model* m) {
    for (int i = 0; i < 4; ++i) export_gguf(*m, out, DType::Q8_0);
  };
  std::thread ta(writer, a.get()), tb(writer, b.get());
  ta.join();
  tb.join();
  auto m = Model::load(out);
  export_gguf(*a, dir / "qa.gguf", DType::Q8_0);
  export_gguf(*b, dir / "qb.gguf", DType::Q8_0);
  const uint64_t fa = Model::load(dir / "qa.gguf")->fingerprint, fb = Model::load(dir / "qb.gguf")->fingerprint;
  EXPECT_TRUE(m->fingerprint == fa || m->fingerprint == fb);
  EXPECT_EQ(temporaries_in(dir.str()), 0u);
}

// `kvshrink convert --preset` / `--type q4_k_m`: llama-quantize's mix (model/quant_mix.h; the
// rules are tested in tests/model/quant_mix_test.cpp) and the file loads; presets that need an
// importance matrix, unknown names and HF outputs are refused with a message naming them.
TEST(ModelConvert, CliWritesLlamaQuantizePresets) {
  test::TempDir dir("convert_preset");
  const std::string src = std::string(KVS_SOURCE_DIR) + "/testbed/models/v7s1/model-f16.gguf";
  std::string out;
  ASSERT_EQ(test::kvshrink_shell("convert -m '" + src + "' -o '" + (dir / "a.gguf") + "' --type q4_k_m", out), 0) << out;
  EXPECT_NE(out.find("preset Q4_K_M"), std::string::npos) << out;
  ASSERT_EQ(test::kvshrink_shell("convert -m '" + src + "' -o '" + (dir / "b.gguf") + "' --preset Q3_K_M", out), 0) << out;
  auto a = GgufFile::open(dir / "a.gguf");
  EXPECT_EQ(a->tensor("blk.2.attn_v.weight")->type, DType::Q6_K);   // use_more_bits(2, 4)
  EXPECT_EQ(a->tensor("blk.1.attn_v.weight")->type, DType::Q4_K);
  EXPECT_EQ(a->tensor("token_embd.weight")->type, DType::Q6_K);     // tied: the output rule
  auto b = GgufFile::open(dir / "b.gguf");
  EXPECT_EQ(b->tensor("blk.1.attn_v.weight")->type, DType::Q5_K);   // Q3_K_M: Q5_K in layers 0-1
  EXPECT_EQ(b->tensor("blk.2.attn_v.weight")->type, DType::Q4_K);
  EXPECT_EQ(b->tensor("blk.2.attn_output.weight")->type, DType::Q4_K);
  EXPECT_EQ(b->tensor("blk.2.attn_q.weight")->type, DType::Q3_K);
  // --type with a plain type name keeps every weight in it (no mix).
  ASSERT_EQ(test::kvshrink_shell("convert -m '" + src + "' -o '" + (dir / "c.gguf") + "' --type q4_k", out), 0) << out;
  EXPECT_EQ(GgufFile::open(dir / "c.gguf")->tensor("token_embd.weight")->type, DType::Q4_K);
  // The preset file loads.
  auto m = Model::load(dir / "a.gguf");
  EXPECT_EQ(m->hp.n_layer, 4);
  for (const auto& [args, msg] : std::vector<std::pair<std::string, std::string>>{
           {"--preset q2_k_s", "needs an importance matrix"},
           {"--preset q7_k", "is not a llama-quantize preset"},
           {"--type q4_k_x", "neither a tensor type nor a llama-quantize preset"},
           {"--type q4_0 --preset q4_0", "not both"}}) {
    EXPECT_NE(test::kvshrink_shell("convert -m '" + src + "' -o '" + (dir / "d.gguf") + "' " + args, out), 0) << args;
    EXPECT_NE(out.find(msg), std::string::npos) << args << ": " << out;
  }
  EXPECT_NE(test::kvshrink_shell("convert -m '" + src + "' -o '" + (dir / "hf") + "' --preset q4_k_m", out), 0);
  EXPECT_NE(out.find("writes GGUF files"), std::string::npos) << out;
}

}  // namespace kvs
