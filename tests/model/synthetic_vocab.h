// Small tokenizers built in test code (no model hub): a Qwen-like byte-level BPE tokenizer.json
// (NFC normalizer, Qwen2 split regex, ChatML specials, no BOS) and helpers to write HF tokenizer
// folders. Used by tests/model and tests/runtime.
#pragma once
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kvs::test {

// The GPT-2 byte -> code point alphabet as UTF-8 (byte b is token id b in the vocabularies here).
inline std::string gpt2_char(int b) {
  static int extra[256] = {};
  static bool init = false;
  if (!init) {
    int next = 256;
    for (int x = 0; x < 256; ++x) {
      const bool printable = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
      extra[x] = printable ? x : next++;
    }
    init = true;
  }
  const int cp = extra[b];
  std::string s;
  if (cp < 0x80) s += static_cast<char>(cp);
  else s += static_cast<char>(0xC0 | (cp >> 6)), s += static_cast<char>(0x80 | (cp & 0x3F));
  return s;
}

// Text -> its byte-level spelling ("é" -> "Ã©").
inline std::string byte_level(const std::string& text) {
  std::string s;
  for (unsigned char c : text) s += gpt2_char(c);
  return s;
}

inline constexpr const char* kQwen2SplitRegex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// A Qwen2-style tokenizer.json: 256 byte tokens, merges building a few words (among them "café"
// and " café" with a precomposed é, and the Hangul syllable 한), the three ChatML specials.
// ids: 0..255 bytes, then one per merge, then <|endoftext|>, <|im_start|>, <|im_end|>.
inline nlohmann::json qwen_like_tokenizer_json() {
  using json = nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[gpt2_char(b)] = b;
  // Merges as pairs of texts (spelled in bytes below), in priority order.
  const std::vector<std::pair<std::string, std::string>> merges_text = {
      {"\xC3", "\xA9"},  {"c", "a"},     {"ca", "f"},   {"caf", "\xC3\xA9"}, {" ", "c"},   {" c", "a"},
      {" ca", "f"},      {" caf", "\xC3\xA9"}, {"h", "e"}, {"l", "l"},     {"he", "ll"}, {"hell", "o"},
      {" ", "w"},        {"o", "r"},    {" w", "or"},  {"l", "d"},         {" wor", "ld"}, {"\xED", "\x95"},
      {"\xED\x95", "\x9C"}, {"'", "t"}, {"n", "'t"},   {"i", "n"},         {" ", "t"},   {" t", "he"}};
  json merges = json::array();
  int id = 256;
  for (const auto& [l, r] : merges_text) {
    merges.push_back(byte_level(l) + " " + byte_level(r));
    vocab[byte_level(l + r)] = id++;
  }
  json added = json::array();
  for (const char* t : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    vocab[t] = id;
    added.push_back({{"id", id++}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"special", true}});
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", {{"type", "NFC"}}},
          {"pre_tokenizer",
           {{"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Split"}, {"pattern", {{"Regex", kQwen2SplitRegex}}}, {"behavior", "Isolated"}, {"invert", false}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}}},
          {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""}, {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
            {"vocab", vocab}, {"merges", merges}}}};
}

// Qwen's tokenizer_config.json: no BOS, <|im_end|> ends a turn, ChatML template.
inline nlohmann::json qwen_like_tokenizer_config() {
  return {{"add_bos_token", false},
          {"bos_token", nullptr},
          {"eos_token", "<|im_end|>"},
          {"pad_token", "<|endoftext|>"},
          {"chat_template", "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                            "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"}};
}

// Writes tokenizer.json (+ tokenizer_config.json when given) into a fresh folder `dir`.
inline std::string write_tokenizer_dir(const std::string& dir, const nlohmann::json& tokenizer,
                                       const nlohmann::json& config = nullptr) {
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/tokenizer.json") << tokenizer.dump();
  if (!config.is_null()) std::ofstream(dir + "/tokenizer_config.json") << config.dump();
  return dir;
}

}  // namespace kvs::test
