// VocabSpec from a HF model directory: tokenizer.json (preferred) or tokenizer.model, then
// tokenizer_config.json (special tokens, add_bos/eos, chat template, added_tokens_decoder) and
// config.json (bos/eos ids when nothing else names them).
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "model/tokenizer/hf_vocab.h"

namespace kvs {

namespace tok {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open file", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("{}: read error", path);
  return ss.str();
}

}  // namespace tok

namespace {

using json = nlohmann::json;

json parse_json_file(const std::string& path) {
  try {
    return json::parse(tok::read_file(path));
  } catch (const json::parse_error& e) {
    fail("{}: malformed JSON: {}", path, e.what());
  }
}

int32_t find_token(const VocabSpec& s, const std::string& text) {
  for (size_t i = s.tokens.size(); i-- > 0;)
    if (s.tokens[i] == text) return static_cast<int32_t>(i);
  return -1;
}

// "bos_token": "<s>" | {"content": "<s>", ...} | null -> id (or -2 when absent/null).
int32_t special_from_config(const json& cfg, const char* key, const VocabSpec& s, const std::string& path) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return -2;
  std::string text;
  if (it->is_string()) {
    text = it->get<std::string>();
  } else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    text = (*it)["content"].get<std::string>();
  } else {
    fail("{}: field '{}': expected a string or an object with \"content\"", path, key);
  }
  const int32_t id = find_token(s, text);
  if (id < 0) fail("{}: field '{}': token '{}' is not in the vocabulary", path, key, text);
  return id;
}

void apply_added_tokens_decoder(const json& atd, VocabSpec& s, const std::string& path) {
  if (!atd.is_object()) fail("{}: field 'added_tokens_decoder': expected an object", path);
  if (s.added_tokens.empty()) {  // keep the vocabulary's own control/user-defined tokens
    for (size_t i = 0; i < s.types.size(); ++i) {
      const auto t = static_cast<TokenType>(s.types[i]);
      if (t != TokenType::Control && t != TokenType::Unknown && t != TokenType::UserDefined) continue;
      AddedToken a;
      a.id = static_cast<int32_t>(i);
      a.content = s.tokens[i];
      a.special = t != TokenType::UserDefined;
      s.added_tokens.push_back(std::move(a));
    }
  }
  for (const auto& [key, e] : atd.items()) {
    const std::string field = "added_tokens_decoder." + key;
    int64_t id = -1;
    try {
      size_t used = 0;
      id = std::stoll(key, &used);
      if (used != key.size()) id = -1;
    } catch (const std::exception&) {
    }
    if (id < 0 || id > INT32_MAX) fail("{}: field '{}': key must be a token id", path, field);
    if (id >= static_cast<int64_t>(s.tokens.size() + atd.size()) + 1024)
      fail("{}: field '{}': id {} is far beyond the vocabulary ({} tokens)", path, field, id, s.tokens.size());
    if (!e.is_object() || !e.contains("content") || !e["content"].is_string())
      fail("{}: field '{}': expected an object with \"content\"", path, field);
    AddedToken a;
    a.id = static_cast<int32_t>(id);
    a.content = e["content"].get<std::string>();
    auto flag = [&](const char* k) {
      if (!e.contains(k) || e[k].is_null()) return false;
      if (!e[k].is_boolean()) fail("{}: field '{}.{}': expected true or false", path, field, k);
      return e[k].get<bool>();
    };
    a.special = flag("special");
    a.lstrip = flag("lstrip");
    a.rstrip = flag("rstrip");
    a.single_word = flag("single_word");
    bool known = false;
    for (const auto& b : s.added_tokens) known = known || b.id == a.id;
    if (known) continue;
    if (a.id >= static_cast<int64_t>(s.tokens.size())) {
      s.tokens.resize(a.id + 1);
      if (!s.scores.empty()) s.scores.resize(a.id + 1, 0.0f);
      if (!s.types.empty()) s.types.resize(a.id + 1, static_cast<int32_t>(TokenType::Unused));
    }
    s.tokens[a.id] = a.content;
    if (!s.types.empty()) s.types[a.id] = static_cast<int32_t>(a.special ? TokenType::Control : TokenType::UserDefined);
    s.added_tokens.push_back(std::move(a));
  }
}

}  // namespace

VocabSpec vocab_from_hf_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path d(dir);
  const std::string tj = (d / "tokenizer.json").string(), tm = (d / "tokenizer.model").string();
  VocabSpec s;
  if (fs::exists(tj)) {
    s = tok::vocab_from_tokenizer_json(tok::read_file(tj), tj);
  } else if (fs::exists(tm)) {
    s = tok::vocab_from_sp_model(tok::read_file(tm), tm);
  } else {
    fail("{}: no tokenizer.json or tokenizer.model in this directory", dir);
  }

  const std::string tc = (d / "tokenizer_config.json").string();
  if (fs::exists(tc)) {
    const json cfg = parse_json_file(tc);
    if (!cfg.is_object()) fail("{}: expected a JSON object at the top level", tc);
    if (auto it = cfg.find("added_tokens_decoder"); it != cfg.end() && !it->is_null())
      apply_added_tokens_decoder(*it, s, tc);
    if (int32_t id = special_from_config(cfg, "bos_token", s, tc); id != -2) s.bos = id;
    if (int32_t id = special_from_config(cfg, "eos_token", s, tc); id != -2) s.eos = id;
    if (int32_t id = special_from_config(cfg, "unk_token", s, tc); id != -2) s.unk = id;
    if (int32_t id = special_from_config(cfg, "pad_token", s, tc); id != -2) s.pad = id;
    for (auto [key, dst] : {std::pair{"add_bos_token", &s.add_bos}, std::pair{"add_eos_token", &s.add_eos}}) {
      auto it = cfg.find(key);
      if (it == cfg.end() || it->is_null()) continue;
      if (!it->is_boolean()) fail("{}: field '{}': expected true or false", tc, key);
      *dst = it->get<bool>();
    }
    if (auto it = cfg.find("chat_template"); it != cfg.end() && !it->is_null()) {
      if (it->is_string()) {
        s.chat_template = it->get<std::string>();
      } else if (it->is_array()) {  // [{"name": "default", "template": "..."}, ...]
        for (const auto& e : *it) {
          if (!e.is_object() || !e.contains("template") || !e["template"].is_string())
            fail("{}: field 'chat_template': expected a string or a list of {{name, template}}", tc);
          if (s.chat_template.empty() || e.value("name", "") == "default") s.chat_template = e["template"].get<std::string>();
        }
      } else {
        fail("{}: field 'chat_template': expected a string or a list of {{name, template}}", tc);
      }
    }
  }

  const std::string cj = (d / "config.json").string();
  if ((s.bos < 0 || s.eos < 0) && fs::exists(cj)) {
    const json cfg = parse_json_file(cj);
    auto id_of = [&](const char* key) -> int32_t {
      auto it = cfg.find(key);
      if (it == cfg.end() || it->is_null()) return -1;
      const json& v = it->is_array() && !it->empty() ? (*it)[0] : *it;
      if (!v.is_number_integer()) fail("{}: field '{}': expected an integer token id (or a list of them)", cj, key);
      const int64_t id = v.get<int64_t>();
      if (id == -1) return -1;  // "none", as older configs (and kvshrink before null) write it
      if (id < 0 || id >= static_cast<int64_t>(s.tokens.size()))
        fail("{}: field '{}': id {} is out of range ({} tokens)", cj, key, id, s.tokens.size());
      return static_cast<int32_t>(id);
    };
    if (s.bos < 0) s.bos = id_of("bos_token_id");
    if (s.eos < 0) s.eos = id_of("eos_token_id");
  }

  // End-of-turn token of the chat format, when the vocabulary has one.
  if (s.eot < 0)
    for (const char* t : {"<|eot_id|>", "<|im_end|>", "<end_of_turn>"})
      if (int32_t id = find_token(s, t); id >= 0) {
        s.eot = id;
        break;
      }
  return s;
}

}  // namespace kvs
