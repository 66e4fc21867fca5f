// Chat prompts with the model's chat template, including conversations that continue from a
// stored context:
//   - a context created from `messages` is the conversation rendered up to the end of its last
//     message's content, that turn left open (open_turn);
//   - a chat request naming the context appends its messages as new turns: continuation() is
//     what the template renders after the open turn (the turn's end, the new turns, the assistant
//     header). Only the roles of the context's messages matter, so a context reloaded from a .kvc
//     file (which keeps the roles, not the text) continues the same way.
#pragma once
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"

namespace kvs::server {

// The conversation with the assistant header appended (generation prompt).
std::string render_chat(const Tokenizer& tok, const std::vector<ChatMessage>& msgs);
// The conversation up to the end of the last message's content. Throws kvs::Error if the
// template loses the content.
std::string open_turn(const Tokenizer& tok, const std::vector<ChatMessage>& msgs);
// What follows open_turn(context) when `more` continues the conversation. Throws kvs::Error if
// the template does not render the continued conversation with the context as its prefix.
std::string continuation(const Tokenizer& tok, const std::vector<std::string>& context_roles,
                         const std::vector<ChatMessage>& more);

}  // namespace kvs::server
