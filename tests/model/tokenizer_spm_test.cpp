// SentencePiece-style tokenization: stories260K against llama.cpp, byte fallback, specials,
// decoding and streaming pieces.
#include <nlohmann/json.hpp>

#include "tokenizer_test_util.h"

namespace kvs {
namespace {

using test::stories_tokenizer;

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

TEST(TokSpm, Stories260KMatchesLlamaCppReference) {
  const auto cases = read_jsonl(test::test_data("models/stories260K/reference.jsonl"));
  ASSERT_EQ(cases.size(), 3u);
  int matched = 0;
  for (const auto& c : cases) {
    const std::string prompt = c["prompt"];
    const auto want = c["tokens"].get<std::vector<int32_t>>();
    const auto got = stories_tokenizer().encode(prompt, /*add_special=*/true);
    EXPECT_EQ(got, want) << prompt;
    matched += got == want;
    EXPECT_EQ(stories_tokenizer().decode(got, /*skip_special=*/true), prompt);
  }
  EXPECT_EQ(matched, 3);
}

TEST(TokSpm, VocabFromGguf) {
  const auto& s = stories_tokenizer().spec();
  EXPECT_EQ(s.kind, TokenizerKind::SPM);
  EXPECT_EQ(stories_tokenizer().n_vocab(), 512);
  EXPECT_EQ(s.bos, 1);
  EXPECT_EQ(s.eos, 2);
  EXPECT_EQ(s.unk, 0);
  EXPECT_EQ(s.pad, -1);  // stored as 0xFFFFFFFF
  EXPECT_TRUE(s.add_bos);
  EXPECT_FALSE(s.add_eos);
  EXPECT_TRUE(s.add_space_prefix);
  EXPECT_EQ(s.types[3], static_cast<int32_t>(TokenType::Byte));
}

TEST(TokSpm, BosOnlyWithAddSpecial) {
  const auto& t = stories_tokenizer();
  EXPECT_EQ(t.encode("", true), std::vector<int32_t>{1});
  EXPECT_TRUE(t.encode("", false).empty());
  const auto with = t.encode("Once upon a time", true);
  const auto without = t.encode("Once upon a time", false);
  ASSERT_EQ(with.size(), without.size() + 1);
  EXPECT_TRUE(std::equal(without.begin(), without.end(), with.begin() + 1));
}

TEST(TokSpm, EmojiThroughByteFallback) {
  const auto& t = stories_tokenizer();
  const std::string text = "Lily saw a \xF0\x9F\x99\x82 and \xE4\xBD\xA0!";  // 🙂 and 你
  const auto ids = t.encode(text, true);
  // <0xNN> is token 3 + NN in this vocabulary; each UTF-8 byte becomes one byte token.
  auto has_run = [&](std::vector<int32_t> run) {
    return std::search(ids.begin(), ids.end(), run.begin(), run.end()) != ids.end();
  };
  EXPECT_TRUE(has_run({3 + 0xF0, 3 + 0x9F, 3 + 0x99, 3 + 0x82}));
  EXPECT_TRUE(has_run({3 + 0xE4, 3 + 0xBD, 3 + 0xA0}));
  EXPECT_EQ(t.decode(ids, /*skip_special=*/true), text);
  // Streaming: the byte tokens carry raw bytes, concatenated they give the text back.
  std::string streamed;
  for (size_t i = 1; i < ids.size(); ++i) streamed += t.token_bytes(ids[i], /*first=*/i == 1);
  EXPECT_EQ(streamed, text);
}

TEST(TokSpm, InvalidUtf8BytesRoundTrip) {
  const auto& t = stories_tokenizer();
  const std::string text = std::string("ab\xFF\xC3 x", 6);
  EXPECT_EQ(t.decode(t.encode(text, false)), text);
}

TEST(TokSpm, SpecialTokensParsedOnlyWhenAsked) {
  const auto& t = stories_tokenizer();
  const auto parsed = t.encode("<s>Once</s>", false, /*parse_special=*/true);
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), 1);
  EXPECT_EQ(parsed.back(), 2);
  // After a special token the text gets its own space prefix, as in llama.cpp.
  const auto once = t.encode("Once", false);
  EXPECT_EQ(std::vector<int32_t>(parsed.begin() + 1, parsed.end() - 1), once);
  EXPECT_EQ(t.decode(parsed), "<s>Once</s>");
  EXPECT_EQ(t.decode(parsed, /*skip_special=*/true), "Once");

  // The automatic BOS is not doubled when the text starts with <s>.
  EXPECT_EQ(t.encode("<s>Once</s>", true, true), parsed);
  const auto plain = t.encode("<s>Once</s>", false, /*parse_special=*/false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  EXPECT_EQ(t.decode(plain), "<s>Once</s>");
}

TEST(TokSpm, DecodeStripsOnlyTheAddedSpace) {
  const auto& t = stories_tokenizer();
  for (const std::string text : {"Once upon a time", "  two leading spaces", "trailing  ", "a\nb"}) {
    const auto ids = t.encode(text, true);
    EXPECT_EQ(t.decode(ids, true), text);
    EXPECT_EQ(t.decode(ids, false), "<s>" + text);
  }
  const auto ids = t.encode("Once", false);
  ASSERT_FALSE(ids.empty());
  const std::string piece = t.token_bytes(ids[0]);
  ASSERT_FALSE(piece.empty());
  EXPECT_EQ(piece[0], ' ');
  EXPECT_EQ(t.token_bytes(ids[0], /*first=*/true), piece.substr(1));
  EXPECT_EQ(t.token_bytes(ids[0], /*first=*/false), piece);
}

TEST(TokSpm, IsEog) {
  const auto& t = stories_tokenizer();
  EXPECT_TRUE(t.is_eog(2));
  EXPECT_FALSE(t.is_eog(1));
  EXPECT_FALSE(t.is_eog(400));
  EXPECT_FALSE(t.is_eog(-1));
  EXPECT_FALSE(t.is_eog(100000));
}

// Score-driven merging on a hand-made vocabulary: the highest-scoring merged piece wins, ties go
// to the leftmost pair.
TEST(TokSpm, HighestScoreMergesFirst) {
  VocabSpec s;
  s.kind = TokenizerKind::SPM;
  s.tokens = {"<unk>", "<s>", "</s>", "\u2581", "a", "b", "c", "ab", "bc", "\u2581a", "abc"};
  s.scores = {0, 0, 0, -1, -1, -1, -1, -5, -2, -9, -3};
  s.types = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1};
  s.bos = 1, s.eos = 2, s.unk = 0;
  s.add_bos = false;
  s.add_space_prefix = false;
  auto t = Tokenizer::create(s);
  // "abc": bc (-2) beats ab (-5); then a+bc = "abc" exists (-3).
  EXPECT_EQ(t->encode("abc"), std::vector<int32_t>({10}));
  // "ab": only ab.
  EXPECT_EQ(t->encode("ab"), std::vector<int32_t>({7}));
  // Unknown character and no byte tokens: unk.
  EXPECT_EQ(t->encode("axb"), std::vector<int32_t>({4, 0, 5}));
}

TEST(TokSpm, RejectsInconsistentSpec) {
  VocabSpec s;
  s.tokens = {"a", "b"};
  s.scores = {0.0f};
  EXPECT_NE(test::error_of([&] { Tokenizer::create(s); }).find("1 scores for 2 tokens"), std::string::npos);
  s.scores.clear();
  s.bos = 7;
  EXPECT_NE(test::error_of([&] { Tokenizer::create(s); }).find("bos id 7 out of range"), std::string::npos);
  s.bos = -1;
  s.types = {1, 9};
  EXPECT_NE(test::error_of([&] { Tokenizer::create(s); }).find("type 9"), std::string::npos);
  EXPECT_NE(test::error_of([] { Tokenizer::create(VocabSpec{}); }).find("no tokens"), std::string::npos);
}

}  // namespace
}  // namespace kvs
