// Tokenizer::create and the one concrete tokenizer: added-token split -> normalizer ->
// pre-tokenizer -> subword model (encode), and the matching decoder.
#include "model/tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "core/error.h"
#include "model/tokenizer/added_tokens.h"
#include "model/tokenizer/subword_model.h"
#include "model/tokenizer/text_pipeline.h"
#include "model/tokenizer/unicode_util.h"

namespace kvs {

namespace {

using tok::kSpmSpace;

bool is_special_type(int32_t t) {
  return t == static_cast<int32_t>(TokenType::Control) || t == static_cast<int32_t>(TokenType::Unknown);
}

// Checks sizes and ids; fills defaults (types) so the rest of the code can rely on them.
void validate(VocabSpec& s) {
  const size_t n = s.tokens.size();
  if (n == 0) fail("{}: vocabulary has no tokens", s.source);
  if (n > static_cast<size_t>(INT32_MAX)) fail("{}: vocabulary too large ({} tokens)", s.source, n);
  if (!s.scores.empty() && s.scores.size() != n)
    fail("{}: {} scores for {} tokens (expected one score per token)", s.source, s.scores.size(), n);
  if (!s.types.empty() && s.types.size() != n)
    fail("{}: {} token types for {} tokens (expected one type per token)", s.source, s.types.size(), n);
  for (size_t i = 0; i < s.types.size(); ++i)
    if (s.types[i] < 1 || s.types[i] > 6)
      fail("{}: token {} ('{}') has type {} (expected 1..6)", s.source, i, s.tokens[i], s.types[i]);
  auto check_id = [&](int32_t& id, const char* what) {
    if (id >= static_cast<int64_t>(n)) fail("{}: {} id {} out of range (vocabulary has {} tokens)", s.source, what, id, n);
    if (id < 0) id = -1;
  };
  check_id(s.bos, "bos");
  check_id(s.eos, "eos");
  check_id(s.unk, "unk");
  check_id(s.pad, "pad");
  check_id(s.eot, "eot");
  for (const auto& a : s.added_tokens)
    if (a.id < 0 || a.id >= static_cast<int64_t>(n))
      fail("{}: added token '{}' has id {} out of range (vocabulary has {} tokens)", s.source, a.content, a.id, n);
  if (s.types.empty()) {
    s.types.assign(n, static_cast<int32_t>(TokenType::Normal));
    if (s.kind == TokenizerKind::SPM)
      for (size_t i = 0; i < n; ++i) {
        const std::string& t = s.tokens[i];
        if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') s.types[i] = static_cast<int32_t>(TokenType::Byte);
      }
    for (int32_t id : {s.bos, s.eos, s.eot, s.pad})
      if (id >= 0) s.types[id] = static_cast<int32_t>(TokenType::Control);
    if (s.unk >= 0) s.types[s.unk] = static_cast<int32_t>(TokenType::Unknown);
  }
  if (s.added_tokens.empty()) {
    for (size_t i = 0; i < n; ++i) {
      const int32_t t = s.types[i];
      if (is_special_type(t) || t == static_cast<int32_t>(TokenType::UserDefined)) {
        AddedToken a;
        a.id = static_cast<int32_t>(i);
        a.content = s.tokens[i];
        a.special = t != static_cast<int32_t>(TokenType::UserDefined);
        s.added_tokens.push_back(std::move(a));
      }
    }
  }
}

// Derives normalizers and pre-tokenizers for vocabularies that do not spell them out (GGUF).
void derive_pipeline(VocabSpec& s) {
  if (s.explicit_pipeline) return;
  s.normalizers = s.base_normalizers;  // stored beside the GGUF vocabulary or implied by its `pre`
  s.pre_tokenizers.clear();
  if (s.kind == TokenizerKind::SPM) {
    if (s.remove_extra_whitespaces) s.normalizers.push_back({NormalizerStep::Kind::StripExtraSpaces, "", false, ""});
    s.normalizers.push_back({NormalizerStep::Kind::Replace, " ", false, std::string(kSpmSpace)});
    if (s.add_space_prefix) s.normalizers.push_back({NormalizerStep::Kind::Prepend, "", false, std::string(kSpmSpace)});
  } else {
    bool ignore = false;
    s.pre_tokenizers = tok::pre_tokenizer_preset(s.pre, &ignore, s.source + ": tokenizer.ggml.pre");
    s.ignore_merges = s.ignore_merges || ignore;
  }
}

// Replaces ill-formed UTF-8 with U+FFFD (regex-based pipelines need valid UTF-8).
std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  size_t pos = 0;
  uint32_t cp;
  while (pos < s.size()) {
    const size_t start = pos;
    if (tok::utf8_decode(s, pos, cp)) {
      out.append(s.substr(start, pos - start));
    } else {
      out += "\xEF\xBF\xBD";
      ++pos;
    }
  }
  return out;
}

class PipelineTokenizer final : public Tokenizer {
 public:
  enum class Strip { None, First, EveryFragment };

  explicit PipelineTokenizer(VocabSpec spec)
      : Tokenizer(prepare(std::move(spec))),
        index_(spec_),
        added_(spec_.added_tokens),
        norm_(spec_.normalizers, spec_.source + ": normalizer"),
        pre_(spec_.pre_tokenizers, spec_.source + ": pre_tokenizer") {
    const bool spm = spec_.kind == TokenizerKind::SPM;
    if (spm && spec_.unigram)
      model_ = tok::make_unigram_model(spec_, index_);
    else if (spm && spec_.merges.empty())
      model_ = tok::make_spm_model(spec_, index_);
    else
      model_ = tok::make_bpe_model(spec_, index_, /*byte_level=*/!spm);
    sanitize_ = !(spm && !spec_.explicit_pipeline);
    if (spm) {
      if (norm_.prepends()) {
        strip_ = Strip::EveryFragment;
      } else if (const auto* ms = pre_.metaspace()) {
        if (ms->prepend == PreTokenizerStep::Prepend::Always) strip_ = Strip::EveryFragment;
        else if (ms->prepend == PreTokenizerStep::Prepend::First) strip_ = Strip::First;
      }
    }
  }
  using Tokenizer::token_bytes;

  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const override {
    std::vector<int32_t> out;
    std::string clean;
    if (sanitize_ && tok::utf8_valid_prefix(text) != text.size()) {
      clean = sanitize_utf8(text);
      text = clean;
    }
    std::vector<tok::Fragment> frags;
    added_.split(text, parse_special, frags);
    // BOS is added once: not again when the text itself starts with the BOS token.
    const bool text_has_bos = !frags.empty() && frags[0].token >= 0 && frags[0].token == spec_.bos;
    if (add_special && spec_.add_bos && spec_.bos >= 0 && !text_has_bos) out.push_back(spec_.bos);
    std::vector<std::string> words;
    for (const auto& f : frags) {
      if (f.token >= 0) {
        out.push_back(f.token);
        continue;
      }
      std::string s = norm_.apply(text.substr(f.begin, f.end - f.begin));
      if (pre_.empty()) {
        model_->encode_word(s, out);
      } else {
        words.clear();
        pre_.run(std::move(s), f.begin == 0, words);
        for (const auto& w : words) model_->encode_word(w, out);
      }
    }
    if (add_special && spec_.add_eos && spec_.eos >= 0) out.push_back(spec_.eos);
    return out;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string out;
    bool strip = strip_ != Strip::None;
    for (int32_t id : ids) {
      if (id < 0 || id >= n_vocab()) continue;
      const int32_t t = spec_.types[id];
      if (is_special_type(t) || t == static_cast<int32_t>(TokenType::UserDefined)) {
        if (!(skip_special && is_special_type(t))) out += token_bytes(id);
        if (strip_ == Strip::EveryFragment) strip = true;  // the encoder prefixed what follows
        continue;
      }
      std::string piece = token_bytes(id);
      if (strip && !piece.empty()) {
        if (piece[0] == ' ') piece.erase(0, 1);
        strip = false;
      }
      out += piece;
    }
    return out;
  }

  std::string token_bytes(int32_t id) const override {
    if (id < 0 || id >= n_vocab()) return {};
    const std::string& text = spec_.tokens[id];
    const int32_t t = spec_.types[id];
    if (is_special_type(t)) return text;
    // User-defined tokens of a SentencePiece vocabulary are decoded like the others (U+2581 -> ' '):
    // Gemma's runs of spaces ("▁▁", ..., ids 138-167) are user-defined, and HF's decoder chain
    // (Replace ▁ -> ' ') runs over every token, added ones included (checked against transformers.js,
    // tests/model/tokenizer_js). llama.cpp (2025-02-20, token_to_piece) copies user-defined tokens raw,
    // printing "▁▁" for two spaces.
    if (t == static_cast<int32_t>(TokenType::UserDefined) && spec_.kind != TokenizerKind::SPM) return text;
    if (spec_.kind == TokenizerKind::SPM) {
      if (t == static_cast<int32_t>(TokenType::Byte)) {
        if (text.size() == 6) {  // <0xNN>
          unsigned v = 0;
          if (std::sscanf(text.c_str(), "<0x%2X>", &v) == 1) return std::string(1, static_cast<char>(v));
        }
        return text;
      }
      std::string out;
      out.reserve(text.size());
      for (size_t p = 0; p < text.size();) {
        if (text.compare(p, kSpmSpace.size(), kSpmSpace) == 0) {
          out += ' ';
          p += kSpmSpace.size();
        } else {
          out += text[p++];
        }
      }
      return out;
    }
    std::string out;
    out.reserve(text.size());
    size_t p = 0;
    uint32_t cp;
    while (p < text.size()) {
      const size_t start = p;
      if (!tok::utf8_decode(text, p, cp)) {
        out += text[p++];
        continue;
      }
      const int b = tok::gpt2_cp_to_byte(cp);
      if (b >= 0)
        out += static_cast<char>(b);
      else
        out.append(text, start, p - start);
    }
    return out;
  }

 protected:
  bool strips_leading_space() const override { return strip_ != Strip::None; }

 private:
  static VocabSpec prepare(VocabSpec s) {
    validate(s);
    derive_pipeline(s);
    return s;
  }

  tok::VocabIndex index_;
  tok::AddedTokenMatcher added_;
  tok::Normalizer norm_;
  tok::PreTokenizer pre_;
  std::unique_ptr<tok::SubwordModel> model_;
  bool sanitize_ = true;
  Strip strip_ = Strip::None;
};

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::create(VocabSpec spec) {
  return std::make_unique<PipelineTokenizer>(std::move(spec));
}

std::string Tokenizer::token_bytes(int32_t id, bool first) const {
  std::string s = token_bytes(id);
  if (first && strips_leading_space() && !s.empty() && s[0] == ' ') s.erase(0, 1);
  return s;
}

bool Tokenizer::is_eog(int32_t id) const {
  if (id < 0 || id >= n_vocab()) return false;
  if (id == spec_.eos || id == spec_.eot) return true;
  const int32_t t = spec_.types.empty() ? 1 : spec_.types[id];
  if (t != static_cast<int32_t>(TokenType::Control) && t != static_cast<int32_t>(TokenType::UserDefined))
    return false;
  static constexpr std::array<std::string_view, 8> kEog = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>", "<|end_of_text|>"};
  const std::string& text = spec_.tokens[id];
  return std::find(kEog.begin(), kEog.end(), text) != kEog.end();
}

}  // namespace kvs
