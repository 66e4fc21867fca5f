// llama-quantize's preset mixes (model/quant_mix.h) against tables worked out by hand from
// llama.cpp's rules (src/llama-quant.cpp at c392e50) for the three shapes of issue 28 — the same
// tables llama.cpp's own libllama produced on those shapes (scripts/compare-llamacpp-quant-mix
// compares whole files, types and bytes, with llama-quantize) — and an export through
// `export_gguf(model, path, preset)` read back with the GGUF reader.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <set>

#include "core/error.h"
#include "model/export.h"
#include "model/gguf/gguf.h"
#include "model/model.h"
#include "model/quant_mix.h"

namespace kvs {
namespace {

DType mix(const std::string& preset, const QuantMixModel& m, const std::string& name, int64_t nx) {
  return quant_mix_type(*find_quant_preset(preset), m, name, nx);
}

std::string blk(int i, const char* t) { return "blk." + std::to_string(i) + "." + t + ".weight"; }

const QuantMixModel kSmol{30, 3, false, false};    // SmolLM2-135M: n_embd 576, n_ff 1536, tied
const QuantMixModel kQwen{24, 7, false, false};    // Qwen2.5-0.5B: n_embd 896, n_ff 4864, tied
const QuantMixModel kLlama1b{16, 4, false, false}; // Llama-3.2-1B: n_embd 2048, n_ff 8192, tied

TEST(QuantMix, PresetsByNameAliasesAndRefusals) {
  EXPECT_EQ(find_quant_preset("q4_k_m")->name, "Q4_K_M");
  EXPECT_EQ(find_quant_preset("Q4_K")->name, "Q4_K_M");  // llama-quantize's aliases
  EXPECT_EQ(find_quant_preset("q3_k")->name, "Q3_K_M");
  EXPECT_EQ(find_quant_preset("Q5_K")->name, "Q5_K_M");
  EXPECT_EQ(find_quant_preset("iq4_xs")->base, DType::IQ4_XS);
  EXPECT_FALSE(find_quant_preset("q7_k").has_value());
  for (const char* im : {"Q2_K_S", "IQ2_XS", "iq3_xxs"}) {
    try {
      find_quant_preset(im);
      ADD_FAILURE() << im << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("importance matrix"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(quant_presets().size(), 18u);
}

// use_more_bits for 30 layers: {0,1,2,5,8,...,26,27,28,29} (first and last eighth, every third).
TEST(QuantMix, SmolLM2Q4KM) {
  const std::set<int> mb{0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29};
  EXPECT_EQ(mix("Q4_K_M", kSmol, "token_embd.weight", 576), DType::Q8_0);  // tied: the output rule, 576 % 256 != 0
  for (int i = 0; i < 30; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(mix("Q4_K_M", kSmol, blk(i, "attn_q"), 576), DType::Q5_0);   // Q4_K -> Q5_0 (576 % 256)
    EXPECT_EQ(mix("Q4_K_M", kSmol, blk(i, "ffn_up"), 576), DType::Q5_0);
    EXPECT_EQ(mix("Q4_K_M", kSmol, blk(i, "attn_output"), 576), DType::Q5_0);
    EXPECT_EQ(mix("Q4_K_M", kSmol, blk(i, "attn_v"), 576), mb.count(i) ? DType::Q8_0 : DType::Q5_0);  // Q6_K -> Q8_0
    EXPECT_EQ(mix("Q4_K_M", kSmol, blk(i, "ffn_down"), 1536), mb.count(i) ? DType::Q6_K : DType::Q4_K);
  }
  // Q3_K_M: attn_v Q5_K in layers 0-1 (-> Q5_1), Q4_K after (-> Q5_0); ffn_down Q5_K in layer 0
  // (30 / 16 = 1), Q4_K after; attn_output Q4_K (-> Q5_0); the rest Q3_K (-> IQ4_NL).
  EXPECT_EQ(mix("Q3_K_M", kSmol, blk(1, "attn_v"), 576), DType::Q5_1);
  EXPECT_EQ(mix("Q3_K_M", kSmol, blk(2, "attn_v"), 576), DType::Q5_0);
  EXPECT_EQ(mix("Q3_K_M", kSmol, blk(0, "ffn_down"), 1536), DType::Q5_K);
  EXPECT_EQ(mix("Q3_K_M", kSmol, blk(1, "ffn_down"), 1536), DType::Q4_K);
  EXPECT_EQ(mix("Q3_K_M", kSmol, blk(7, "attn_output"), 576), DType::Q5_0);
  EXPECT_EQ(mix("Q3_K_M", kSmol, blk(7, "attn_k"), 576), DType::IQ4_NL);
  // Q2_K with n_gqa 3 < 4: attn_v Q3_K -> IQ4_NL; IQ4_XS: ffn_down Q5_K in 0-2 (30 / 8 = 3).
  EXPECT_EQ(mix("Q2_K", kSmol, blk(4, "attn_v"), 576), DType::IQ4_NL);
  EXPECT_EQ(mix("Q2_K", kSmol, blk(4, "ffn_down"), 1536), DType::Q3_K);
  EXPECT_EQ(mix("IQ4_XS", kSmol, blk(2, "ffn_down"), 1536), DType::Q5_K);
  EXPECT_EQ(mix("IQ4_XS", kSmol, blk(3, "ffn_down"), 1536), DType::IQ4_XS);
  EXPECT_EQ(mix("IQ4_XS", kSmol, blk(3, "attn_v"), 576), DType::IQ4_NL);
  // The 32-element presets: the base everywhere, the tied embedding Q8_0 (576 % 256 -> Q6_K -> Q8_0).
  EXPECT_EQ(mix("Q4_0", kSmol, blk(9, "attn_v"), 576), DType::Q4_0);
  EXPECT_EQ(mix("Q4_0", kSmol, "token_embd.weight", 576), DType::Q8_0);
}

TEST(QuantMix, Qwen25GqaSevenFallsBackFromKQuants) {
  // n_gqa 7 >= 4: Q2_K's attn_v Q4_K -> Q5_0; IQ4_XS / IQ4_NL's attn_v Q5_K -> Q5_1.
  EXPECT_EQ(mix("Q2_K", kQwen, blk(3, "attn_v"), 896), DType::Q5_0);
  EXPECT_EQ(mix("IQ4_XS", kQwen, blk(3, "attn_v"), 896), DType::Q5_1);
  EXPECT_EQ(mix("IQ4_NL", kQwen, blk(3, "attn_v"), 896), DType::Q5_1);
  EXPECT_EQ(mix("Q5_K_M", kQwen, blk(21, "attn_v"), 896), DType::Q8_0);   // use_more_bits(21, 24)
  EXPECT_EQ(mix("Q5_K_M", kQwen, blk(19, "attn_v"), 896), DType::Q5_1);   // not: Q5_K -> Q5_1
  EXPECT_EQ(mix("Q5_K_M", kQwen, blk(19, "ffn_down"), 4864), DType::Q5_K); // 4864 = 19 x 256
  EXPECT_EQ(mix("Q4_K_S", kQwen, blk(3, "attn_v"), 896), DType::Q5_1);     // Q5_K in 0-3
  EXPECT_EQ(mix("Q4_K_S", kQwen, blk(4, "attn_v"), 896), DType::Q5_0);
  EXPECT_EQ(mix("Q6_K", kQwen, blk(0, "attn_q"), 896), DType::Q8_0);
}

TEST(QuantMix, Llama1bHasNoFallbacks) {
  const std::set<int> mb{0, 1, 4, 7, 10, 13, 14, 15};  // use_more_bits over 16 layers
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(mix("Q4_K_M", kLlama1b, blk(i, "attn_v"), 2048), mb.count(i) ? DType::Q6_K : DType::Q4_K) << i;
    EXPECT_EQ(mix("Q4_K_M", kLlama1b, blk(i, "ffn_down"), 8192), mb.count(i) ? DType::Q6_K : DType::Q4_K) << i;
    EXPECT_EQ(mix("Q4_K_M", kLlama1b, blk(i, "attn_q"), 2048), DType::Q4_K);
  }
  EXPECT_EQ(mix("Q4_K_M", kLlama1b, "token_embd.weight", 2048), DType::Q6_K);
  EXPECT_EQ(mix("Q2_K", kLlama1b, blk(5, "attn_v"), 2048), DType::Q4_K);
  EXPECT_EQ(mix("Q2_K", kLlama1b, blk(5, "attn_output"), 2048), DType::Q3_K);
  EXPECT_EQ(mix("Q2_K", kLlama1b, blk(5, "attn_q"), 2048), DType::Q2_K);
  EXPECT_EQ(mix("Q3_K_L", kLlama1b, blk(5, "attn_output"), 2048), DType::Q5_K);
  EXPECT_EQ(mix("IQ4_XS", kLlama1b, blk(5, "attn_v"), 2048), DType::Q5_K);
  EXPECT_EQ(mix("IQ4_XS", kLlama1b, blk(1, "ffn_down"), 8192), DType::Q5_K);  // 16 / 8 = 2
  EXPECT_EQ(mix("IQ4_XS", kLlama1b, blk(2, "ffn_down"), 8192), DType::IQ4_XS);
  EXPECT_EQ(mix("Q4_0", kLlama1b, "token_embd.weight", 2048), DType::Q6_K);
  EXPECT_EQ(mix("Q8_0", kLlama1b, "token_embd.weight", 2048), DType::Q8_0);
  EXPECT_EQ(mix("F16", kLlama1b, blk(0, "attn_v"), 2048), DType::F16);
}

TEST(QuantMix, UntiedOutputSeventyBAndRefusals) {
  const QuantMixModel untied{22, 8, true, false};
  EXPECT_EQ(mix("Q4_0", untied, "token_embd.weight", 2048), DType::Q4_0);  // untied: the base type
  EXPECT_EQ(mix("Q4_0", untied, "output.weight", 2048), DType::Q6_K);
  EXPECT_EQ(mix("Q4_K_M", untied, "token_embd.weight", 2048), DType::Q4_K);
  const QuantMixModel big{80, 8, true, true};  // llama.cpp's 70B: attn_v never below Q5_K for Q3_K/Q4_K
  EXPECT_EQ(mix("Q4_K_S", big, blk(40, "attn_v"), 8192), DType::Q5_K);
  EXPECT_EQ(mix("Q3_K_S", big, blk(40, "attn_v"), 8192), DType::Q5_K);
  // Rows of 172 (n_ff of stories260K): K-quants fall back twice to F16; the 32-element presets refuse.
  const QuantMixModel tiny{5, 2, false, false};
  EXPECT_EQ(mix("Q4_K_M", tiny, blk(0, "ffn_down"), 172), DType::F16);  // Q6_K -> Q8_0 -> F16
  EXPECT_EQ(mix("Q4_K_M", tiny, blk(2, "ffn_down"), 172), DType::F16);  // Q4_K -> Q5_0 -> F16
  try {
    mix("Q4_0", tiny, blk(0, "ffn_down"), 172);
    ADD_FAILURE() << "Q4_0 with rows of 172 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_down.weight"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("llama-quantize refuses"), std::string::npos) << e.what();
  }
}

// The file: every 2-D weight in the mix's type (testbed v7s1: 4 layers, n_embd 256, n_ff 768,
// n_gqa 2, tied), norms F32; the model loads and runs.
TEST(QuantMix, ExportWritesTheMix) {
  auto m = Model::load(std::string(KVS_SOURCE_DIR) + "/testbed/models/v7s1/model-f16.gguf");
  const std::filesystem::path dir = std::filesystem::path(KVS_BINARY_DIR) / "test_tmp" / ("quant_mix_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string out = (dir / "q4km.gguf").string();
  export_gguf(*m, out, *find_quant_preset("q4_k_m"));
  auto f = GgufFile::open(out);
  const std::set<int> mb{2, 3};  // use_more_bits over 4 layers: i >= 7 * 4 / 8 = 3, or (i - 0) % 3 == 2
  for (const auto& t : f->tensors()) {
    SCOPED_TRACE(t.name);
    const bool norm = t.name.find("norm") != std::string::npos;
    DType want = DType::Q4_K;
    if (norm) want = DType::F32;
    else if (t.name == "token_embd.weight") want = DType::Q6_K;  // tied: the output rule (256 % 256 == 0)
    else if (t.name.find("attn_v") != std::string::npos || t.name.find("ffn_down") != std::string::npos)
      want = mb.count(std::stoi(t.name.substr(4))) ? DType::Q6_K : DType::Q4_K;
    EXPECT_EQ(t.type, want);
  }
  auto q = Model::load(out);
  EXPECT_EQ(q->hp.n_layer, 4);
  f.reset();
  q.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvs
