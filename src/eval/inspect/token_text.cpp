#include "eval/inspect/token_text.h"

#include "model/tokenizer/tokenizer.h"

namespace kvs::inspect {

size_t utf8_complete_prefix(const std::string& s, bool* bad) {
  *bad = false;
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t need;
    if (c < 0x80) need = 1;
    else if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) need = 3;
    else if (c >= 0xF0 && c <= 0xF4) need = 4;
    else {
      *bad = true;
      return i;
    }
    for (size_t k = 1; k < need; ++k) {
      if (i + k >= s.size()) return i;  // incomplete at the end
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) {
        *bad = true;
        return i;
      }
    }
    i += need;
  }
  return i;
}

std::vector<TokenPiece> token_pieces(const Tokenizer& tok, std::span<const int32_t> ids) {
  std::vector<TokenPiece> out(ids.size());
  std::string pending;  // bytes of an unfinished character
  bool first = true;    // at the start or right after BOS (SPM drops the encoder's leading space)
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    const auto& types = tok.spec().types;  // empty = all Normal
    const int32_t type = id >= 0 && static_cast<size_t>(id) < types.size() ? types[static_cast<size_t>(id)] : 0;
    if (type == static_cast<int32_t>(TokenType::Control) || type == static_cast<int32_t>(TokenType::Unknown)) {
      out[i] = {tok.token_bytes(id), true};
      first = id == tok.bos();
      continue;
    }
    pending += tok.token_bytes(id, first);
    first = false;
    std::string text;
    for (;;) {
      bool bad = false;
      const size_t n = utf8_complete_prefix(pending, &bad);
      text.append(pending, 0, n);
      pending.erase(0, n);
      if (bad) {
        text += "\xEF\xBF\xBD";  // U+FFFD for the invalid byte
        pending.erase(0, 1);
        continue;
      }
      break;
    }
    if (pending.size() > 3) {  // cannot complete any more
      text += "\xEF\xBF\xBD";
      pending.clear();
    }
    out[i].text = std::move(text);
  }
  if (!pending.empty() && !out.empty()) out.back().text += "\xEF\xBF\xBD";
  return out;
}

}  // namespace kvs::inspect
