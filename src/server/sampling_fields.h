// The sampling fields of /v1/completions and /v1/chat/completions (temperature, top_p, top_k,
// min_p, seed, penalties, logit_bias), and the fields other servers define (vLLM, llama.cpp, TGI)
// that evaluation and benchmark clients send: accepted at their neutral value, refused by name
// (400 unsupported_parameter) at any other. docs/server.md, "Sampling fields and what is accepted".
#pragma once
#include <span>
#include <string_view>

#include "server/api_request.h"
#include "server/json_fields.h"

namespace kvs::server {

// The names parse_sampling reads (for JsonFields::allow_only).
std::span<const std::string_view> sampling_field_names();

// Reads them into r.sampler (r.n must be parsed first: best_of is checked against it).
void parse_sampling(const JsonFields& f, const RequestLimits& lim, GenerateRequest& r);

}  // namespace kvs::server
