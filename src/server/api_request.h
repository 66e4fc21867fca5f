// The requests of the HTTP API, parsed and validated from their JSON bodies (OpenAI's
// /v1/completions and /v1/chat/completions with the `kv_compression` and `context_id`
// extensions, and /v1/contexts). Parsing never touches the engine; every refusal is an ApiError
// 400 naming the field.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/tokenizer/tokenizer.h"
#include "runtime/compression_spec.h"
#include "runtime/sampler.h"

namespace kvs::server {

// Limits on what one request may ask for (the server's command-line options).
struct RequestLimits {
  size_t max_body_bytes = size_t{8} << 20;  // HTTP body
  int max_prompt_tokens = 8192;             // tokens of a prompt, a context, or a question
  int max_tokens = 4096;                    // cap on max_tokens
  int default_max_tokens_completion = 16;   // OpenAI's default for /v1/completions
  int default_max_tokens_chat = 256;        // when a chat request gives none
  int ctx_size = 8192;                      // positions a sequence may reach (prompt + answer)
  int max_messages = 1024;
  int max_stop = 64;                        // stop strings
  size_t max_stop_bytes = 256;
  int max_choices = 128;                    // prompts x n in one request
  int max_logprobs = 20;                    // most likely tokens listed per position
  int max_logit_bias = 1024;                // logit_bias entries
  int n_vocab = 0;                          // token ids in prompts must be below this
  // JSON values one body may hold: prompts of token ids (4 of the longest), messages and their fields.
  size_t max_json_values() const { return 4 * static_cast<size_t>(max_prompt_tokens) + 16 * max_messages + 4096; }
};

// `kv_compression`: anything `kvshrink run` accepts (press, keep | budget | quality, sinks,
// window, trigger, seed, options), validated by make_compression_spec.
struct Compression {
  SpecArgs args;
  CompressionSpec spec;
  nlohmann::json echo;  // the object as given back in responses (press, keep, options, ...)
};
Compression parse_compression(const nlohmann::json& j, const std::string& param = "kv_compression");
// The `full` press (no compression), echoed as {"press": "full"}.
Compression no_compression();

// One prompt of /v1/completions: text, or token ids (used as they are: no BOS added).
struct PromptInput {
  std::string text;
  std::optional<std::vector<int32_t>> ids;
};

struct GenerateRequest {
  bool chat = false;  // /v1/chat/completions
  std::string model;
  std::optional<std::string> context_id;
  // /v1/completions: one or more prompts (an array of prompts gives one choice per prompt x n).
  std::vector<PromptInput> prompts;
  // /v1/chat/completions
  std::vector<ChatMessage> messages;
  int n = 1;              // samples per prompt
  bool echo = false;      // /v1/completions: the prompt is given back before the answer
  // -1: no log-probabilities; else the number of most likely tokens listed per position
  // (completions' `logprobs`: N; chat's `logprobs: true` with `top_logprobs`: N).
  int logprobs = -1;
  int max_tokens = 16;    // 0 only with echo (scoring the prompt)
  SamplerParams sampler;
  bool seeded = false;  // a seed was given (else the server draws one)
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::optional<Compression> compression;
};

struct ContextRequest {
  std::string model;
  std::optional<std::string> text;        // a plain-text context
  std::optional<std::vector<int32_t>> tokens;  // or its token ids (used as they are: no BOS added)
  std::vector<ChatMessage> messages;      // or a conversation whose last turn is left open
  std::optional<Compression> compression;
};

GenerateRequest parse_completion(const nlohmann::json& body, const RequestLimits& lim);
GenerateRequest parse_chat(const nlohmann::json& body, const RequestLimits& lim);
ContextRequest parse_context(const nlohmann::json& body, const RequestLimits& lim);

// Parses a body; malformed JSON (or a body that is not an object) is a 400, and so is one nested
// deeper than 64 or holding more values than a request can use (lim.max_json_values()).
nlohmann::json parse_body(const std::string& body, const RequestLimits& lim);

// Context ids: "ctx_" + hex, or what a .kvc file name gives: [A-Za-z0-9_-], 1..64 characters.
bool valid_context_id(const std::string& id);

}  // namespace kvs::server
