#include "server/text_stream.h"

#include <algorithm>

namespace kvs::server {

size_t utf8_complete_prefix(std::string_view s) {
  const size_t n = s.size();
  // Walk back over at most 3 continuation bytes to the lead byte of the last character.
  size_t i = n;
  int cont = 0;
  while (i > 0 && cont < 4) {
    const unsigned char c = static_cast<unsigned char>(s[i - 1]);
    if ((c & 0xC0) != 0x80) break;
    --i;
    ++cont;
  }
  if (i == 0) return n;  // only continuation bytes: invalid, send as is
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  int need = 0;
  if (lead < 0x80) need = 0;
  else if ((lead & 0xE0) == 0xC0) need = 1;
  else if ((lead & 0xF0) == 0xE0) need = 2;
  else if ((lead & 0xF8) == 0xF0) need = 3;
  else return n;                           // invalid lead byte: nothing to wait for
  return cont < need ? i - 1 : n;          // the last character is incomplete: hold it back
}

std::string TextStream::update(const std::string& text) {
  size_t end = text.size();
  // Hold back the longest end of the text that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const auto& st : stop_) {
    for (size_t l = std::min(st.size() - (st.empty() ? 0 : 1), text.size()); l > hold; --l) {
      if (text.compare(text.size() - l, l, st, 0, l) == 0) {
        hold = l;
        break;
      }
    }
  }
  end -= hold;
  end = std::min(end, utf8_complete_prefix(std::string_view(text).substr(0, end)));
  if (end <= sent_) return {};
  std::string out = text.substr(sent_, end - sent_);
  sent_ = end;
  return out;
}

std::string TextStream::finish(const std::string& final_text) {
  if (final_text.size() <= sent_) return {};
  std::string out = final_text.substr(sent_);
  sent_ = final_text.size();
  return out;
}

}  // namespace kvs::server
