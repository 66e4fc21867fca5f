// The model's chat template split around one user turn, so that a context can be prefilled (and
// compressed) before the question that completes the turn is known:
//   head = everything before the user content (system turn included), tail = the end of the user
//   turn + the assistant header (generation prompt).
#pragma once
#include <string>

#include "model/tokenizer/tokenizer.h"

namespace kvs {

struct ChatParts {
  std::string head, tail;
};
// Throws kvs::Error if the template loses the user content.
ChatParts split_chat_template(const Tokenizer& tok, const std::string& system = "");

}  // namespace kvs
