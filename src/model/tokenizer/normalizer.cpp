// Normalizer steps (HF tokenizer.json "normalizer", SentencePiece NormalizerSpec options).
#include <utility>

#include "model/tokenizer/text_pipeline.h"

namespace kvs::tok {

namespace {

void replace_literal(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty() || s.find(from) == std::string::npos) return;
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

void replace_regex(std::string& s, const Regex& re, const std::string& to) {
  std::vector<std::pair<size_t, size_t>> m;
  re.find_all(s, m);
  if (m.empty()) return;
  std::string out;
  size_t pos = 0;
  for (auto [b, e] : m) {
    out.append(s, pos, b - pos);
    out += to;
    pos = e;
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// SentencePiece remove_extra_whitespaces: drop leading and trailing spaces, collapse inner runs.
void strip_extra_spaces(std::string& s) {
  std::string out;
  out.reserve(s.size());
  bool pending = false;
  for (char c : s) {
    if (c == ' ') {
      pending = !out.empty();
      continue;
    }
    if (pending) out += ' ';
    pending = false;
    out += c;
  }
  s = std::move(out);
}

}  // namespace

Normalizer::Normalizer(std::vector<NormalizerStep> steps, const std::string& where)
    : steps_(std::move(steps)) {
  for (const auto& st : steps_) {
    if (st.kind == NormalizerStep::Kind::Replace && st.regex)
      regexes_.push_back(std::make_unique<Regex>(st.pattern, where));
    else
      regexes_.push_back(nullptr);
  }
}

Normalizer::~Normalizer() = default;

bool Normalizer::prepends() const {
  for (const auto& st : steps_)
    if (st.kind == NormalizerStep::Kind::Prepend) return true;
  return false;
}

std::string Normalizer::apply(std::string_view fragment) const {
  std::string s(fragment);
  for (size_t i = 0; i < steps_.size(); ++i) {
    const auto& st = steps_[i];
    switch (st.kind) {
      case NormalizerStep::Kind::NFC:
        s = nfc_normalize(s);
        break;
      case NormalizerStep::Kind::Prepend:
        if (!s.empty()) s.insert(0, st.content);
        break;
      case NormalizerStep::Kind::Replace:
        if (regexes_[i])
          replace_regex(s, *regexes_[i], st.content);
        else
          replace_literal(s, st.pattern, st.content);
        break;
      case NormalizerStep::Kind::StripExtraSpaces:
        strip_extra_spaces(s);
        break;
    }
  }
  return s;
}

}  // namespace kvs::tok

namespace kvs {

std::string describe_normalizers(const std::vector<NormalizerStep>& steps) {
  auto show = [](const std::string& s) {
    std::string o;
    for (char c : s) {
      if (c == '\n') o += "\\n";
      else if (c == '\t') o += "\\t";
      else o += c;
    }
    return "'" + o + "'";
  };
  std::string out;
  for (const auto& st : steps) {
    if (!out.empty()) out += ", ";
    switch (st.kind) {
      case NormalizerStep::Kind::NFC: out += "NFC"; break;
      case NormalizerStep::Kind::Prepend: out += "Prepend(" + show(st.content) + ")"; break;
      case NormalizerStep::Kind::Replace:
        out += "Replace(" + std::string(st.regex ? "regex " : "") + show(st.pattern) + " -> " + show(st.content) + ")";
        break;
      case NormalizerStep::Kind::StripExtraSpaces: out += "StripExtraSpaces"; break;
    }
  }
  return out.empty() ? "none" : out;
}

}  // namespace kvs
