// The completion, chat and context handlers: validate, tokenize, submit a Job, relay its progress
// (one JSON response, or server-sent events), cancel it when the client goes away.
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <random>

#include "core/error.h"
#include "server/bounded_tokenize.h"
#include "server/chat_prompt.h"
#include "server/connection_watch.h"
#include "server/http_server.h"
#include "server/text_stream.h"

namespace kvs::server {

namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);

uint64_t random_u64() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng();
}

// Waits until `done(snapshot)` or the client goes away (then the job is cancelled and the
// snapshot's state set to Cancelled); woken by the job's state changes, and every kPoll to look
// at the connection.
JobSnapshot await(Job& job, const ConnectionWatch& watch, bool (*done)(const JobSnapshot&)) {
  for (;;) {
    JobSnapshot s = job.wait_for_state(done, kPoll);
    if (done(s)) return s;
    if (watch.closed()) {
      job.cancel();
      s.state = JobSnapshot::State::Cancelled;
      return s;
    }
  }
}

bool admitted(const JobSnapshot& s) { return s.state != JobSnapshot::State::Queued; }
bool finished(const JobSnapshot& s) {
  return s.state == JobSnapshot::State::Done || s.state == JobSnapshot::State::Failed ||
         s.state == JobSnapshot::State::Cancelled;
}

nlohmann::json usage_json(const JobUsage& u) {
  nlohmann::json j;
  j["prompt_tokens"] = u.prompt_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
  j["kv_bytes_full"] = u.kv_bytes_full;
  j["kv_bytes_held"] = u.kv_bytes_held;
  j["kv_bytes_peak"] = u.kv_bytes_peak;
  j["kv_keep_ratio"] = u.keep_ratio;
  j["kv_keep_chosen"] = u.keep_chosen ? nlohmann::json(*u.keep_chosen) : nlohmann::json(nullptr);
  j["kv_press"] = u.press;
  j["kv_evictions"] = u.evictions;
  if (u.kv_memory_exhausted) j["kv_memory_exhausted"] = true;
  return j;
}

nlohmann::json timings_json(const JobUsage& u) {
  return {{"queued_ms", u.queued_s * 1e3},
          {"prompt_ms", u.prefill_s * 1e3},
          {"decode_ms", u.decode_s * 1e3},
          {"decode_tokens_per_second", u.completion_tokens > 1 && u.decode_s > 0 ? (u.completion_tokens - 1) / u.decode_s : 0.0}};
}

std::string sse(const nlohmann::json& j) { return "data: " + dump_json(j) + "\n\n"; }

// Everything one streamed response needs between calls of its content provider.
struct Stream {
  std::shared_ptr<Job> job;
  ConnectionWatch watch;
  TextStream text;
  uint64_t seen = 0;
  bool chat = false, include_usage = false, sent_role = false, finished = false;
  std::string id, model;
  int64_t created = 0;

  nlohmann::json chunk(const std::string& delta, const std::string& finish) const {
    nlohmann::json c;
    c["id"] = id;
    c["object"] = chat ? "chat.completion.chunk" : "text_completion";
    c["created"] = created;
    c["model"] = model;
    nlohmann::json choice;
    choice["index"] = 0;
    if (chat) {
      choice["delta"] = finish.empty() ? nlohmann::json{{"content", delta}} : nlohmann::json::object();
    } else {
      choice["text"] = delta;
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish.empty() ? nlohmann::json(nullptr) : nlohmann::json(finish);
    c["choices"] = nlohmann::json::array({choice});
    return c;
  }

  // One call of the content provider: waits a little for progress, writes what is new.
  bool pump(httplib::DataSink& sink) {
    if (finished) {
      sink.done();
      return true;
    }
    const JobSnapshot s = job->wait(seen, kPoll);
    seen = s.version;
    if (s.state == JobSnapshot::State::Cancelled || watch.closed()) {
      job->cancel();
      return false;
    }
    std::string out;
    if (chat && !sent_role) {
      nlohmann::json c = chunk("", "");
      c["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
      out += sse(c);
      sent_role = true;
    }
    if (s.state == JobSnapshot::State::Running || s.state == JobSnapshot::State::Queued) {
      const std::string d = text.update(s.text);
      if (!d.empty()) out += sse(chunk(d, ""));
    } else if (s.state == JobSnapshot::State::Done) {
      const std::string d = text.finish(s.text);
      if (!d.empty()) out += sse(chunk(d, ""));
      nlohmann::json last = chunk("", s.finish_reason);
      last["timings"] = timings_json(s.usage);
      out += sse(last);
      if (include_usage) {
        nlohmann::json u = chunk("", "");
        u["choices"] = nlohmann::json::array();
        u["usage"] = usage_json(s.usage);
        out += sse(u);
      }
      out += "data: [DONE]\n\n";
      finished = true;
    } else if (s.state == JobSnapshot::State::Failed) {
      out += sse(s.error ? s.error->to_json() : bad_request("failed").to_json());
      out += "data: [DONE]\n\n";
      finished = true;
    }
    if (!out.empty() && !sink.write(out.data(), out.size())) {
      job->cancel();
      return false;
    }
    if (finished) sink.done();
    return true;
  }
};

}  // namespace

// Tokenizes a prompt, question or context with the work bounded by the limit (bounded_tokenize.h);
// over the limit: 400 context_length_exceeded.
std::vector<int32_t> HttpServer::tokenize_bounded(std::string_view text, bool add_special, bool parse_special,
                                                  const char* what, const char* param) const {
  const int64_t limit = opt_.limits.max_prompt_tokens;
  BoundedTokens b = encode_within(*model_.tokenizer, text, add_special, parse_special, limit);
  if (b.over)
    throw bad_request(fmt::format("the {} has {}{} tokens, more than this server's limit of {} (--max-prompt-tokens)",
                                  what, b.tokens.empty() && b.counted <= limit ? "more than " : "", b.counted, limit),
                      param, "context_length_exceeded");
  return std::move(b.tokens);
}

void HttpServer::handle_generate(const httplib::Request&, httplib::Response& res, const std::string& raw, bool chat) {
  try {
    const RequestLimits& lim = opt_.limits;
    const nlohmann::json body = parse_body(raw, lim);
    GenerateRequest r = chat ? parse_chat(body, lim) : parse_completion(body, lim);
    const Tokenizer& tok = *model_.tokenizer;
    JobInput in;
    in.kind = JobInput::Kind::Generate;
    std::optional<ContextInfo> ci;
    if (r.context_id) {
      ci = sched_.context_info(*r.context_id);
      if (!ci) throw not_found(fmt::format("no context '{}'", *r.context_id), "context_not_found");
      in.context_id = *r.context_id;
    }
    try {
      if (chat && ci) {
        if (ci->format != "chat")
          throw bad_request(fmt::format("context '{}' was created from text: continue it with /v1/completions, or create "
                                        "it from messages for chat",
                                        ci->id),
                            "context_id", "context_format");
        in.tokens = tokenize_bounded(continuation(tok, ci->roles, r.messages), false, true, "conversation", "messages");
      } else if (chat) {
        in.tokens = tokenize_bounded(render_chat(tok, r.messages), true, true, "conversation", "messages");
      } else if (r.prompt_ids) {
        in.tokens = *r.prompt_ids;
      } else {
        in.tokens = tokenize_bounded(r.prompt, /*add_special=*/!ci, false, "prompt", "prompt");
      }
    } catch (const Error& e) {
      throw bad_request(e.what(), chat ? "messages" : "prompt");
    }
    if (in.tokens.empty())
      throw bad_request(ci ? "the prompt is empty: a question on a context needs at least one token"
                           : "the prompt tokenized to nothing",
                        chat ? "messages" : "prompt");
    if (static_cast<int64_t>(in.tokens.size()) > lim.max_prompt_tokens)
      throw bad_request(fmt::format("the prompt has {} tokens, more than this server's limit of {}", in.tokens.size(),
                                    lim.max_prompt_tokens),
                        chat ? "messages" : "prompt", "context_length_exceeded");
    const int64_t positions = (ci ? ci->n_tokens : 0) + static_cast<int64_t>(in.tokens.size()) + r.max_tokens;
    if (positions > lim.ctx_size)
      throw bad_request(fmt::format("{}{} prompt tokens + {} max_tokens = {} positions, more than this server's context "
                                    "of {} (--ctx-size)",
                                    ci ? fmt::format("{} context tokens + ", ci->n_tokens) : "", in.tokens.size(),
                                    r.max_tokens, positions, lim.ctx_size),
                        "max_tokens", "context_length_exceeded");
    if (r.compression && in.tokens.size() < 2)
      throw bad_request("kv_compression needs a prompt of at least 2 tokens (all but the last are compressed)",
                        "kv_compression");
    in.compression = r.compression ? *r.compression : no_compression();
    in.answer.max_new_tokens = r.max_tokens;
    in.answer.sampler = r.sampler;
    if (!r.seeded) in.answer.sampler.seed = random_u64();
    in.answer.stop = r.stop;
    in.answer.stop_at_eog = !r.ignore_eos;

    auto job = std::make_shared<Job>(std::move(in));
    sched_.submit(job);
    const ConnectionWatch watch;
    const JobSnapshot first = await(*job, watch, admitted);
    if (first.state == JobSnapshot::State::Failed) return send_error(res, *first.error);
    if (first.state == JobSnapshot::State::Cancelled) {
      res.status = 499;
      return;
    }
    const std::string id = fmt::format("{}-{:016x}", chat ? "chatcmpl" : "cmpl", random_u64());
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    if (r.stream) {
      auto st = std::make_shared<Stream>(Stream{job, watch, TextStream(r.stop)});
      st->chat = chat;
      st->include_usage = r.include_usage;
      st->id = id;
      st->model = opt_.model_id;
      st->created = created;
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");
      res.set_chunked_content_provider(
          "text/event-stream", [st](size_t, httplib::DataSink& sink) { return st->pump(sink); },
          [st](bool) {
            if (!st->finished) st->job->cancel();
          });
      return;
    }
    const JobSnapshot s = await(*job, watch, finished);
    if (s.state == JobSnapshot::State::Failed) return send_error(res, *s.error);
    if (s.state == JobSnapshot::State::Cancelled) {
      res.status = 499;
      return;
    }
    nlohmann::json out;
    out["id"] = id;
    out["object"] = chat ? "chat.completion" : "text_completion";
    out["created"] = created;
    out["model"] = opt_.model_id;
    nlohmann::json choice;
    choice["index"] = 0;
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", s.text}};
    } else {
      choice["text"] = s.text;
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = s.finish_reason;
    out["choices"] = nlohmann::json::array({choice});
    out["usage"] = usage_json(s.usage);
    out["timings"] = timings_json(s.usage);
    res.set_content(dump_json(out), "application/json");
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    send_error(res, bad_request(e.what()));
  } catch (const std::exception& e) {
    send_error(res, ApiError(500, fmt::format("internal error: {}", e.what()), "server_error"));
  }
}

void HttpServer::handle_create_context(const httplib::Request&, httplib::Response& res, const std::string& raw) {
  try {
    const RequestLimits& lim = opt_.limits;
    ContextRequest r = parse_context(parse_body(raw, lim), lim);
    const Tokenizer& tok = *model_.tokenizer;
    JobInput in;
    in.kind = JobInput::Kind::CreateContext;
    try {
      if (r.text) {
        in.tokens = tokenize_bounded(*r.text, true, false, "context", "text");
        in.context.format = "text";
      } else if (r.tokens) {
        in.tokens = *r.tokens;
        in.context.format = "text";
      } else {
        in.tokens = tokenize_bounded(open_turn(tok, r.messages), true, true, "context", "messages");
        in.context.format = "chat";
        for (const ChatMessage& m : r.messages) in.context.roles.push_back(m.role);
        continuation(tok, in.context.roles, {{"user", "?"}});  // the template can continue it
      }
    } catch (const Error& e) {
      throw bad_request(e.what(), r.text ? "text" : "messages");
    }
    const char* param = r.text ? "text" : r.tokens ? "tokens" : "messages";
    if (in.tokens.size() < 2) throw bad_request("the context must have at least 2 tokens", param);
    if (static_cast<int64_t>(in.tokens.size()) > lim.max_prompt_tokens)
      throw bad_request(fmt::format("the context has {} tokens, more than this server's limit of {}", in.tokens.size(),
                                    lim.max_prompt_tokens),
                        param, "context_length_exceeded");
    if (static_cast<int64_t>(in.tokens.size()) >= lim.ctx_size)
      throw bad_request(fmt::format("the context has {} tokens, leaving no room in this server's context of {} "
                                    "(--ctx-size)",
                                    in.tokens.size(), lim.ctx_size),
                        param, "context_length_exceeded");
    in.compression = r.compression ? *r.compression : no_compression();
    in.context.compression = in.compression.echo;
    sched_.check_context_store();  // a shared store that is down: 503 now, not after the prefill
    auto job = std::make_shared<Job>(std::move(in));
    sched_.submit(job);
    const ConnectionWatch watch;
    const JobSnapshot s = await(*job, watch, finished);
    if (s.state == JobSnapshot::State::Failed) return send_error(res, *s.error);
    if (s.state == JobSnapshot::State::Cancelled || !s.context) {
      res.status = 499;
      return;
    }
    res.set_content(dump_json(s.context->to_json(opt_.model_id)), "application/json");
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    send_error(res, bad_request(e.what()));
  } catch (const std::exception& e) {
    send_error(res, ApiError(500, fmt::format("internal error: {}", e.what()), "server_error"));
  }
}

// GET /v1/contexts?limit=N&after=ID&order=asc|desc: one page (OpenAI's list shape: first_id,
// last_id, has_more), ordered by creation time; `after` is the last id of the previous page.
void HttpServer::handle_list_contexts(const httplib::Request& req, httplib::Response& res) {
  try {
    for (const auto& [k, v] : req.params)
      if (k != "limit" && k != "after" && k != "order")
        throw bad_request(fmt::format("unknown query parameter '{}' (accepted: limit, after, order)", k.substr(0, 64)),
                          k.substr(0, 64), "unknown_parameter");
    int64_t limit = kContextsPageDefault;
    if (req.has_param("limit")) {
      const std::string v = req.get_param_value("limit");
      char* end = nullptr;
      limit = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || limit < 1 || limit > kContextsPageMax)
        throw bad_request(fmt::format("'limit' must be an integer in [1, {}], got '{}'", kContextsPageMax, v.substr(0, 32)),
                          "limit");
    }
    const std::string order = req.has_param("order") ? req.get_param_value("order") : "desc";
    if (order != "asc" && order != "desc") throw bad_request("'order' must be 'asc' or 'desc'", "order");
    const std::string after = req.has_param("after") ? req.get_param_value("after") : "";
    if (req.has_param("after") && !valid_context_id(after))
      throw bad_request(fmt::format("'after': no context '{}' (deleted?); list again from the start", after.substr(0, 64)),
                        "after", "context_not_found");
    const ContextPage page = sched_.contexts_page(after, static_cast<size_t>(limit), order == "desc");
    if (!page.after_found)
      throw bad_request(fmt::format("'after': no context '{}' (deleted?); list again from the start", after.substr(0, 64)),
                        "after", "context_not_found");
    nlohmann::json data = nlohmann::json::array();
    for (const ContextInfo& i : page.data) data.push_back(i.to_json(opt_.model_id));
    nlohmann::json out = {{"object", "list"}, {"data", data}, {"has_more", page.has_more}};
    out["first_id"] = page.data.empty() ? nlohmann::json(nullptr) : nlohmann::json(page.data.front().id);
    out["last_id"] = page.data.empty() ? nlohmann::json(nullptr) : nlohmann::json(page.data.back().id);
    res.set_content(dump_json(out), "application/json");
  } catch (const ApiError& e) {
    send_error(res, e);
  }
}

void HttpServer::handle_get_context(const httplib::Request& req, httplib::Response& res) {
  try {
    const std::string id = req.matches.size() > 1 ? req.matches[1].str() : "";
    const std::optional<ContextInfo> ci = valid_context_id(id) ? sched_.context_info(id) : std::nullopt;
    if (!ci) return send_error(res, not_found(fmt::format("no context '{}'", id.substr(0, 64)), "context_not_found"));
    res.set_content(dump_json(ci->to_json(opt_.model_id)), "application/json");
  } catch (const ApiError& e) {  // a shared store: 503, 409
    send_error(res, e);
  }
}

void HttpServer::handle_delete_context(const httplib::Request& req, httplib::Response& res) {
  try {
    const std::string id = req.matches.size() > 1 ? req.matches[1].str() : "";
    if (!valid_context_id(id) || !sched_.remove_context(id))
      return send_error(res, not_found(fmt::format("no context '{}'", id.substr(0, 64)), "context_not_found"));
    res.set_content(dump_json({{"id", id}, {"object", "context.deleted"}, {"deleted", true}}), "application/json");
  } catch (const ApiError& e) {  // a shared store: 503, 409
    send_error(res, e);
  }
}

}  // namespace kvs::server
