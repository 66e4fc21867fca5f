// Vocabularies written out as Hugging Face tokenizer files, the normalizer steps a GGUF file
// carries, SentencePiece scores <-> merges, and the tokenization probe used to check conversions.
#include "model/tokenizer/hf_export.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_map>

#include "core/error.h"
#include "model/tokenizer/subword_model.h"
#include "model/tokenizer/unicode_util.h"

namespace kvs {

namespace {

using ojson = nlohmann::ordered_json;
using tok::kSpmSpace;

// One JSON string literal; tokenizer.json cannot hold text that is not valid UTF-8.
std::string quote(const std::string& s, const VocabSpec& v, std::string_view what) {
  try {
    return ojson(s).dump();
  } catch (const ojson::exception&) {
    fail("{}: {} is not valid UTF-8; tokenizer.json cannot hold it", v.source, what);
  }
}

ojson pattern_json(const std::string& p, bool regex) {
  ojson o = ojson::object();
  o[regex ? "Regex" : "String"] = p;
  return o;
}

ojson replace_json(const std::string& p, bool regex, const std::string& content) {
  return ojson{{"type", "Replace"}, {"pattern", pattern_json(p, regex)}, {"content", content}};
}

ojson normalizer_json(const std::vector<NormalizerStep>& steps) {
  ojson list = ojson::array();
  for (const auto& st : steps) {
    switch (st.kind) {
      case NormalizerStep::Kind::NFC: list.push_back({{"type", "NFC"}}); break;
      case NormalizerStep::Kind::Prepend: list.push_back({{"type", "Prepend"}, {"prepend", st.content}}); break;
      case NormalizerStep::Kind::Replace: list.push_back(replace_json(st.pattern, st.regex, st.content)); break;
      case NormalizerStep::Kind::StripExtraSpaces:
        // SentencePiece remove_extra_whitespaces: no leading/trailing ' ', inner runs become one.
        // \A and \z (not ^ $) mean the same in PCRE2 and in HF's Oniguruma.
        list.push_back(replace_json(R"(\A +| +\z)", true, ""));
        list.push_back(replace_json(" {2,}", true, " "));
        break;
    }
  }
  if (list.empty()) return nullptr;
  if (list.size() == 1) return list[0];
  return ojson{{"type", "Sequence"}, {"normalizers", list}};
}

const char* behavior_name(SplitBehavior b) {
  switch (b) {
    case SplitBehavior::Removed: return "Removed";
    case SplitBehavior::Isolated: return "Isolated";
    case SplitBehavior::MergedWithPrevious: return "MergedWithPrevious";
    case SplitBehavior::MergedWithNext: return "MergedWithNext";
    case SplitBehavior::Contiguous: return "Contiguous";
  }
  return "Isolated";
}

ojson pre_tokenizer_json(const VocabSpec& v) {
  using K = PreTokenizerStep::Kind;
  ojson list = ojson::array();
  bool byte_level = false;
  for (const auto& st : v.pre_tokenizers) {
    switch (st.kind) {
      case K::Split:
        list.push_back({{"type", "Split"},
                        {"pattern", pattern_json(st.pattern, st.regex)},
                        {"behavior", behavior_name(st.behavior)},
                        {"invert", st.invert}});
        break;
      case K::ByteLevel:
        byte_level = true;
        list.push_back({{"type", "ByteLevel"},
                        {"add_prefix_space", st.add_prefix_space},
                        {"trim_offsets", true},
                        {"use_regex", st.use_regex}});
        break;
      case K::Digits: list.push_back({{"type", "Digits"}, {"individual_digits", st.individual_digits}}); break;
      case K::Metaspace: {
        const char* scheme = st.prepend == PreTokenizerStep::Prepend::Always  ? "always"
                             : st.prepend == PreTokenizerStep::Prepend::First ? "first"
                                                                              : "never";
        list.push_back({{"type", "Metaspace"}, {"replacement", st.replacement}, {"prepend_scheme", scheme},
                        {"split", st.split}});
        break;
      }
    }
  }
  // GGUF pipelines are regex splits only; the byte -> GPT-2 alphabet step is HF's ByteLevel.
  if (v.kind == TokenizerKind::BPE && !byte_level)
    list.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
  if (list.empty()) return nullptr;
  if (list.size() == 1) return list[0];
  return ojson{{"type", "Sequence"}, {"pretokenizers", list}};
}

const std::string* token_text(const VocabSpec& v, int32_t id) {
  return id >= 0 && id < static_cast<int32_t>(v.tokens.size()) ? &v.tokens[static_cast<size_t>(id)] : nullptr;
}

ojson post_processor_json(const VocabSpec& v) {
  const std::string* bos = v.add_bos ? token_text(v, v.bos) : nullptr;
  const std::string* eos = v.add_eos ? token_text(v, v.eos) : nullptr;
  if (!bos && !eos) return nullptr;
  auto special = [](const std::string& t, int type_id) { return ojson{{"SpecialToken", {{"id", t}, {"type_id", type_id}}}}; };
  auto seq = [](const char* id, int type_id) { return ojson{{"Sequence", {{"id", id}, {"type_id", type_id}}}}; };
  ojson single = ojson::array(), pair = ojson::array(), specials = ojson::object();
  if (bos) single.push_back(special(*bos, 0));
  single.push_back(seq("A", 0));
  if (eos) single.push_back(special(*eos, 0));
  pair = single;
  if (bos) pair.push_back(special(*bos, 1));
  pair.push_back(seq("B", 1));
  if (eos) pair.push_back(special(*eos, 1));
  if (bos) specials[*bos] = {{"id", *bos}, {"ids", {v.bos}}, {"tokens", {*bos}}};
  if (eos) specials[*eos] = {{"id", *eos}, {"ids", {v.eos}}, {"tokens", {*eos}}};
  return {{"type", "TemplateProcessing"}, {"single", single}, {"pair", pair}, {"special_tokens", specials}};
}

ojson decoder_json(const VocabSpec& v) {
  if (v.kind == TokenizerKind::BPE)
    return {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  ojson list = ojson::array();
  list.push_back(replace_json(std::string(kSpmSpace), false, " "));
  list.push_back({{"type", "ByteFallback"}});
  list.push_back({{"type", "Fuse"}});
  if (spm_adds_space_prefix(v)) list.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  return {{"type", "Sequence"}, {"decoders", list}};
}

// The added tokens of a prepared spec (or, for an unprepared one, those its types imply).
std::vector<AddedToken> added_tokens_of(const VocabSpec& v) {
  std::vector<AddedToken> out = v.added_tokens;
  if (out.empty())
    for (size_t i = 0; i < v.types.size(); ++i) {
      const auto t = static_cast<TokenType>(v.types[i]);
      if (t != TokenType::Control && t != TokenType::Unknown && t != TokenType::UserDefined) continue;
      AddedToken a;
      a.id = static_cast<int32_t>(i);
      a.content = v.tokens[i];
      a.special = t != TokenType::UserDefined;
      out.push_back(std::move(a));
    }
  std::stable_sort(out.begin(), out.end(), [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
  return out;
}

bool has_byte_tokens(const VocabSpec& v) {
  for (int32_t t : v.types)
    if (t == static_cast<int32_t>(TokenType::Byte)) return true;
  return false;
}

}  // namespace

std::string normalizer_json_text(const std::vector<NormalizerStep>& steps) { return normalizer_json(steps).dump(); }

bool spm_adds_space_prefix(const VocabSpec& v) {
  if (!v.explicit_pipeline) return v.add_space_prefix;
  for (const auto& st : v.normalizers)
    if (st.kind == NormalizerStep::Kind::Prepend && st.content == kSpmSpace) return true;
  for (const auto& st : v.pre_tokenizers)
    if (st.kind == PreTokenizerStep::Kind::Metaspace && st.prepend != PreTokenizerStep::Prepend::Never) return true;
  return false;
}

std::vector<NormalizerStep> gguf_extra_normalizers(const VocabSpec& v) {
  if (!v.explicit_pipeline) {
    std::vector<NormalizerStep> out = v.base_normalizers;
    if (v.kind == TokenizerKind::SPM && v.remove_extra_whitespaces)
      out.push_back({NormalizerStep::Kind::StripExtraSpaces, "", false, ""});
    return out;
  }
  if (v.kind == TokenizerKind::BPE) return v.normalizers;
  std::vector<NormalizerStep> out;
  for (const auto& st : v.normalizers) {
    if (st.kind == NormalizerStep::Kind::Prepend && st.content == kSpmSpace) continue;
    if (st.kind == NormalizerStep::Kind::Replace && !st.regex && st.pattern == " " && st.content == kSpmSpace) continue;
    out.push_back(st);
  }
  return out;
}

std::vector<float> spm_scores_from_merges(const VocabSpec& v) {
  std::unordered_map<std::string_view, int32_t, tok::StringHash> id_of;
  for (size_t i = 0; i < v.tokens.size(); ++i) id_of[v.tokens[i]] = static_cast<int32_t>(i);
  std::vector<float> scores(v.tokens.size(), -1e9f);  // tokens no merge makes: merged last
  std::vector<bool> seen(v.tokens.size(), false);
  std::string joined;
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& m = v.merges[r];
    const size_t sp = m.find(' ', 1);
    if (sp == std::string::npos) continue;
    joined.assign(m, 0, sp);
    joined.append(m, sp + 1, std::string::npos);
    auto it = id_of.find(joined);
    if (it == id_of.end() || seen[static_cast<size_t>(it->second)]) continue;
    seen[static_cast<size_t>(it->second)] = true;
    scores[static_cast<size_t>(it->second)] = -static_cast<float>(r);
  }
  return scores;
}

std::vector<std::string> spm_merges_from_scores(const VocabSpec& v) {
  std::unordered_map<std::string_view, int32_t, tok::StringHash> id_of;  // last id wins, as VocabIndex
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (!v.tokens[i].empty()) id_of[v.tokens[i]] = static_cast<int32_t>(i);
  struct Cand {
    float score;
    int32_t id, left;
    std::string merge;
  };
  std::vector<Cand> cands;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string& t = v.tokens[i];
    if (t.empty() || id_of[t] != static_cast<int32_t>(i)) continue;
    const float score = v.scores.empty() ? 0.0f : v.scores[i];
    for (size_t cut = tok::utf8_char_len(t, 0); cut < t.size(); cut += tok::utf8_char_len(t, cut)) {
      const std::string_view l(t.data(), cut), r(t.data() + cut, t.size() - cut);
      if (l.find(' ', 1) != std::string_view::npos) continue;  // "l r" must split at the first space
      auto li = id_of.find(l), ri = id_of.find(r);
      if (li == id_of.end() || ri == id_of.end()) continue;
      cands.push_back({score, static_cast<int32_t>(i), li->second, std::string(l) + " " + std::string(r)});
    }
  }
  std::stable_sort(cands.begin(), cands.end(), [](const Cand& a, const Cand& b) {
    if (a.score != b.score) return a.score > b.score;
    if (a.id != b.id) return a.id < b.id;
    return a.left < b.left;
  });
  std::vector<std::string> out;
  out.reserve(cands.size());
  for (auto& c : cands) out.push_back(std::move(c.merge));
  return out;
}

std::string hf_tokenizer_json(const VocabSpec& v) {
  if (v.kind == TokenizerKind::SPM && v.unigram)
    fail("{}: a SentencePiece unigram vocabulary cannot be written as tokenizer.json (tokenizer.model holds it)", v.source);
  const bool spm = v.kind == TokenizerKind::SPM;
  std::string out = "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [";
  const auto added = added_tokens_of(v);
  for (size_t i = 0; i < added.size(); ++i) {
    const AddedToken& a = added[i];
    out += i ? ",\n    " : "\n    ";
    out += fmt::format(R"({{"id": {}, "content": {}, "single_word": {}, "lstrip": {}, "rstrip": {}, "normalized": false, "special": {}}})",
                       a.id, quote(a.content, v, fmt::format("added token {}", a.id)), a.single_word, a.lstrip, a.rstrip,
                       a.special);
  }
  out += added.empty() ? "],\n" : "\n  ],\n";
  out += "  \"normalizer\": " + normalizer_json(v.normalizers).dump() + ",\n";
  out += "  \"pre_tokenizer\": " + pre_tokenizer_json(v).dump() + ",\n";
  out += "  \"post_processor\": " + post_processor_json(v).dump() + ",\n";
  out += "  \"decoder\": " + decoder_json(v).dump() + ",\n";
  const std::string* unk = token_text(v, v.unk);
  out += fmt::format(
      "  \"model\": {{\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": {},\n"
      "    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": {},\n"
      "    \"byte_fallback\": {},\n    \"ignore_merges\": {},\n    \"vocab\": {{",
      unk ? quote(*unk, v, "the unknown token") : "null", v.fuse_unk, spm && v.byte_fallback && has_byte_tokens(v),
      v.ignore_merges);
  // Duplicate texts: the last id wins (as in the tokenizer's own index); JSON keys are unique.
  std::unordered_map<std::string_view, size_t, tok::StringHash> last;
  for (size_t i = 0; i < v.tokens.size(); ++i) last[v.tokens[i]] = i;
  bool first = true;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    if (last[v.tokens[i]] != i) continue;
    out += first ? "\n      " : ",\n      ";
    first = false;
    out += quote(v.tokens[i], v, fmt::format("token {}", i));
    out += fmt::format(": {}", i);
  }
  out += "\n    },\n    \"merges\": [";
  const std::vector<std::string> generated = spm && v.merges.empty() ? spm_merges_from_scores(v) : std::vector<std::string>{};
  const std::vector<std::string>& merges = spm && v.merges.empty() ? generated : v.merges;
  for (size_t i = 0; i < merges.size(); ++i) {
    out += i ? ",\n      " : "\n      ";
    out += quote(merges[i], v, fmt::format("merge {}", i));
  }
  out += merges.empty() ? "]\n  }\n}\n" : "\n    ]\n  }\n}\n";
  return out;
}

std::string hf_tokenizer_config_json(const VocabSpec& v) {
  ojson c = ojson::object();
  c["add_bos_token"] = v.add_bos;
  c["add_eos_token"] = v.add_eos;
  auto special = [&](const char* key, int32_t id) {
    const std::string* t = token_text(v, id);
    c[key] = t ? ojson(*t) : ojson(nullptr);
  };
  special("bos_token", v.bos);
  special("eos_token", v.eos);
  special("unk_token", v.unk);
  special("pad_token", v.pad);
  c["clean_up_tokenization_spaces"] = false;
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  if (!v.chat_template.empty()) c["chat_template"] = v.chat_template;
  try {
    return c.dump(2) + "\n";
  } catch (const ojson::exception& e) {
    fail("{}: cannot write tokenizer_config.json: {}", v.source, e.what());
  }
}

const std::vector<std::string>& tokenizer_probe_texts() {
  static const std::vector<std::string> k = {
      "Hello world",
      "Hello, World! It's 2026-11-22: 1234567 items cost $3.14 (or 12,345.67). I'd've said \"no\"...",
      "  leading spaces and trailing   ",
      "tabs\tand\nnew lines\r\n\n\nand   runs    of spaces",
      "DON'T WON'T can't I'M we'RE they'll",
      "caf\xC3\xA9 na\xC3\xAFve \xE2\x80\x94 \xE2\x80\x9Cquotes\xE2\x80\x9D",                  // NFC
      "cafe\xCC\x81 nai\xCC\x88ve Ame\xCC\x81lie",                                             // NFD
      "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB\xE1\x84\x80\xE1\x85\xB3\xE1\x86\xAF",              // Hangul jamo
      "\xED\x95\x9C\xEA\xB8\x80 \xCC\x81x",                                                    // Hangul, lone mark
      "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C \xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF",
      "emoji \xF0\x9F\x99\x82\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD and \xE2\x9C\x93",
      "for (int i = 0; i < n; ++i) { x += a[i] * 2; }  // x==y && a+=1",
      "The special magic number for apple is 7342981.",
      "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xCE\x93\xCE\xB5\xCE\xB9\xCE\xAC",
      " ",
      "",
  };
  return k;
}

std::string first_tokenization_difference(const Tokenizer& a, const Tokenizer& b) {
  auto show = [](const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size() && i < 24; ++i) s += fmt::format("{}{}", i ? " " : "", ids[i]);
    return ids.size() > 24 ? s + " ..." : s;
  };
  auto check = [&](const std::string& text, bool parse_special) -> std::string {
    const auto x = a.encode(text, true, parse_special), y = b.encode(text, true, parse_special);
    if (x == y) return "";
    return fmt::format("'{}' gives [{}] vs [{}]", text.substr(0, 80), show(x), show(y));
  };
  for (const auto& t : tokenizer_probe_texts())
    if (auto d = check(t, false); !d.empty()) return d;
  std::string with_specials = "Hi";
  int n = 0;
  for (const auto& at : a.spec().added_tokens) {
    if (n++ == 16) break;
    with_specials += at.content + " x\n" + at.content;
  }
  return check(with_specials, true);
}

}  // namespace kvs
