// Tokenizers through conversions: HF tokenizer.json -> GGUF (normalizer and pre-tokenizer name
// carried) -> HF tokenizer.json written from the vocabulary alone; GGUF files from elsewhere
// with Qwen2's pre-tokenizer get its NFC normalizer; absent BOS survives.
#include <nlohmann/json.hpp>

#include "core/atomic_output.h"
#include "model/export.h"
#include "model/gguf/gguf_writer.h"
#include "model/tokenizer/hf_export.h"
#include "model/tokenizer/hf_vocab.h"
#include "model/tokenizer/text_pipeline.h"
#include "synthetic_vocab.h"
#include "tokenizer_test_util.h"

namespace kvs {
namespace {

using json = nlohmann::json;
using Ids = std::vector<int32_t>;

const std::string kCafeNfc = "caf\xC3\xA9";
const std::string kCafeNfd = "cafe\xCC\x81";
const std::string kHanNfc = "\xED\x95\x9C";
const std::string kHanJamo = "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB";

// The GGUF image of a vocabulary's metadata (kvs::GgufWriter), and its vocabulary read back.
struct GgufVocab {
  std::vector<uint8_t> image;
  std::unique_ptr<GgufFile> file;
};
GgufVocab gguf_of(const VocabSpec& v, const std::function<void(kvs::GgufWriter&)>& edit = {}) {
  kvs::GgufWriter w;
  write_vocab_gguf(w, v);
  if (edit) edit(w);
  GgufVocab g;
  g.image = w.serialize();
  g.file = GgufFile::parse(g.image.data(), g.image.size(), "mem.gguf");
  return g;
}

// A HF folder holding the tokenizer files written from a (prepared) vocabulary.
std::string hf_dir_of(const VocabSpec& v, const std::string& name) {
  const std::string d = test::temp_dir(name);
  test::write_file(d + "/tokenizer.json", hf_tokenizer_json(v));
  test::write_file(d + "/tokenizer_config.json", hf_tokenizer_config_json(v));
  return d;
}

std::vector<std::string> test_strings() {
  std::vector<std::string> s = tokenizer_probe_texts();
  for (const char* t : {"caf\xC3\xA9 cafe\xCC\x81 CAFE\xCC\x81", "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB \xED\x95\x9C",
                        "\xCC\x81", "hello world, the cafe\xCC\x81 isn't in", "<|im_start|>user\nhello<|im_end|>\n",
                        "x<|endoftext|>y <|im_end|>", "  \n\n  \t", "1234567890"})
    s.push_back(t);
  return s;
}

void expect_same_tokens(const Tokenizer& want, const Tokenizer& got) {
  for (const auto& t : test_strings()) {
    EXPECT_EQ(got.encode(t, true, false), want.encode(t, true, false)) << t;
    EXPECT_EQ(got.encode(t, true, true), want.encode(t, true, true)) << t;
    EXPECT_EQ(got.decode(got.encode(t, false, true)), want.decode(want.encode(t, false, true))) << t;
  }
  EXPECT_EQ(first_tokenization_difference(want, got), "");
}

const std::string& qwen_dir() {
  static const std::string d = test::write_tokenizer_dir(test::temp_dir("qwen_like"), test::qwen_like_tokenizer_json(),
                                                          test::qwen_like_tokenizer_config());
  return d;
}

TEST(TokConvert, NfcNormalizerSurvivesGguf) {
  const VocabSpec hf = vocab_from_hf_dir(qwen_dir());
  auto from_hf = Tokenizer::create(hf);
  // The normalizer matters: NFD text gives the NFC tokens.
  EXPECT_EQ(from_hf->encode(" " + kCafeNfd), from_hf->encode(" " + kCafeNfc));
  EXPECT_EQ(from_hf->encode(kHanJamo), from_hf->encode(kHanNfc));
  EXPECT_EQ(from_hf->encode(kHanNfc).size(), 1u);  // 한 is one merged token
  auto g = gguf_of(hf);
  EXPECT_EQ(g.file->get_str("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(json::parse(g.file->get_str(kGgufNormalizerKey)), json({{"type", "NFC"}}));
  auto from_gguf = Tokenizer::create(vocab_from_gguf(*g.file));
  EXPECT_EQ(from_gguf->spec().normalizer_note, "NFC, from kvshrink.tokenizer.normalizer");
  for (const std::string& t : std::vector<std::string>{kCafeNfd, " " + kCafeNfd + "!", kHanJamo, "A\xCC\x8A ring", "\xCC\x81 lone"})
    EXPECT_EQ(from_gguf->encode(t), from_hf->encode(t)) << t;
  expect_same_tokens(*from_hf, *from_gguf);
  EXPECT_FALSE(from_gguf->spec().add_bos);
  EXPECT_EQ(from_gguf->bos(), -1);  // Qwen has no BOS
}

TEST(TokConvert, GgufFromElsewhereWithQwen2PreGetsNfc) {
  const VocabSpec hf = vocab_from_hf_dir(qwen_dir());
  auto from_hf = Tokenizer::create(hf);
  // As llama.cpp's converter writes it: no kvshrink key.
  auto g = gguf_of(hf, [](kvs::GgufWriter& w) { w.remove(kGgufNormalizerKey); });
  const VocabSpec v = vocab_from_gguf(*g.file);
  EXPECT_NE(v.normalizer_note.find("implied by tokenizer.ggml.pre 'qwen2'"), std::string::npos) << v.normalizer_note;
  auto t = Tokenizer::create(v);
  EXPECT_EQ(t->encode(" " + kCafeNfd), from_hf->encode(" " + kCafeNfc));
  expect_same_tokens(*from_hf, *t);
  // Another pre-tokenizer name implies nothing: NFD stays decomposed.
  auto g2 = gguf_of(hf, [](kvs::GgufWriter& w) {
    w.remove(kGgufNormalizerKey);
    w.set_str("tokenizer.ggml.pre", "llama-bpe");
  });
  const VocabSpec v2 = vocab_from_gguf(*g2.file);
  EXPECT_EQ(v2.normalizer_note, "");
  EXPECT_NE(Tokenizer::create(v2)->encode(kCafeNfd), from_hf->encode(kCafeNfc));
  // kvshrink's key, even "null", wins over the implication.
  auto g3 = gguf_of(hf, [](kvs::GgufWriter& w) { w.set_str(kGgufNormalizerKey, "null"); });
  const VocabSpec v3 = vocab_from_gguf(*g3.file);
  EXPECT_TRUE(v3.base_normalizers.empty());
  EXPECT_NE(Tokenizer::create(v3)->encode(kCafeNfd), from_hf->encode(kCafeNfc));
  // A malformed key names itself.
  auto g4 = gguf_of(hf, [](kvs::GgufWriter& w) { w.set_str(kGgufNormalizerKey, "{\"type\": \"NFKD\"}"); });
  EXPECT_NE(test::error_of([&] { vocab_from_gguf(*g4.file); }).find(kGgufNormalizerKey), std::string::npos);
}

// HF -> GGUF -> HF (tokenizer.json written from the GGUF vocabulary alone) tokenizes like the
// original: the Qwen-like tokenizer, SmolLM2's real one, a Llama-2-style SentencePiece one.
TEST(TokConvert, HfToGgufToHfRoundTrip) {
  for (const std::string& src : {qwen_dir(), test::test_data("tokenizers/smollm2")}) {
    SCOPED_TRACE(src);
    auto orig = Tokenizer::create(vocab_from_hf_dir(src));
    auto g = gguf_of(orig->spec());
    auto gg = Tokenizer::create(vocab_from_gguf(*g.file));
    expect_same_tokens(*orig, *gg);
    const std::string dir = hf_dir_of(gg->spec(), "roundtrip_" + std::to_string(orig->n_vocab()));
    auto back = Tokenizer::create(vocab_from_hf_dir(dir));
    expect_same_tokens(*orig, *back);
    EXPECT_EQ(back->bos(), orig->bos());
    EXPECT_EQ(back->eos(), orig->eos());
    EXPECT_EQ(back->spec().add_bos, orig->spec().add_bos);
    EXPECT_EQ(back->spec().chat_template, orig->spec().chat_template);
    EXPECT_EQ(back->chat_format(), orig->chat_format());
    // And once more through GGUF: the same pre-tokenizer name.
    auto g2 = gguf_of(back->spec());
    EXPECT_EQ(g2.file->get_str("tokenizer.ggml.pre"), g.file->get_str("tokenizer.ggml.pre"));
  }
}

TEST(TokConvert, SmolLM2ReferenceThroughGgufAndBack) {
  auto g = gguf_of(test::smollm2_tokenizer().spec());
  EXPECT_EQ(g.file->get_str("tokenizer.ggml.pre"), "smollm");
  auto gg = Tokenizer::create(vocab_from_gguf(*g.file));
  auto back = Tokenizer::create(vocab_from_hf_dir(hf_dir_of(gg->spec(), "smollm2_back")));
  std::ifstream in(test::test_data("tokenizers/smollm2/reference.jsonl"));
  int cases = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto c = json::parse(line);
    const std::string text = c["text"];
    const auto want = c["ids"].get<Ids>();
    EXPECT_EQ(gg->encode(text, true, true), want) << text;
    EXPECT_EQ(back->encode(text, true, true), want) << text;
    EXPECT_EQ(back->decode(want), c["decoded"].get<std::string>()) << text;
    ++cases;
  }
  EXPECT_EQ(cases, 20);
}

// A SentencePiece vocabulary (stories260K, scores only) written as tokenizer.json: merges derived
// from the scores reproduce the score-driven tokenization.
TEST(TokConvert, SentencePieceGgufToTokenizerJson) {
  const Tokenizer& orig = test::stories_tokenizer();
  const std::string dir = hf_dir_of(orig.spec(), "stories_json");
  const VocabSpec v = vocab_from_hf_dir(dir);
  EXPECT_EQ(v.kind, TokenizerKind::SPM);
  EXPECT_FALSE(v.merges.empty());
  auto back = Tokenizer::create(v);
  expect_same_tokens(orig, *back);
  for (const char* t : {"Once upon a time, there was a little girl named Lily.", "  two  spaces ", "\xF0\x9F\x99\x82 x"})
    EXPECT_EQ(back->decode(back->encode(t), true), t);
  // A merges-only SentencePiece-style tokenizer.json -> GGUF gets scores that rank its merges.
  const VocabSpec from_json = vocab_from_hf_dir(dir);
  auto g = gguf_of(from_json);
  auto gg = Tokenizer::create(vocab_from_gguf(*g.file));
  expect_same_tokens(orig, *gg);
}

// A SentencePiece unigram tokenizer.model with remove_extra_whitespaces: through GGUF (kvshrink's
// unigram flag and normalizer key) and back to a HF folder (tokenizer.model only: tokenizer.json
// cannot hold a unigram model).
TEST(TokConvert, UnigramTokenizerModelThroughGgufAndBack) {
  const std::string sp = "\xE2\x96\x81";
  test::Pb m;
  auto piece = [&](const std::string& p, float score, int type) {
    test::Pb x;
    x.str(1, p).f32(2, score);
    if (type != 1) x.u(3, type);
    m.msg(1, x);
  };
  piece("<unk>", 0, 2);
  piece("<s>", 0, 3);
  piece("</s>", 0, 3);
  for (int b = 0; b < 256; ++b) piece(fmt::format("<0x{:02X}>", b), 0, 6);
  for (const auto& [p, sc] : std::vector<std::pair<std::string, float>>{
           {sp, -2}, {"h", -2}, {"e", -2}, {"l", -2}, {"o", -2}, {sp + "h", -2}, {"ll", -3}, {sp + "he", -3},
           {"llo", -5}, {sp + "hello", -6}, {"w", -2}, {sp + "w", -2}, {"r", -2}, {"d", -2}, {"or", -3}, {"ld", -3}})
    piece(p, sc, 1);
  test::Pb tr;
  tr.u(3, 1).u(35, 1).u(40, 0).u(41, 1).u(42, 2).u(43, static_cast<uint64_t>(int64_t{-1}));
  m.msg(2, tr);
  test::Pb ns;
  ns.str(1, "identity").u(3, 1).u(4, 1);
  m.msg(3, ns);
  const std::string src = test::temp_dir("unigram_src");
  test::write_file(src + "/tokenizer.model", m.buf);
  auto orig = Tokenizer::create(vocab_from_hf_dir(src));
  ASSERT_TRUE(orig->spec().unigram);
  ASSERT_TRUE(orig->spec().remove_extra_whitespaces);
  const std::string text = "  hello   world  hell ";
  EXPECT_EQ(orig->decode(orig->encode(text), true), "hello world hell");

  auto g = gguf_of(orig->spec());
  EXPECT_TRUE(g.file->get_bool_opt(kGgufUnigramKey).value_or(false));
  auto gg = Tokenizer::create(vocab_from_gguf(*g.file));
  EXPECT_TRUE(gg->spec().unigram);
  EXPECT_TRUE(gg->spec().remove_extra_whitespaces);
  EXPECT_EQ(gg->spec().normalizer_note, "");
  EXPECT_EQ(gg->encode(text), orig->encode(text));
  expect_same_tokens(*orig, *gg);

  const std::string out = test::temp_dir("unigram_out") + "/hf";
  {
    AtomicDir d(out);
    write_hf_tokenizer_files(d, gg->spec());
    d.commit();
  }
  EXPECT_FALSE(std::filesystem::exists(out + "/tokenizer.json"));
  auto back = Tokenizer::create(vocab_from_hf_dir(out));
  EXPECT_TRUE(back->spec().unigram);
  expect_same_tokens(*orig, *back);
}

TEST(TokConvert, NormalizerJsonRoundTrip) {
  using K = NormalizerStep::Kind;
  const std::vector<NormalizerStep> steps = {{K::StripExtraSpaces, "", false, ""},
                                             {K::NFC, "", false, ""},
                                             {K::Replace, "a+", true, "A"},
                                             {K::Replace, " ", false, "\xE2\x96\x81"},
                                             {K::Prepend, "", false, "\xE2\x96\x81"}};
  const std::string text = normalizer_json_text(steps);
  const auto back = tok::normalizer_from_json_text(text, "test");
  tok::Normalizer a(steps, "a"), b(back, "b");
  for (const char* s : {"  x  yy   aaa  ", "cafe\xCC\x81   a\n  b ", "", "   ", "a\n  ", " \t a"})
    EXPECT_EQ(b.apply(s), a.apply(s)) << s;
  EXPECT_EQ(normalizer_json_text({}), "null");
  EXPECT_TRUE(tok::normalizer_from_json_text("null", "x").empty());
  EXPECT_EQ(describe_normalizers({{K::NFC, "", false, ""}}), "NFC");
}

TEST(TokConvert, TokenizerConfigWritesAbsentSpecialsAsNull) {
  const VocabSpec hf = vocab_from_hf_dir(qwen_dir());
  const json c = json::parse(hf_tokenizer_config_json(Tokenizer::create(hf)->spec()));
  EXPECT_TRUE(c.at("bos_token").is_null());
  EXPECT_EQ(c.at("eos_token"), "<|im_end|>");
  EXPECT_EQ(c.at("pad_token"), "<|endoftext|>");
  EXPECT_EQ(c.at("add_bos_token"), false);
  // The GGUF has no BOS key at all.
  auto g = gguf_of(hf);
  EXPECT_FALSE(g.file->has("tokenizer.ggml.bos_token_id"));
}

TEST(TokConvert, UnknownPreTokenizerIsRefusedNamingTheCandidates) {
  json j = test::qwen_like_tokenizer_json();
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  auto t = Tokenizer::create(vocab_from_hf_dir(test::write_tokenizer_dir(test::temp_dir("prefix_space"), j)));
  const std::string err = test::error_of([&] { gguf_of(t->spec()); });
  EXPECT_NE(err.find("matches none that GGUF can name"), std::string::npos) << err;
}

}  // namespace
}  // namespace kvs
