// Chat templates: the family is detected from the Jinja source as llama.cpp does
// (llm_chat_detect_template) and rendered in C++; no Jinja interpreter.
//
// BOS policy: apply_chat_template never emits the leading BOS, even where the Jinja template starts
// with {{ bos_token }}; encode(prompt, add_special = true, parse_special = true) adds it when the
// vocabulary asks (add_bos). Tokens inside the conversation (<|im_start|>, <|eot_id|>, Llama 2's
// </s><s> between turns) are written as text and must be encoded with parse_special = true.
#include <algorithm>
#include <string>

#include "model/tokenizer/tokenizer.h"

namespace kvs {

namespace {

bool contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

std::string trim(std::string_view s) {
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  size_t b = 0, e = s.size();
  while (b < e && ws(s[b])) ++b;
  while (e > b && ws(s[e - 1])) --e;
  return std::string(s.substr(b, e - b));
}

std::string collapse_spaces(std::string_view s) {
  std::string out;
  for (char c : s) {
    const bool ws = c == ' ' || c == '\t' || c == '\n' || c == '\r';
    if (ws) {
      if (out.empty() || out.back() != ' ') out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

// The decoded contents of every quoted string literal in a Jinja source.
std::vector<std::string> string_literals(std::string_view src) {
  std::vector<std::string> out;
  for (size_t i = 0; i < src.size(); ++i) {
    const char q = src[i];
    if (q != '\'' && q != '"') continue;
    std::string lit;
    size_t j = i + 1;
    for (; j < src.size() && src[j] != q; ++j) {
      if (src[j] == '\\' && j + 1 < src.size()) {
        const char c = src[++j];
        lit += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
      } else {
        lit += src[j];
      }
    }
    if (j >= src.size()) break;
    out.push_back(std::move(lit));
    i = j;
  }
  return out;
}

// ChatML templates that inject a default system turn (SmolLM2, Qwen2.5) carry it as one literal
// "<|im_start|>system\n...<|im_end|>\n"; returns its text, or "" if there is none.
std::string chatml_default_system(std::string_view tmpl) {
  static constexpr std::string_view kHead = "<|im_start|>system\n";
  for (const auto& lit : string_literals(tmpl)) {
    if (lit.compare(0, kHead.size(), kHead) != 0) continue;
    const size_t end = lit.find("<|im_end|>");
    if (end != std::string::npos) return lit.substr(kHead.size(), end - kHead.size());
  }
  return {};
}

bool vocab_has(const VocabSpec& s, std::string_view text) {
  return std::find(s.tokens.begin(), s.tokens.end(), text) != s.tokens.end();
}

std::string token_text(const VocabSpec& s, int32_t id, const char* dflt) {
  return id >= 0 && id < static_cast<int32_t>(s.tokens.size()) ? s.tokens[id] : dflt;
}

std::string render_chatml(const std::vector<ChatMessage>& msgs, bool gen, std::string_view tmpl) {
  std::string out;
  if (!msgs.empty() && msgs[0].role != "system") {
    const std::string sys = chatml_default_system(tmpl);
    if (!sys.empty()) out += "<|im_start|>system\n" + sys + "<|im_end|>\n";
  }
  for (const auto& m : msgs) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
  if (gen) out += "<|im_start|>assistant\n";
  return out;
}

std::string render_llama3(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  for (const auto& m : msgs)
    out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) + "<|eot_id|>";
  if (gen) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  return out;
}

// Llama 2 / Mistral [INST] family. Variants follow the Jinja source:
//   <<SYS>>                 system turn wrapped in <<SYS>>...<</SYS>> inside the first [INST]
//   .strip()                message contents are trimmed
//   bos_token + '[INST]     every later user turn starts with BOS text
//   ' ' + eos_token         assistant replies are written " reply </s>" (official Llama 2)
std::string render_llama2(const std::vector<ChatMessage>& msgs, std::string_view tmpl, const VocabSpec& v) {
  const std::string flat = collapse_spaces(tmpl);
  const bool sys = contains(tmpl, "<<SYS>>");
  const bool strip = contains(tmpl, ".strip()") || contains(tmpl, "| trim") || contains(tmpl, "|trim");
  const bool bos_turns = contains(flat, "bos_token + '[INST]") || contains(flat, "bos_token + \"[INST]");
  const bool spaced = contains(flat, "' ' + eos_token") || contains(flat, "\" \" + eos_token");
  const std::string bos = token_text(v, v.bos, "<s>"), eos = token_text(v, v.eos, "</s>");
  std::string out = "[INST] ";
  bool inside = true;
  for (const auto& m : msgs) {
    const std::string c = strip ? trim(m.content) : m.content;
    if (!inside) {
      inside = true;
      out += bos_turns ? bos + "[INST] " : "[INST] ";
    }
    if (m.role == "system") {
      out += sys ? "<<SYS>>\n" + c + "\n<</SYS>>\n\n" : c + "\n";
    } else if (m.role == "user") {
      out += c + " [/INST]";
    } else {
      out += spaced ? " " + c + " " + eos : c + eos;
      inside = false;
    }
  }
  return out;
}

// Phi-3 (its tokenizer_config.json template; llama.cpp's LLM_CHAT_TEMPLATE_PHI_3):
// "<|system|>\n{sys}<|end|>\n<|user|>\n{msg}<|end|>\n<|assistant|>\n{reply}<|end|>\n" and the generation
// prompt "<|assistant|>\n". <|end|> ends generation (Tokenizer's end-of-generation list).
std::string render_phi3(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out;
  for (const auto& m : msgs) out += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
  if (gen) out += "<|assistant|>\n";
  return out;
}

// Gemma (its tokenizer_config.json template; llama.cpp's LLM_CHAT_TEMPLATE_GEMMA): "<start_of_turn>user\n
// {msg}<end_of_turn>\n<start_of_turn>model\n{reply}<end_of_turn>\n", contents trimmed, the role
// "assistant" written "model"; Gemma has no system turn: a system message is put before the next
// user message, followed by a blank line (as llama.cpp does). <end_of_turn> ends generation.
std::string render_gemma(const std::vector<ChatMessage>& msgs, bool gen) {
  std::string out, sys;
  for (const auto& m : msgs) {
    if (m.role == "system") {
      sys = trim(m.content);
      continue;
    }
    const std::string role = m.role == "assistant" ? "model" : m.role;
    out += "<start_of_turn>" + role + "\n";
    if (!sys.empty() && role != "model") {
      out += sys + "\n\n";
      sys.clear();
    }
    out += trim(m.content) + "<end_of_turn>\n";
  }
  if (gen) out += "<start_of_turn>model\n";
  return out;
}

}  // namespace

ChatFormat Tokenizer::chat_format() const {
  const std::string& t = spec_.chat_template;
  if (t.empty()) {
    if (vocab_has(spec_, "<|im_start|>")) return ChatFormat::ChatML;
    if (vocab_has(spec_, "<|assistant|>") && vocab_has(spec_, "<|end|>")) return ChatFormat::Phi3;
    if (vocab_has(spec_, "<start_of_turn>") && vocab_has(spec_, "<end_of_turn>")) return ChatFormat::Gemma;
    return ChatFormat::None;
  }
  if (contains(t, "<|im_start|>")) return ChatFormat::ChatML;
  if (contains(t, "<|start_header_id|>")) return ChatFormat::Llama3;
  if (contains(t, "[INST]")) return ChatFormat::Llama2;
  if (contains(t, "<|assistant|>") && contains(t, "<|end|>")) return ChatFormat::Phi3;
  if (contains(t, "<start_of_turn>")) return ChatFormat::Gemma;
  return ChatFormat::None;
}

std::string Tokenizer::apply_chat_template(const std::vector<ChatMessage>& msgs, bool add_generation_prompt) const {
  switch (chat_format()) {
    case ChatFormat::ChatML:
      return render_chatml(msgs, add_generation_prompt, spec_.chat_template);
    case ChatFormat::Llama3:
      return render_llama3(msgs, add_generation_prompt);
    case ChatFormat::Llama2:
      return render_llama2(msgs, spec_.chat_template, spec_);
    case ChatFormat::Phi3:
      return render_phi3(msgs, add_generation_prompt);
    case ChatFormat::Gemma:
      return render_gemma(msgs, add_generation_prompt);
    case ChatFormat::None:
      break;
  }
  std::string out;
  for (const auto& m : msgs) out += m.content;
  return out;
}

}  // namespace kvs
