#include "server/bounded_tokenize.h"

namespace kvs::server {

namespace {

constexpr size_t kPiece = 16 << 10;

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

bool word_end_at(std::string_view t, size_t i) { return i > 0 && i < t.size() && is_space(t[i]) && !is_space(t[i - 1]); }

}  // namespace

size_t piece_end(std::string_view text, size_t from, size_t piece) {
  if (text.size() - from <= piece) return text.size();
  const size_t target = from + piece;
  const size_t hi = std::min(text.size(), from + 2 * piece);
  for (size_t i = target; i < hi; ++i)
    if (word_end_at(text, i)) return i;
  for (size_t i = target; i > from + piece / 2; --i)
    if (word_end_at(text, i)) return i;
  size_t i = target;
  while (i > from + 1 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;  // not inside a character
  return i;
}

BoundedTokens encode_within(const Tokenizer& tok, std::string_view text, bool add_special, bool parse_special,
                            int64_t limit) {
  BoundedTokens out;
  if (text.size() > kPiece) {
    int64_t pieces = 0;
    for (size_t pos = 0; pos < text.size();) {
      const size_t end = piece_end(text, pos, kPiece);
      out.counted += static_cast<int64_t>(tok.encode(text.substr(pos, end - pos), false, parse_special).size());
      ++pieces;
      pos = end;
      // Slack for what cutting can change: a few tokens per cut, plus BOS/EOS.
      if (out.counted > limit + 4 * pieces + 4) {
        out.over = true;
        return out;
      }
    }
  }
  out.tokens = tok.encode(text, add_special, parse_special);
  out.counted = static_cast<int64_t>(out.tokens.size());
  if (out.counted > limit) {
    out.over = true;
    out.tokens.clear();
  }
  return out;
}

}  // namespace kvs::server
