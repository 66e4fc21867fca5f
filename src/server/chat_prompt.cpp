#include "server/chat_prompt.h"

#include "core/error.h"

namespace kvs::server {

namespace {
const char* const kMarker = "\x01KVSHRINK_OPEN_TURN\x01";
}

std::string render_chat(const Tokenizer& tok, const std::vector<ChatMessage>& msgs) {
  return tok.apply_chat_template(msgs, true);
}

std::string open_turn(const Tokenizer& tok, const std::vector<ChatMessage>& msgs) {
  if (msgs.empty()) fail("no messages");
  std::vector<ChatMessage> m = msgs;
  m.back().content += kMarker;
  const std::string full = tok.apply_chat_template(m, false);
  const auto p = full.rfind(kMarker);
  if (p == std::string::npos) fail("the model's chat template lost the last message's content");
  return full.substr(0, p);
}

std::string continuation(const Tokenizer& tok, const std::vector<std::string>& context_roles,
                         const std::vector<ChatMessage>& more) {
  std::vector<ChatMessage> ctx;
  for (const auto& r : context_roles) ctx.push_back({r, "x"});
  std::vector<ChatMessage> all = ctx;
  all.insert(all.end(), more.begin(), more.end());
  const std::string head = open_turn(tok, ctx);
  const std::string full = tok.apply_chat_template(all, true);
  if (full.compare(0, head.size(), head) != 0)
    fail("the model's chat template does not continue this context's conversation with these messages");
  return full.substr(head.size());
}

}  // namespace kvs::server
