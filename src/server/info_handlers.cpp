// The small endpoints: models, presses, tokenization (llama-server's /tokenize and /detokenize
// shape) and the metrics page.
#include <fmt/format.h>
#include <httplib.h>

#include "core/error.h"
#include "press/registry.h"
#include "server/bounded_tokenize.h"
#include "server/http_server.h"
#include "server/json_fields.h"

namespace kvs::server {

namespace {

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + static_cast<size_t>(n) > s.size()) return false;
    for (int k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + static_cast<size_t>(k)]) & 0xC0) != 0x80) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

int32_t token_id(const JsonFields& f, const char* key, const nlohmann::json& t, int n_vocab) {
  if (!t.is_number_integer() && !t.is_number_unsigned())
    f.bad(key, fmt::format("token ids must be integers, got {}", json_type_name(t)));
  const int64_t id = t.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(t.get<uint64_t>(), INT64_MAX))
                                            : t.get<int64_t>();
  if (id < 0 || id >= n_vocab) f.bad(key, fmt::format("token id {} is outside the vocabulary (0..{})", id, n_vocab - 1));
  return static_cast<int32_t>(id);
}

}  // namespace

void HttpServer::handle_models(const httplib::Request& req, httplib::Response& res, bool one) {
  nlohmann::json m;
  m["id"] = opt_.model_id;
  m["object"] = "model";
  m["created"] = started_;
  m["owned_by"] = "kvshrink";
  // weight_bytes: what one decode step reads for the weights (the roofline's fixed part;
  // tests/server/bench/bench.mjs throughput --roofline).
  m["meta"] = {{"n_ctx_train", model_.hp.n_ctx_train}, {"n_vocab", model_.hp.n_vocab}, {"n_layer", model_.hp.n_layer},
               {"ctx_size", opt_.limits.ctx_size}, {"weight_bytes", model_.weight_bytes()}};
  if (one) {
    const std::string id = req.matches.size() > 1 ? req.matches[1].str() : "";
    if (id != opt_.model_id) {
      send_error(res, not_found(fmt::format("no model '{}' (this server serves '{}')", id.substr(0, 200), opt_.model_id),
                                "model_not_found"));
      return;
    }
    res.set_content(dump_json(m), "application/json");
    return;
  }
  res.set_content(dump_json({{"object", "list"}, {"data", nlohmann::json::array({m})}}), "application/json");
}

void HttpServer::handle_presses(const httplib::Request&, httplib::Response& res) {
  nlohmann::json list = nlohmann::json::array();
  for (const PressInfo& p : press_registry()) {
    nlohmann::json opts = nlohmann::json::array();
    for (const ParamSpec& s : p.params)
      opts.push_back({{"name", s.name}, {"default", s.default_value}, {"range", s.range_text()}, {"doc", s.doc}});
    list.push_back({{"name", p.name},
                    {"paper", p.paper},
                    {"description", p.description},
                    {"default_sinks", p.default_sinks},
                    {"default_window", p.default_window},
                    {"default_trigger", p.default_trigger.describe()},
                    {"default_allocator", p.default_allocator},
                    {"options", opts}});
  }
  nlohmann::json allocs = nlohmann::json::array();
  for (const AllocatorInfo& a : allocator_registry()) allocs.push_back({{"name", a.name}, {"description", a.description}});
  res.set_content(dump_json({{"object", "list"}, {"data", list}, {"allocators", allocs}}), "application/json");
}

// POST /tokenize {"content": "text" | ["text", 15043, ...], "add_special": false,
//                 "with_pieces": false, "parse_special": true}
//   -> {"tokens": [ids]} or, with pieces, {"tokens": [{"id": 15043, "piece": " Hello"}, ...]}
// (a piece that is not valid UTF-8 on its own is given as its byte values). Work and size are
// bounded by --max-prompt-tokens (400 context_length_exceeded beyond).
void HttpServer::handle_tokenize(const httplib::Request&, httplib::Response& res, const std::string& raw) {
  try {
    const RequestLimits& lim = opt_.limits;
    const nlohmann::json body = parse_body(raw, lim);
    JsonFields f(body);
    f.allow_only({"content", "add_special", "with_pieces", "parse_special", "model"});
    f.string("model", 256);
    const bool add_special = f.boolean("add_special").value_or(false);
    const bool with_pieces = f.boolean("with_pieces").value_or(false);
    const bool parse_special = f.boolean("parse_special").value_or(true);
    const nlohmann::json* c = f.get("content");
    if (!c) f.bad("content", "is required");
    std::vector<int32_t> ids;
    auto add_text = [&](const std::string& text, bool first) {
      for (int32_t t : tokenize_bounded(text, add_special && first, parse_special, "content", "content")) ids.push_back(t);
    };
    if (c->is_string()) {
      add_text(c->get<std::string>(), true);
    } else if (c->is_array()) {
      // llama-server's mixed content: strings are tokenized, integers are token ids.
      for (size_t i = 0; i < c->size(); ++i) {
        const nlohmann::json& x = (*c)[i];
        if (x.is_string()) {
          add_text(x.get<std::string>(), i == 0);
        } else {
          if (i == 0 && add_special && model_.tokenizer->spec().add_bos && model_.tokenizer->bos() >= 0)
            ids.push_back(model_.tokenizer->bos());
          ids.push_back(token_id(f, "content", x, model_.hp.n_vocab));
        }
        if (static_cast<int64_t>(ids.size()) > lim.max_prompt_tokens)
          throw bad_request(fmt::format("the content has more than {} tokens (--max-prompt-tokens)", lim.max_prompt_tokens),
                            "content", "context_length_exceeded");
      }
    } else {
      f.bad("content", fmt::format("must be a string or an array of strings and token ids, got {}", json_type_name(*c)));
    }
    nlohmann::json tokens = nlohmann::json::array();
    for (int32_t id : ids) {
      if (!with_pieces) {
        tokens.push_back(id);
        continue;
      }
      const std::string piece = model_.tokenizer->token_bytes(id);
      nlohmann::json p;
      if (valid_utf8(piece)) {
        p = piece;
      } else {
        p = nlohmann::json::array();
        for (unsigned char b : piece) p.push_back(static_cast<int>(b));
      }
      tokens.push_back({{"id", id}, {"piece", p}});
    }
    res.set_content(dump_json({{"tokens", tokens}}), "application/json");
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    send_error(res, bad_request(e.what(), "content"));
  }
}

// POST /detokenize {"tokens": [ids]} -> {"content": "text"}: the tokens' text (special tokens as
// their text; SentencePiece's added leading space dropped). Bytes that are not valid UTF-8 (a
// byte token alone, a character cut short) become U+FFFD in the JSON, so it is no exact inverse.
void HttpServer::handle_detokenize(const httplib::Request&, httplib::Response& res, const std::string& raw) {
  try {
    const RequestLimits& lim = opt_.limits;
    const nlohmann::json body = parse_body(raw, lim);
    JsonFields f(body);
    f.allow_only({"tokens", "model"});
    f.string("model", 256);
    const nlohmann::json* t = f.get("tokens");
    if (!t) f.bad("tokens", "is required");
    if (!t->is_array()) f.bad("tokens", fmt::format("must be an array of token ids, got {}", json_type_name(*t)));
    std::vector<int32_t> ids;
    for (const auto& x : *t) ids.push_back(token_id(f, "tokens", x, model_.hp.n_vocab));
    res.set_content(dump_json({{"content", model_.tokenizer->decode(ids)}}), "application/json");
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    send_error(res, bad_request(e.what(), "tokens"));
  }
}

}  // namespace kvs::server
