// Byte-level BPE: SmolLM2's tokenizer.json against transformers.js, digits, specials, decoding.
#include <chrono>
#include <sstream>
#include <nlohmann/json.hpp>

#include "tokenizer_test_util.h"

namespace kvs {
namespace {

using test::smollm2_tokenizer;

TEST(TokBpe, SmolLM2MatchesTransformersJsReference) {
  std::ifstream in(test::test_data("tokenizers/smollm2/reference.jsonl"));
  ASSERT_TRUE(in.good());
  int cases = 0, matched = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto c = nlohmann::json::parse(line);
    const std::string text = c["text"];
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto got = smollm2_tokenizer().encode(text, /*add_special=*/true, /*parse_special=*/true);
    EXPECT_EQ(got, want) << text;
    EXPECT_EQ(smollm2_tokenizer().decode(got), c["decoded"].get<std::string>()) << text;
    ++cases;
    matched += got == want;
  }
  EXPECT_EQ(cases, 20);
  EXPECT_EQ(matched, cases);
}

TEST(TokBpe, SmolLM2Spec) {
  const auto& t = smollm2_tokenizer();
  EXPECT_EQ(t.spec().kind, TokenizerKind::BPE);
  EXPECT_EQ(t.n_vocab(), 49152);
  EXPECT_EQ(t.spec().merges.size(), 48900u);
  EXPECT_EQ(t.bos(), 1);  // config.json bos_token_id / eos_token_id
  EXPECT_EQ(t.eos(), 2);
  EXPECT_FALSE(t.spec().add_bos);  // no post_processor: nothing is added
  EXPECT_EQ(t.spec().types[1], static_cast<int32_t>(TokenType::Control));
  EXPECT_EQ(t.chat_format(), ChatFormat::ChatML);  // no template shipped, vocab has <|im_start|>
}

TEST(TokBpe, DigitsAreSplitOneByOne) {
  const auto& t = smollm2_tokenizer();
  // Digits(individual_digits) runs before the byte-level regex: "2026" is four tokens.
  EXPECT_EQ(t.encode("2026"), std::vector<int32_t>({34, 32, 34, 38}));
  const auto ids = t.encode("year 7342981!");
  EXPECT_EQ(std::count_if(ids.begin(), ids.end(), [](int32_t id) { return id >= 32 && id <= 41; }), 7);
  EXPECT_EQ(t.decode(ids), "year 7342981!");
}

TEST(TokBpe, SpecialTokensParsedOnlyWhenAsked) {
  const auto& t = smollm2_tokenizer();
  const std::string text = "<|im_start|>user\nHi<|im_end|>";
  const auto parsed = t.encode(text, true, /*parse_special=*/true);
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), 1);
  EXPECT_EQ(parsed.back(), 2);
  EXPECT_EQ(parsed[1], 4093);  // "user"
  const auto plain = t.encode(text, true, /*parse_special=*/false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  EXPECT_GT(plain.size(), parsed.size());
  EXPECT_EQ(t.decode(plain), text);
  EXPECT_EQ(t.decode(parsed), text);
  EXPECT_EQ(t.decode(parsed, /*skip_special=*/true), "user\nHi");
}

TEST(TokBpe, AddedTokenStripFlags) {
  VocabSpec s = smollm2_tokenizer().spec();
  for (auto& a : s.added_tokens)
    if (a.content == "<|im_start|>") a.lstrip = a.rstrip = true;
  auto t = Tokenizer::create(std::move(s));
  // The spaces around the token are absorbed into it.
  EXPECT_EQ(t->encode("a <|im_start|>  b", false, true), std::vector<int32_t>({81, 1, 82}));
  EXPECT_EQ(smollm2_tokenizer().encode("a <|im_start|>  b", false, true),
            std::vector<int32_t>({81, 216, 1, 216, 278}));
}

TEST(TokBpe, TokenBytesConcatenateToDecode) {
  const auto& t = smollm2_tokenizer();
  const std::string text = "Caf\xC3\xA9 \xF0\x9F\x9A\x80 \xE4\xBD\xA0\xE5\xA5\xBD, <|im_end|> done";
  const auto ids = t.encode(text, true, true);
  std::string joined;
  for (int32_t id : ids) joined += t.token_bytes(id);
  EXPECT_EQ(joined, text);
  EXPECT_EQ(t.decode(ids), text);
  // A multi-byte character split over tokens yields partial UTF-8 per token.
  const auto rocket = t.encode("\xF0\x9F\x9A\x80");
  EXPECT_GT(rocket.size(), 1u);
}

TEST(TokBpe, InvalidUtf8BecomesReplacementCharacter) {
  const auto& t = smollm2_tokenizer();
  EXPECT_EQ(t.decode(t.encode(std::string("a\xFF b", 4))), "a\xEF\xBF\xBD b");
}

TEST(TokBpe, IsEog) {
  const auto& t = smollm2_tokenizer();
  EXPECT_TRUE(t.is_eog(2));   // <|im_end|> (eos)
  EXPECT_TRUE(t.is_eog(0));   // <|endoftext|>
  EXPECT_FALSE(t.is_eog(1));  // <|im_start|>
  EXPECT_FALSE(t.is_eog(19556));
}

TEST(TokBpe, LongTextRoundTrip) {
  std::ifstream in(test::test_data("eval/niah_paul_graham_essays/essays/apple.txt"));
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const auto& t = smollm2_tokenizer();
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = t.encode(text, false, false);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("tokens_per_second", std::to_string(static_cast<long>(ids.size() / std::max(s, 1e-9))));
  EXPECT_GT(ids.size(), text.size() / 8);
  EXPECT_EQ(t.decode(ids), text);
}

TEST(TokBpe, LoadTime) {
  const auto t0 = std::chrono::steady_clock::now();
  auto t = Tokenizer::create(vocab_from_hf_dir(test::test_data("tokenizers/smollm2")));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  RecordProperty("load_ms", std::to_string(static_cast<long>(ms)));
  EXPECT_EQ(t->n_vocab(), 49152);
}

}  // namespace
}  // namespace kvs
