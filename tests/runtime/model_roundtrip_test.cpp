// make-model output read back; the same weights through GGUF and through safetensors give the
// same logits (Llama with permuted Q/K and Qwen2 with QKV bias); quantized weights run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <numbers>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/mapped_file.h"
#include "kernels/ops.h"
#include "kernels/packed_weights.h"
#include "model/export.h"
#include "model/gguf/gguf.h"
#include "model/presets.h"
#include "model/random_model.h"
#include "runtime/engine.h"
#include "scoped_env.h"
#include "test_util.h"

namespace kvs {
namespace {

std::vector<int32_t> prompt_ids(int n, int vocab) {
  std::vector<int32_t> v;
  for (int i = 0; i < n; ++i) v.push_back(3 + (i * 37) % (vocab - 3));
  return v;
}

std::vector<float> run(const Model& m, int n_tok) {
  EngineParams ep;
  ep.n_threads = 2;
  Engine e(m, ep);
  auto c = e.new_cache();
  return e.forward(*c, prompt_ids(n_tok, m.hp.n_vocab), Logits::All);
}

void expect_close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  EXPECT_LE(m, tol);
}

}  // namespace

TEST(ModelRoundTrip, MakeModelIsDeterministicAndReadsBack) {
  test::TempDir dir("make_model");
  const auto& p = shape_preset("tiny");
  write_random_gguf(p.hp, synthetic_spm_vocab(p.hp.n_vocab), DType::F32, 5, "tiny", dir / "a.gguf");
  write_random_gguf(p.hp, synthetic_spm_vocab(p.hp.n_vocab), DType::F32, 5, "tiny", dir / "b.gguf");
  auto a = GgufFile::open(dir / "a.gguf");
  auto b = GgufFile::open(dir / "b.gguf");
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    const auto& ta = a->tensors()[i];
    const auto& tb = b->tensors()[i];
    EXPECT_EQ(ta.name, tb.name);
    ASSERT_EQ(ta.nbytes, tb.nbytes);
    EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.nbytes), 0) << ta.name;
  }
  auto m = Model::load(dir / "a.gguf");
  EXPECT_EQ(m->hp.n_layer, 2);
  EXPECT_EQ(m->tokenizer->n_vocab(), p.hp.n_vocab);
}

TEST(ModelRoundTrip, GgufAndSafetensorsGiveIdenticalTensorsAndLogits) {
  for (const char* shape : {"tiny", "tiny-qwen2", "tiny-qwen3", "tiny-phi3", "tiny-gemma2", "tiny-gemma3"}) {
    SCOPED_TRACE(shape);
    test::TempDir dir(std::string("rt_") + shape);
    const auto& p = shape_preset(shape);
    write_random_gguf(p.hp, synthetic_spm_vocab(p.hp.n_vocab), DType::F32, 11, shape, dir / "m.gguf");
    auto gg = Model::load(dir / "m.gguf");
    export_hf(*gg, dir / "hf", DType::F32);
    auto hf = Model::load(dir / "hf");
    // Identical tensors (after undoing the Q/K permutation for llama).
    const auto& lg = gg->layers[1];
    const auto& lh = hf->layers[1];
    EXPECT_EQ(std::memcmp(lg.ffn_down.data, lh.ffn_down.data, lg.ffn_down.nbytes), 0);
    if (p.hp.arch == Arch::Llama) {
      auto back = permute_qk_rows(lh.wq, p.hp.n_head, true);
      EXPECT_EQ(std::memcmp(back.data(), lg.wq.data, back.size()), 0);
    } else {
      EXPECT_EQ(std::memcmp(lh.wq.data, lg.wq.data, lg.wq.nbytes), 0);
    }
    if (p.hp.qk_norm) {  // Qwen3's / Gemma 3's per-head norms travel under both names, unpermuted
      ASSERT_TRUE(lh.q_norm.valid() && lh.k_norm.valid());
      EXPECT_EQ(std::memcmp(lh.q_norm.data, lg.q_norm.data, lg.q_norm.nbytes), 0);
      EXPECT_EQ(std::memcmp(lh.k_norm.data, lg.k_norm.data, lg.k_norm.nbytes), 0);
      EXPECT_EQ(hf->hp.head_dim, 32);
      EXPECT_EQ(hf->hp.arch, p.hp.arch);
    }
    if (p.hp.arch == Arch::Gemma3) {  // the pattern, both RoPE tables (the global one scaled), no caps
      for (const Model* x : {gg.get(), hf.get()}) {
        EXPECT_EQ(x->hp.swa_period, 6);
        EXPECT_EQ(x->hp.n_swa, 48);
        EXPECT_EQ(x->hp.rope_theta_swa, 10000.0f);
        EXPECT_EQ(x->hp.rope_theta, 1e6f);
        EXPECT_EQ(x->hp.rope_scaling.type, "linear");
        EXPECT_EQ(x->hp.rope_scaling.factor, 8.0f);
        EXPECT_EQ(x->hp.attn_softcap, 0.0f);
        EXPECT_EQ(x->hp.final_softcap, 0.0f);
        ASSERT_EQ(x->rope_inv_freq_swa.size(), 16u);
        // Frequency i: base^(-2i/D), the global one divided by the scaling factor.
        for (int i = 0; i < 16; ++i) {
          EXPECT_FLOAT_EQ(x->rope_inv_freq_swa[static_cast<size_t>(i)], static_cast<float>(std::pow(1e4, -i / 16.0)));
          EXPECT_FLOAT_EQ(x->rope_inv_freq[static_cast<size_t>(i)], static_cast<float>(std::pow(1e6, -i / 16.0) / 8.0));
        }
      }
      for (int il = 0; il < 6; ++il) EXPECT_EQ(gg->hp.layer_local_rope(il), il != 5) << il;
      // Norms, q_norm / k_norm included: 1 + w in memory from both files.
      for (auto [a, b] : {std::pair{&lg.q_norm, &lh.q_norm}, std::pair{&lg.post_ffn_norm, &lh.post_ffn_norm}})
        for (int64_t i = 0; i < a->n_elements(); ++i) EXPECT_EQ(a->f32()[i], b->f32()[i]) << a->name;
    }
    if (p.hp.arch == Arch::Phi3) {  // fused as stored, split into row views, the window kept both ways
      ASSERT_TRUE(lh.wqkv.valid() && lh.ffn_gate_up.valid());
      EXPECT_EQ(std::memcmp(lh.wqkv.data, lg.wqkv.data, lg.wqkv.nbytes), 0);
      EXPECT_EQ(std::memcmp(lh.ffn_gate_up.data, lg.ffn_gate_up.data, lg.ffn_gate_up.nbytes), 0);
      EXPECT_EQ(lg.ffn_up.data, lg.ffn_gate_up.row(p.hp.n_ff));
      EXPECT_EQ(hf->hp.n_swa, 1000);
      EXPECT_EQ(gg->hp.n_swa, 1000);
    }
    if (p.hp.arch == Arch::Gemma2) {  // norms: 1 + w in memory from both, w in the HF file; caps, scale, window
      ASSERT_TRUE(lh.post_attn_norm.valid() && lh.post_ffn_norm.valid());
      for (auto [a, b] : {std::pair{&lg.attn_norm, &lh.attn_norm}, std::pair{&lg.post_attn_norm, &lh.post_attn_norm},
                          std::pair{&lg.ffn_norm, &lh.ffn_norm}, std::pair{&lg.post_ffn_norm, &lh.post_ffn_norm}})
        for (int64_t i = 0; i < p.hp.n_embd; ++i) EXPECT_EQ(a->f32()[i], b->f32()[i]) << a->name;
      EXPECT_EQ(hf->hp.n_swa, 48);
      EXPECT_EQ(hf->hp.swa_period, 2);
      EXPECT_EQ(hf->hp.attn_softcap, gg->hp.attn_softcap);
      EXPECT_EQ(hf->hp.final_softcap, gg->hp.final_softcap);
      EXPECT_EQ(hf->hp.attn_scale(), gg->hp.attn_scale());
      EXPECT_TRUE(hf->hp.gemma_block && hf->hp.tied_embeddings);
    }
    expect_close(run(*gg, 40), run(*hf, 40), 1e-4f);
    // And back to GGUF from HF.
    export_gguf(*hf, dir / "m2.gguf", DType::F32);
    auto gg2 = Model::load(dir / "m2.gguf");
    expect_close(run(*gg, 40), run(*gg2, 40), 1e-5f);
  }
}

// Gemma 3 configs as transformers writes them: the pattern from sliding_window_pattern, from
// layer_types, or the default 6; rope_local_base_freq read (the local table moves the logits);
// the multimodal model and patterns other than "every p-th layer global" refused by name.
TEST(ModelRoundTrip, Gemma3ConfigVariantsAndRefusals) {
  test::TempDir dir("gemma3_cfg");
  const auto& p = shape_preset("tiny-gemma3");
  write_random_gguf(p.hp, synthetic_spm_vocab(p.hp.n_vocab), DType::F32, 13, "g3", dir / "m.gguf");
  auto gg = Model::load(dir / "m.gguf");
  export_hf(*gg, dir / "hf", DType::F32);
  const std::string cfg_path = dir / "hf" + "/config.json";
  const nlohmann::json cfg = nlohmann::json::parse(read_file(cfg_path));
  ASSERT_EQ(cfg["model_type"], "gemma3_text");
  ASSERT_EQ(cfg["layer_types"].size(), 6u);
  EXPECT_EQ(cfg["layer_types"][5], "full_attention");
  const std::vector<float> want = run(*gg, 80);
  auto with = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json c = cfg;
    edit(c);
    std::ofstream(cfg_path) << c.dump(2);
    return Model::load(dir / "hf");
  };
  auto error_of = [&](const std::function<void(nlohmann::json&)>& edit) {
    try {
      with(edit);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(loaded)");
  };
  // No pattern keys at all: Gemma3TextConfig's default, 6.
  auto m = with([](nlohmann::json& c) { c.erase("layer_types"); c.erase("sliding_window_pattern"); });
  EXPECT_EQ(m->hp.swa_period, 6);
  expect_close(run(*m, 80), want, 1e-4f);
  // transformers 5's rope_parameters per layer type instead of rope_theta / rope_scaling /
  // rope_local_base_freq: the same model.
  m = with([](nlohmann::json& c) {
    c.erase("rope_theta");
    c.erase("rope_scaling");
    c.erase("rope_local_base_freq");
    c["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}},
                            {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  });
  EXPECT_EQ(m->hp.rope_theta, 1e6f);
  EXPECT_EQ(m->hp.rope_scaling.type, "linear");
  EXPECT_EQ(m->hp.rope_theta_swa, 10000.0f);
  expect_close(run(*m, 80), want, 1e-4f);
  // A different local base: read, and the logits move (the local layers' rotation changed).
  m = with([](nlohmann::json& c) { c["rope_local_base_freq"] = 50000.0; });
  EXPECT_EQ(m->hp.rope_theta_swa, 50000.0f);
  const std::vector<float> moved = run(*m, 80);
  float diff = 0;
  for (size_t i = 0; i < moved.size(); ++i) diff = std::max(diff, std::fabs(moved[i] - want[i]));
  EXPECT_GT(diff, 1e-3f);
  EXPECT_NE(error_of([](nlohmann::json& c) {
              c["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}}},
                                      {"sliding_attention", {{"rope_type", "linear"}, {"factor", 2.0}}}};
            }).find("sliding_attention.rope_type"),
            std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& c) { c["layer_types"][0] = "full_attention"; }).find("layer_types[0]"),
            std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& c) { c["architectures"] = {"Gemma3ForConditionalGeneration"}; })
                .find("multimodal"),
            std::string::npos);
  EXPECT_NE(error_of([](nlohmann::json& c) { c["model_type"] = "gemma3"; c.erase("architectures"); }).find("multimodal"),
            std::string::npos);
}

// A model whose layers all slide over a window (Phi-3-mini-4k: 2,047) answers past it: the same
// logits from one prefill batch (blocked prefill attention), token by token (decode attention) and
// batched steps beside another sequence; equal to a model without the window while no query has
// reached it and different once they have (the window is applied, not ignored). The attention
// itself is checked against a brute force in tests/kvcache/attention_test.cpp and a whole Gemma 2
// against a torch reference in tests/model/arch_reference.py.
TEST(ModelRoundTrip, SlidingWindowModelAnswersPastItsWindow) {
  test::TempDir dir("swa");
  HParams hp = shape_preset("tiny-phi3").hp;
  hp.n_swa = 40;
  write_random_gguf(hp, synthetic_spm_vocab(hp.n_vocab), DType::F32, 3, "phi", dir / "phi.gguf");
  hp.n_swa = 100000;
  write_random_gguf(hp, synthetic_spm_vocab(hp.n_vocab), DType::F32, 3, "phi", dir / "nowin.gguf");
  auto m = Model::load(dir / "phi.gguf");
  auto m_full = Model::load(dir / "nowin.gguf");
  ASSERT_EQ(m->hp.n_swa, 40);
  Engine e(*m, {}), e_full(*m_full, {});
  std::vector<int32_t> ids(70);
  for (int i = 0; i < 70; ++i) ids[static_cast<size_t>(i)] = 5 + (i * 37) % 250;
  auto c = e.new_cache();
  const std::vector<float> all = e.forward(*c, ids, Logits::All);  // [70][V]
  const int V = hp.n_vocab;
  auto row = [&](const std::vector<float>& x, int t) { return std::vector<float>(x.begin() + t * V, x.begin() + (t + 1) * V); };
  // Token by token, and as batched steps beside a second sequence.
  auto c1 = e.new_cache(), c2 = e.new_cache(), other = e.new_cache();
  for (int t = 0; t < 70; ++t) {
    const std::vector<float> one = e.forward(*c1, std::span<const int32_t>(&ids[static_cast<size_t>(t)], 1), Logits::Last);
    expect_close(one, row(all, t), 1e-4f);
    const int32_t o = 9;
    const Engine::BatchItem items[2] = {{c2.get(), std::span<const int32_t>(&ids[static_cast<size_t>(t)], 1), nullptr},
                                        {other.get(), std::span<const int32_t>(&o, 1), nullptr}};
    const auto b = e.forward_batch(std::span<const Engine::BatchItem>(items, 2));
    expect_close(b[0], row(all, t), 1e-4f);
  }
  auto cf = e_full.new_cache();
  const std::vector<float> full = e_full.forward(*cf, ids, Logits::All);
  expect_close(row(full, 39), row(all, 39), 1e-5f);  // position 39 sees 0..39: the whole window
  float diff = 0;
  for (int i = 0; i < V; ++i) diff = std::max(diff, std::fabs(full[static_cast<size_t>(69 * V + i)] - all[static_cast<size_t>(69 * V + i)]));
  EXPECT_GT(diff, 1e-4f);
}

// Q4_0 and Q8_0 weights repacked at load (kernels/packed_weights.h, on the AVX-512 table) give the
// logits of the plain Q4_0 / Q8_0 tiles: the same integer sums, only the float accumulation order
// differs. Where the active table has no packed tile both loads take the plain path and the test
// is trivially true.
TEST(ModelRoundTrip, RepackedWeightsGiveThePlainTilesLogits) {
  test::TempDir dir("repack");
  const auto& p = shape_preset("tiny");
  write_random_gguf(p.hp, synthetic_spm_vocab(p.hp.n_vocab), DType::F32, 5, "tiny", dir / "f32.gguf");
  for (DType t : {DType::Q4_0, DType::Q8_0}) {
    SCOPED_TRACE(std::string(dtype_name(t)));
    const auto file = dir / (std::string(dtype_name(t)) + ".gguf");
    export_gguf(*Model::load(dir / "f32.gguf"), file, t);
    std::vector<float> plain, plain_decode;
    {
      const test::ScopedEnv no_repack("KVS_NO_REPACK", "1");
      auto m = Model::load(file);
      EXPECT_TRUE(m->packed.empty());
      plain = run(*m, 20);
      plain_decode = run(*m, 1);
    }
    const test::ScopedEnv repack("KVS_NO_REPACK", nullptr);
    auto m = Model::load(file);
    if (kernels::packing_active(t)) {
      EXPECT_FALSE(m->packed.empty());
      // One storage block for every matrix, in the order a step reads them (model/repack.cpp):
      // each layer's Q, K, V, O, gate, up, down, then the output projection, back to back.
      std::vector<const TensorView*> order;
      for (const LayerWeights& l : m->layers)
        order.insert(order.end(), {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down});
      order.push_back(&m->output);
      std::shared_ptr<const kernels::PackedWeights> prev;
      for (const TensorView* w : order) {
        auto pw = kernels::find_packed(w->data, w->rows(), w->cols());
        ASSERT_TRUE(pw);
        if (prev) {
          EXPECT_EQ(pw->storage.get(), prev->storage.get());
          EXPECT_EQ(pw->data, prev->data + prev->bytes());
        }
        prev = pw;
      }
    }
    float scale = 0;
    for (float x : plain) scale = std::max(scale, std::fabs(x));
    expect_close(plain, run(*m, 20), 1e-4f * scale);        // prefill tiles
    expect_close(plain_decode, run(*m, 1), 1e-4f * scale);  // decode (one token)
  }
}

TEST(ModelRoundTrip, QuantizedModelsStayCloseToF32) {
  test::TempDir dir("quant");
  const auto& p = shape_preset("tiny");
  write_random_gguf(p.hp, synthetic_spm_vocab(p.hp.n_vocab), DType::F32, 3, "tiny", dir / "f32.gguf");
  auto ref = Model::load(dir / "f32.gguf");
  const auto ref_logits = run(*ref, 20);
  for (auto [t, tol] : {std::pair{DType::F16, 1e-3f}, {DType::BF16, 1e-2f}, {DType::Q8_0, 2e-2f}, {DType::Q4_0, 1e-1f}}) {
    SCOPED_TRACE(dtype_name(t));
    export_gguf(*ref, dir / "q.gguf", t);
    auto q = Model::load(dir / "q.gguf");
    expect_close(ref_logits, run(*q, 20), tol);
  }
}

}  // namespace kvs

namespace kvs {

// llama3 RoPE scaling: the HF formula, and the GGUF encoding of it (rope_freqs.weight divisors)
// giving the same logits as the HF config's rope_scaling block.
TEST(ModelRoundTrip, Llama3RopeScalingThroughGgufAndHf) {
  HParams hp = shape_preset("tiny").hp;
  hp.head_dim = 64;
  hp.n_head = 1;
  hp.n_head_kv = 1;
  hp.rope_dim = 64;
  hp.rope_theta = 500000.0f;
  hp.rope_scaling = {"llama3", 32.0f, 1.0f, 4.0f, 64};
  const auto f = detail::rope_inv_freq(hp);
  for (int i = 0; i < 32; ++i) {
    const double inv = 1.0 / std::pow(500000.0, 2.0 * i / 64);
    const double wavelen = 2 * std::numbers::pi / inv;
    double want = inv;
    if (wavelen > 64.0 / 1.0) want = inv / 32;
    else if (wavelen >= 64.0 / 4.0) {
      const double smooth = (64.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * inv / 32 + smooth * inv;
    }
    EXPECT_NEAR(f[i], want, 1e-6 * want) << i;
  }
  test::TempDir dir("llama3_rope");
  write_random_gguf(hp, synthetic_spm_vocab(hp.n_vocab), DType::F32, 9, "l3", dir / "m.gguf");
  auto gg = Model::load(dir / "m.gguf");
  EXPECT_EQ(gg->hp.rope_scaling.type, "llama3");
  export_hf(*gg, dir / "hf", DType::F32);
  auto hf = Model::load(dir / "hf");
  EXPECT_EQ(hf->hp.rope_scaling.type, "llama3");
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(gg->rope_inv_freq[i], hf->rope_inv_freq[i], 1e-6f * hf->rope_inv_freq[i]);
  expect_close(run(*gg, 100), run(*hf, 100), 1e-4f);
  // GGUF -> GGUF (kvshrink convert): the divisors are copied bit for bit, as llama-quantize copies
  // them (recomputed from the inverse frequencies they were 1 ulp off in one of 32 on the
  // Llama-3.2-1B shape, and llama.cpp's logits moved with them).
  // Llama-3.2-1B's own scaling (original context 8,192), where the recomputation is off.
  HParams hp1b = hp;
  hp1b.rope_scaling = {"llama3", 32.0f, 1.0f, 4.0f, 8192};
  write_random_gguf(hp1b, synthetic_spm_vocab(hp.n_vocab), DType::F32, 9, "l3", dir / "m1b.gguf");
  export_gguf(*Model::load(dir / "m1b.gguf"), dir / "again.gguf", DType::Q8_0);
  const auto a = GgufFile::open(dir / "m1b.gguf"), b = GgufFile::open(dir / "again.gguf");
  const TensorView *ra = a->tensor("rope_freqs.weight"), *rb = b->tensor("rope_freqs.weight");
  ASSERT_TRUE(ra && rb);
  ASSERT_EQ(ra->n_elements(), 32);
  ASSERT_EQ(rb->n_elements(), 32);
  EXPECT_EQ(std::memcmp(ra->f32(), rb->f32(), 32 * sizeof(float)), 0);
  // A file whose divisors the llama3 formula does not reproduce exactly keeps them too.
  std::vector<float> odd(ra->f32(), ra->f32() + 32);
  for (int i = 0; i < 32; ++i) odd[i] = std::nextafter(odd[i], 100.0f);
  auto tweaked = Model::load(dir / "again.gguf");
  tweaked->rope_freqs = odd;
  export_gguf(*tweaked, dir / "odd.gguf", DType::Q8_0);
  const auto c = GgufFile::open(dir / "odd.gguf");
  EXPECT_EQ(std::memcmp(c->tensor("rope_freqs.weight")->f32(), odd.data(), 32 * sizeof(float)), 0);
}

}  // namespace kvs

namespace kvs {

// A byte-level BPE vocabulary from a real HF tokenizer.json (SmolLM2) embedded in a GGUF: the GGUF
// tokenizer (pre-tokenizer named "smollm") tokenizes like the HF one, and GGUF vs HF logits agree.
TEST(ModelRoundTrip, BpeVocabularyThroughGgufAndHf) {
  test::TempDir dir("bpe_vocab");
  const std::string tok_dir = test::test_data("tokenizers/smollm2");
  HParams hp = shape_preset("tiny").hp;
  hp.n_vocab = 49152;
  VocabSpec hfv = vocab_from_hf_dir(tok_dir);
  write_random_gguf(hp, hfv, DType::F16, 4, "bpe", dir / "m.gguf");
  auto gg = Model::load(dir / "m.gguf");
  auto gguf_meta = GgufFile::open(dir / "m.gguf");
  EXPECT_EQ(gguf_meta->get_str("tokenizer.ggml.pre"), "smollm");
  auto hf_tok = Tokenizer::create(hfv);
  for (const char* text : {"The special magic number for apple is 7342981.", "Numbers: 1234567890 3.14159",
                           "  leading spaces and trailing   ", "<|im_start|>user\nHi<|im_end|>"}) {
    EXPECT_EQ(gg->tokenizer->encode(text, true, true), hf_tok->encode(text, true, true)) << text;
  }
  // GGUF -> HF with no source tokenizer.json: one is written from the GGUF vocabulary.
  export_hf(*gg, dir / "hf", DType::F32);
  EXPECT_TRUE(std::filesystem::exists(dir / "hf/tokenizer.json"));
  auto hf = Model::load(dir / "hf");
  expect_close(run(*gg, 30), run(*hf, 30), 1e-4f);
  for (const char* text : {"The special magic number for apple is 7342981.", "<|im_start|>user\nHi<|im_end|>"})
    EXPECT_EQ(hf->tokenizer->encode(text, true, true), hf_tok->encode(text, true, true)) << text;
  // With the source's tokenizer.json given, that file is copied as it is.
  export_hf(*gg, dir / "hf2", DType::F32, tok_dir + "/tokenizer.json");
  EXPECT_EQ(std::filesystem::file_size(dir / "hf2/tokenizer.json"), std::filesystem::file_size(tok_dir + "/tokenizer.json"));
}

}  // namespace kvs
