#include "runtime/chat_parts.h"

#include <vector>

#include "core/error.h"

namespace kvs {

ChatParts split_chat_template(const Tokenizer& tok, const std::string& system) {
  const std::string marker = "\x01KVSHRINK_USER_CONTENT\x01";
  std::vector<ChatMessage> msgs;
  if (!system.empty()) msgs.push_back({"system", system});
  msgs.push_back({"user", marker});
  const std::string full = tok.apply_chat_template(msgs, true);
  const auto p = full.find(marker);
  if (p == std::string::npos) fail("the chat template lost the user content");
  return {full.substr(0, p), full.substr(p + marker.size())};
}

}  // namespace kvs
