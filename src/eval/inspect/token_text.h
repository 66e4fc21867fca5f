// What each context token shows on the inspect page: its bytes as valid UTF-8 text. A token
// that ends inside a multi-byte character (byte-fallback and byte-level pieces) shows nothing
// and the character appears on the token that completes it, so that concatenating the pieces
// gives the decoded text; bytes that never form a character show as U+FFFD.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvs {
class Tokenizer;
}

namespace kvs::inspect {

struct TokenPiece {
  std::string text;      // valid UTF-8 (may be empty)
  bool special = false;  // a control/unknown token (BOS, <|im_start|>, ...)
};

std::vector<TokenPiece> token_pieces(const Tokenizer& tok, std::span<const int32_t> ids);

// Length of the longest prefix of `s` made of complete, valid UTF-8 sequences — the prefix
// ends before an incomplete trailing sequence; *bad is set when an invalid byte stopped it.
size_t utf8_complete_prefix(const std::string& s, bool* bad);

}  // namespace kvs::inspect
