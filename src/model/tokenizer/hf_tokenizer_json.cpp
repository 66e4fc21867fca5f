// HF tokenizers tokenizer.json -> VocabSpec: model (BPE), added_tokens, normalizer,
// pre_tokenizer, post_processor (BOS/EOS). Byte-level vocabularies (a ByteLevel pre-tokenizer or
// decoder) become TokenizerKind::BPE; the rest (Llama 2 / Mistral style, byte_fallback, Metaspace
// or Prepend+Replace normalizers) become TokenizerKind::SPM driven by the merges.
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "model/tokenizer/hf_json_sax.h"
#include "model/tokenizer/hf_vocab.h"
#include "model/tokenizer/unicode_util.h"

namespace kvs::tok {

namespace {

using json = nlohmann::json;

struct Ctx {
  const std::string& name;
  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    fail("{}: field '{}': {}", name, field, what);
  }
  const json& obj(const json& j, const std::string& field) const {
    if (!j.is_object()) bad(field, "expected an object");
    return j;
  }
  std::string str(const json& j, const char* key, const std::string& field, const char* dflt = nullptr) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (dflt) return dflt;
      bad(field + "." + key, "missing (expected a string)");
    }
    if (!it->is_string()) bad(field + "." + key, "expected a string");
    return it->get<std::string>();
  }
  bool boolean(const json& j, const char* key, const std::string& field, bool dflt) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return dflt;
    if (!it->is_boolean()) bad(field + "." + key, "expected true or false");
    return it->get<bool>();
  }
  // {"String": s} or {"Regex": r}
  std::pair<std::string, bool> pattern(const json& j, const std::string& field) const {
    auto it = j.find("pattern");
    if (it == j.end() || !it->is_object()) bad(field + ".pattern", "expected {\"String\": ...} or {\"Regex\": ...}");
    if (it->contains("Regex")) return {str(*it, "Regex", field + ".pattern"), true};
    if (it->contains("String")) return {str(*it, "String", field + ".pattern"), false};
    bad(field + ".pattern", "expected {\"String\": ...} or {\"Regex\": ...}");
  }
};

void parse_normalizer(const Ctx& c, const json& j, const std::string& field, std::vector<NormalizerStep>& out) {
  if (j.is_null()) return;
  c.obj(j, field);
  const std::string type = c.str(j, "type", field);
  using K = NormalizerStep::Kind;
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) c.bad(field + ".normalizers", "expected an array");
    for (size_t i = 0; i < it->size(); ++i) parse_normalizer(c, (*it)[i], fmt::format("{}.normalizers[{}]", field, i), out);
  } else if (type == "NFC") {
    out.push_back({K::NFC, "", false, ""});
  } else if (type == "Prepend") {
    out.push_back({K::Prepend, "", false, c.str(j, "prepend", field)});
  } else if (type == "Replace") {
    auto [pat, is_regex] = c.pattern(j, field);
    out.push_back({K::Replace, pat, is_regex, c.str(j, "content", field)});
  } else {
    c.bad(field + ".type", fmt::format("normalizer '{}' is not supported (supported: Sequence, NFC, Prepend, Replace)", type));
  }
}

SplitBehavior parse_behavior(const Ctx& c, const std::string& b, const std::string& field) {
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  c.bad(field, fmt::format("unknown split behavior '{}'", b));
}

void parse_pre(const Ctx& c, const json& j, const std::string& field, std::vector<PreTokenizerStep>& out, bool& byte_level) {
  if (j.is_null()) return;
  c.obj(j, field);
  const std::string type = c.str(j, "type", field);
  using K = PreTokenizerStep::Kind;
  PreTokenizerStep st;
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) c.bad(field + ".pretokenizers", "expected an array");
    for (size_t i = 0; i < it->size(); ++i)
      parse_pre(c, (*it)[i], fmt::format("{}.pretokenizers[{}]", field, i), out, byte_level);
    return;
  } else if (type == "ByteLevel") {
    st.kind = K::ByteLevel;
    st.add_prefix_space = c.boolean(j, "add_prefix_space", field, true);
    st.use_regex = c.boolean(j, "use_regex", field, true);
    byte_level = true;
  } else if (type == "Digits") {
    st.kind = K::Digits;
    st.individual_digits = c.boolean(j, "individual_digits", field, false);
  } else if (type == "Split") {
    st.kind = K::Split;
    std::tie(st.pattern, st.regex) = c.pattern(j, field);
    st.behavior = parse_behavior(c, c.str(j, "behavior", field, "Isolated"), field + ".behavior");
    st.invert = c.boolean(j, "invert", field, false);
  } else if (type == "Metaspace") {
    st.kind = K::Metaspace;
    st.replacement = c.str(j, "replacement", field, "\u2581");
    st.split = c.boolean(j, "split", field, true);
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      const std::string p = c.str(j, "prepend_scheme", field);
      if (p == "always") st.prepend = PreTokenizerStep::Prepend::Always;
      else if (p == "first") st.prepend = PreTokenizerStep::Prepend::First;
      else if (p == "never") st.prepend = PreTokenizerStep::Prepend::Never;
      else c.bad(field + ".prepend_scheme", fmt::format("'{}' (expected always, first or never)", p));
    } else {
      st.prepend = c.boolean(j, "add_prefix_space", field, true) ? PreTokenizerStep::Prepend::Always
                                                                : PreTokenizerStep::Prepend::Never;
    }
  } else if (type == "Whitespace") {  // \w+|[^\w\s]+ kept, the rest removed
    st.kind = K::Split;
    st.pattern = R"(\w+|[^\w\s]+)";
    st.invert = true;
    st.behavior = SplitBehavior::Removed;
  } else if (type == "WhitespaceSplit") {
    st.kind = K::Split;
    st.pattern = R"(\s+)";
    st.behavior = SplitBehavior::Removed;
  } else if (type == "Punctuation") {
    st.kind = K::Split;
    st.pattern = R"(\p{P}|[$+<=>^`|~])";
    st.behavior = parse_behavior(c, c.str(j, "behavior", field, "Isolated"), field + ".behavior");
  } else {
    c.bad(field + ".type", fmt::format("pre-tokenizer '{}' is not supported (supported: Sequence, ByteLevel, Digits, "
                                       "Split, Metaspace, Whitespace, WhitespaceSplit, Punctuation)", type));
  }
  out.push_back(std::move(st));
}

bool mentions_byte_level(const json& j) {
  if (j.is_object()) {
    auto t = j.find("type");
    if (t != j.end() && t->is_string() && *t == "ByteLevel") return true;
    for (const auto& [k, v] : j.items())
      if (mentions_byte_level(v)) return true;
  } else if (j.is_array()) {
    for (const auto& v : j)
      if (mentions_byte_level(v)) return true;
  }
  return false;
}

// TemplateProcessing "single": a SpecialToken first => BOS, last => EOS.
int32_t lookup(const VocabSpec& s, const std::string& text) {
  for (size_t i = s.tokens.size(); i-- > 0;)
    if (s.tokens[i] == text) return static_cast<int32_t>(i);
  return -1;
}

void parse_post_processor(const Ctx& c, const json& j, VocabSpec& s) {
  if (!j.is_object()) return;
  const std::string type = c.str(j, "type", "post_processor", "");
  if (type == "Sequence" && j.contains("processors") && j["processors"].is_array()) {
    for (const auto& p : j["processors"]) parse_post_processor(c, p, s);
    return;
  }
  if (type != "TemplateProcessing") return;
  auto single = j.find("single");
  if (single == j.end() || !single->is_array() || single->empty()) return;
  auto special_id = [&](const json& item) -> int32_t {
    if (!item.is_object() || !item.contains("SpecialToken")) return -1;
    const json& st = item["SpecialToken"];
    const std::string name = c.str(st, "id", "post_processor.single[].SpecialToken");
    if (auto sp = j.find("special_tokens"); sp != j.end() && sp->contains(name)) {
      const json& e = (*sp)[name];
      if (e.contains("ids") && e["ids"].is_array() && !e["ids"].empty() && e["ids"][0].is_number_integer())
        return e["ids"][0].get<int32_t>();
    }
    const int32_t id = lookup(s, name);
    if (id < 0) c.bad("post_processor.special_tokens", fmt::format("special token '{}' is not in the vocabulary", name));
    return id;
  };
  if (int32_t id = special_id(single->front()); id >= 0) {
    s.add_bos = true;
    s.bos = id;
  }
  if (single->size() > 1)
    if (int32_t id = special_id(single->back()); id >= 0) {
      s.add_eos = true;
      s.eos = id;
    }
}

}  // namespace

std::vector<NormalizerStep> normalizer_from_json_text(std::string_view text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail("{}: malformed JSON: {}", name, e.what());
  }
  std::vector<NormalizerStep> out;
  parse_normalizer(Ctx{name}, j, "normalizer", out);
  return out;
}

VocabSpec vocab_from_tokenizer_json(std::string_view json_text, const std::string& name) {
  const Ctx c{name};
  TokenizerJson tj = parse_tokenizer_json(json_text, name);
  const json& root = tj.doc;
  c.obj(root, "(root)");
  auto mit = root.find("model");
  if (mit == root.end()) c.bad("model", "missing");
  const json& model = c.obj(*mit, "model");
  const std::string type = c.str(model, "type", "model", "BPE");
  if (type != "BPE") c.bad("model.type", fmt::format("'{}' is not supported (expected BPE)", type));
  if (!c.str(model, "continuing_subword_prefix", "model", "").empty() || !c.str(model, "end_of_word_suffix", "model", "").empty())
    c.bad("model", "continuing_subword_prefix / end_of_word_suffix are not supported");

  VocabSpec s;
  s.source = name;
  s.explicit_pipeline = true;
  s.add_bos = false;
  s.add_space_prefix = false;
  s.byte_fallback = c.boolean(model, "byte_fallback", "model", false);
  s.fuse_unk = c.boolean(model, "fuse_unk", "model", false);
  s.ignore_merges = c.boolean(model, "ignore_merges", "model", false);

  // Vocabulary: model.vocab plus added_tokens (which may extend it).
  if (!tj.has_vocab) c.bad("model.vocab", "missing (expected an object mapping token -> id)");
  int64_t max_id = -1;
  for (auto& [tok, id] : tj.vocab) {
    if (id < 0 || id > INT32_MAX)
      c.bad("model.vocab", fmt::format("token '{}' has id {} (expected a non-negative integer)", tok, id));
    max_id = std::max<int64_t>(max_id, id);
  }
  std::vector<AddedToken> added;
  if (auto at = root.find("added_tokens"); at != root.end() && !at->is_null()) {
    if (!at->is_array()) c.bad("added_tokens", "expected an array");
    for (size_t i = 0; i < at->size(); ++i) {
      const std::string f = fmt::format("added_tokens[{}]", i);
      const json& e = c.obj((*at)[i], f);
      AddedToken a;
      auto idit = e.find("id");
      if (idit == e.end() || !idit->is_number_integer() || idit->get<int64_t>() < 0 || idit->get<int64_t>() > INT32_MAX)
        c.bad(f + ".id", "expected a non-negative integer");
      a.id = idit->get<int32_t>();
      a.content = c.str(e, "content", f);
      a.special = c.boolean(e, "special", f, false);
      a.lstrip = c.boolean(e, "lstrip", f, false);
      a.rstrip = c.boolean(e, "rstrip", f, false);
      a.single_word = c.boolean(e, "single_word", f, false);
      max_id = std::max<int64_t>(max_id, a.id);
      added.push_back(std::move(a));
    }
  }
  if (max_id < 0) c.bad("model.vocab", "is empty");
  if (max_id >= 2 * static_cast<int64_t>(tj.vocab.size() + added.size()) + 1024)
    c.bad("model.vocab", fmt::format("ids are not dense: id {} for {} tokens", max_id, tj.vocab.size() + added.size()));
  const size_t n = static_cast<size_t>(max_id) + 1;
  s.tokens.assign(n, std::string());
  s.types.assign(n, static_cast<int32_t>(TokenType::Unused));
  for (auto& [tok, id] : tj.vocab) {
    if (s.types[id] != static_cast<int32_t>(TokenType::Unused))
      c.bad("model.vocab", fmt::format("id {} is used by both '{}' and '{}'", id, s.tokens[id], tok));
    s.tokens[id] = std::move(tok);
    s.types[id] = static_cast<int32_t>(TokenType::Normal);
  }
  for (const auto& a : added) {
    s.tokens[a.id] = a.content;
    s.types[a.id] = static_cast<int32_t>(a.special ? TokenType::Control : TokenType::UserDefined);
  }
  s.added_tokens = std::move(added);

  s.merges = std::move(tj.merges);  // ["a b", ...] or [["a", "b"], ...], joined by the parser

  const std::string unk = c.str(model, "unk_token", "model", "");
  if (!unk.empty()) {
    s.unk = lookup(s, unk);
    if (s.unk < 0) c.bad("model.unk_token", fmt::format("'{}' is not in the vocabulary", unk));
    s.types[s.unk] = static_cast<int32_t>(TokenType::Unknown);
  }

  const bool byte_level = mentions_byte_level(root.value("pre_tokenizer", json())) ||
                          mentions_byte_level(root.value("decoder", json()));
  s.kind = byte_level ? TokenizerKind::BPE : TokenizerKind::SPM;
  if (s.kind == TokenizerKind::SPM && s.byte_fallback) {
    for (size_t i = 0; i < n; ++i) {
      const std::string& t = s.tokens[i];
      if (s.types[i] == static_cast<int32_t>(TokenType::Normal) && t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>')
        s.types[i] = static_cast<int32_t>(TokenType::Byte);
    }
  }
  parse_normalizer(c, root.value("normalizer", json()), "normalizer", s.normalizers);
  bool bl = false;
  parse_pre(c, root.value("pre_tokenizer", json()), "pre_tokenizer", s.pre_tokenizers, bl);
  parse_post_processor(c, root.value("post_processor", json()), s);
  return s;
}

}  // namespace kvs::tok
