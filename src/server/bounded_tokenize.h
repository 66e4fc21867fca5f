// Tokenization whose work is bounded by the token limit, not by the size of the text: a prompt of
// megabytes that could never fit is refused after tokenizing about `limit` tokens of it, not
// after tokenizing all of it (the body limit allows 8 MiB of text: seconds of CPU and hundreds of
// MB for a certain refusal otherwise).
//
// A text longer than one piece (16 KiB) is first counted piece by piece, each piece cut just
// before a space or newline that ends a word (a pre-tokenizer boundary of every tokenizer here,
// so the count of a piece is its share of the whole text's, give or take the word-boundary
// effects at the cut, bounded by a few tokens per cut); once the count passes the limit plus that
// slack, the text is refused. Otherwise (the text has about `limit` tokens at most) it is
// tokenized whole, exactly as Tokenizer::encode does, and the exact count is checked.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace kvs::server {

struct BoundedTokens {
  std::vector<int32_t> tokens;  // the whole text's tokens when within the limit
  bool over = false;            // the text has more than `limit` tokens
  int64_t counted = 0;          // tokens counted (a lower estimate of the total when over)
};

BoundedTokens encode_within(const Tokenizer& tok, std::string_view text, bool add_special, bool parse_special,
                            int64_t limit);

// Where encode_within cuts `text` after `from` (exposed for tests): just before a space or newline
// that follows a non-space, in [from + piece, from + 2 piece); else backwards down to from + piece/2;
// else at a UTF-8 character boundary near from + piece. Returns text.size() when the rest fits.
size_t piece_end(std::string_view text, size_t from, size_t piece);

}  // namespace kvs::server
