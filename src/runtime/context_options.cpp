#include "runtime/context_options.h"

#include <cstdlib>

#include "core/error.h"
#include "press/registry.h"
#include "runtime/chat_parts.h"

namespace kvs {

std::optional<double> PressOptions::keep_ratio() const {
  if (keep.empty() || keep == "auto") return std::nullopt;
  char* end = nullptr;
  const double k = std::strtod(keep.c_str(), &end);
  if (*end || !(k > 0.0 && k <= 1.0)) fail("--keep must be a ratio in (0, 1] or 'auto', got '{}'", keep);
  return k;
}

CompressionSpec PressOptions::spec() const {
  SpecArgs a;
  a.press = press;
  a.options = parse_params(opts);
  a.keep = keep_ratio();
  a.budget = budget;
  if (quality != 0) {
    if (!(quality > 0.0 && quality <= 1.0)) fail("--quality must be in (0, 1], got {}", quality);
    a.quality = quality;
  }
  a.sinks = sinks;
  a.window = window;
  a.trigger = trigger;
  a.seed = seed;
  return make_compression_spec(a);
}

namespace {
// Splits the rendered chat template around a marker so the context can be prefilled (and
// compressed) before the question is known.
std::pair<std::string, std::string> chat_parts(const Tokenizer& tok, const std::string& context) {
  const ChatParts p = split_chat_template(tok);
  return {p.head + context, p.tail};
}
}  // namespace

std::vector<int32_t> PromptOptions::context_tokens(const Tokenizer& tok, const std::string& context) const {
  if (chat) return tok.encode(chat_parts(tok, context).first, true, true);
  return tok.encode(context, true, false);
}

std::vector<int32_t> PromptOptions::question_tokens(const Tokenizer& tok, const std::string& question) const {
  std::string q = !question_template.empty() ? question_template
                  : chat                       ? std::string("\n\n{question}")
                                               : std::string("\n\nQuestion: {question}\nAnswer:");
  const auto p = q.find("{question}");
  if (p == std::string::npos) fail("--question-template must contain {{question}}");
  q.replace(p, 10, question);
  if (chat) q += chat_parts(tok, "").second;
  return tok.encode(q, false, chat);
}

}  // namespace kvs
