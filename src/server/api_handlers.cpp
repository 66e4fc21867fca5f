// The completion, chat and context handlers: validate, tokenize, submit a Job, relay its progress
// (one JSON response, or server-sent events), cancel it when the client goes away.
#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <random>

#include "core/error.h"
#include "core/rng.h"
#include "server/bounded_tokenize.h"
#include "server/chat_prompt.h"
#include "server/connection_watch.h"
#include "server/http_server.h"
#include "server/logprobs_json.h"
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

// One choice of a response: its job, and what its answer is shown with.
struct Choice {
  std::shared_ptr<Job> job;
  int index = 0;                  // prompt x n + sample
  bool echo_on = false;           // the prompt is echoed first
  std::string echo;               // the prompt's text when echoing
  std::vector<int32_t> prompt;    // the prompt's tokens (echo with logprobs)
  // Streaming state.
  TextStream text;
  uint64_t seen = 0;
  size_t lp_sent = 0;
  bool sent_role = false, echo_sent = false, finished = false;
  std::optional<CompletionLogprobs> legacy;  // offsets run on across chunks
};

// Sums the choices' usage: every prompt counted once, every answer; KV bytes summed, the keep ratio
// their mean.
JobUsage total_usage(const std::vector<JobUsage>& us, int n) {
  JobUsage t = us.front();
  for (size_t i = 1; i < us.size(); ++i) {
    const JobUsage& u = us[i];
    if (i % static_cast<size_t>(n) == 0) {
      t.prompt_tokens += u.prompt_tokens;
      t.cached_tokens += u.cached_tokens;
    }
    t.completion_tokens += u.completion_tokens;
    t.kv_bytes_full += u.kv_bytes_full;
    t.kv_bytes_held += u.kv_bytes_held;
    t.kv_bytes_peak += u.kv_bytes_peak;
    t.keep_ratio += u.keep_ratio;
    t.evictions += u.evictions;
    t.kv_memory_exhausted = t.kv_memory_exhausted || u.kv_memory_exhausted;
  }
  t.keep_ratio /= static_cast<double>(us.size());
  return t;
}

// Everything one streamed response needs between calls of its content provider.
struct Stream {
  std::vector<Choice> choices;
  const Tokenizer* tok = nullptr;
  ConnectionWatch watch;
  bool chat = false, include_usage = false, logprobs = false, finished = false;
  int n = 1;
  std::string id, model;
  int64_t created = 0;
  std::vector<JobUsage> usage;  // per choice (index order), once done

  nlohmann::json chunk(const Choice& c, const std::string& delta, const std::string& finish) const {
    nlohmann::json j;
    j["id"] = id;
    j["object"] = chat ? "chat.completion.chunk" : "text_completion";
    j["created"] = created;
    j["model"] = model;
    nlohmann::json choice;
    choice["index"] = c.index;
    if (chat) {
      choice["delta"] = finish.empty() ? nlohmann::json{{"content", delta}} : nlohmann::json::object();
    } else {
      choice["text"] = delta;
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish.empty() ? nlohmann::json(nullptr) : nlohmann::json(finish);
    j["choices"] = nlohmann::json::array({choice});
    return j;
  }

  void cancel_all() {
    for (Choice& c : choices) c.job->cancel();
  }

  // What is new in one choice, as SSE events; false when its job failed (`out` then holds the error).
  bool pump_choice(Choice& c, std::string& out) {
    const JobSnapshot s = c.job->snapshot();
    if (s.version == c.seen && c.sent_role) return true;
    c.seen = s.version;
    if (chat && !c.sent_role) {
      nlohmann::json j = chunk(c, "", "");
      j["choices"][0]["delta"] = {{"role", "assistant"}, {"content", ""}};
      out += sse(j);
    }
    c.sent_role = true;
    if (s.state == JobSnapshot::State::Failed) {
      out += sse(s.error ? s.error->to_json() : bad_request("failed").to_json());
      return false;
    }
    const bool done = s.state == JobSnapshot::State::Done;
    if (c.echo_on && !c.echo_sent && !c.job->input.score_prompt) {
      out += sse(chunk(c, c.echo, ""));
      c.echo_sent = true;
    }
    if (c.echo_on && !c.echo_sent && c.job->input.score_prompt && s.prompt_scored) {
      nlohmann::json j = chunk(c, c.echo, "");
      CompletionLogprobs lp(*tok);
      lp.add_prompt(c.prompt, c.job->prompt_logprobs());
      j["choices"][0]["logprobs"] = lp.json();
      c.legacy.emplace(*tok, c.echo.size());
      out += sse(j);
      c.echo_sent = true;
    }
    if (c.echo_on && !c.echo_sent) return true;  // the prompt goes first
    const std::string d = done ? c.text.finish(s.text) : c.text.update(s.text);
    std::vector<TokenLogprob> lp;
    if (logprobs && s.n_logprobs > c.lp_sent) {
      lp = c.job->logprobs(c.lp_sent, s.n_logprobs);
      c.lp_sent = s.n_logprobs;
    }
    if (!d.empty() || !lp.empty()) {
      nlohmann::json j = chunk(c, d, "");
      if (logprobs) {
        if (chat) {
          j["choices"][0]["logprobs"] = {{"content", chat_logprob_content(*tok, lp)}, {"refusal", nullptr}};
        } else {
          if (!c.legacy) c.legacy.emplace(*tok, c.echo.size());
          c.legacy->clear();
          c.legacy->add(lp);
          j["choices"][0]["logprobs"] = c.legacy->json();
        }
      }
      out += sse(j);
    }
    if (done) {
      nlohmann::json last = chunk(c, "", s.finish_reason);
      last["timings"] = timings_json(s.usage);
      out += sse(last);
      c.finished = true;
      usage[static_cast<size_t>(&c - choices.data())] = s.usage;
    }
    return true;
  }

  // One call of the content provider: waits a little for progress, writes what is new.
  bool pump(httplib::DataSink& sink) {
    if (finished) {
      sink.done();
      return true;
    }
    if (watch.closed()) {
      cancel_all();
      return false;
    }
    std::string out;
    bool failed = false;
    for (int pass = 0; pass < 2 && out.empty() && !failed; ++pass) {
      for (Choice& c : choices) {
        if (c.finished) continue;
        if (c.job->snapshot().state == JobSnapshot::State::Cancelled) {
          cancel_all();
          return false;
        }
        if (!pump_choice(c, out)) {
          failed = true;
          break;
        }
      }
      if (out.empty() && !failed) {
        // Nothing new: wait for the first unfinished choice to move (or kPoll).
        for (Choice& c : choices) {
          if (c.finished) continue;
          c.job->wait(c.seen, kPoll);
          break;
        }
      }
    }
    const bool all_done = std::all_of(choices.begin(), choices.end(), [](const Choice& c) { return c.finished; });
    if (failed) {
      cancel_all();
      out += "data: [DONE]\n\n";
      finished = true;
    } else if (all_done) {
      if (include_usage) {
        nlohmann::json u = chunk(choices.front(), "", "");
        u["choices"] = nlohmann::json::array();
        u["usage"] = usage_json(total_usage(usage, n));
        out += sse(u);
      }
      out += "data: [DONE]\n\n";
      finished = true;
    }
    if (!out.empty() && !sink.write(out.data(), out.size())) {
      cancel_all();
      return false;
    }
    if (finished) sink.done();
    return true;
  }
};

// choice (prompt p, sample j)'s seed: the request's for sample 0, then the j-th word of SplitMix64(seed).
uint64_t sample_seed(uint64_t seed, int j) {
  SplitMix64 mix(seed);
  uint64_t z = seed;
  for (int i = 0; i < j; ++i) z = mix.next();
  return z;
}

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
  std::vector<Choice> choices;
  auto cancel_all = [&] {
    for (Choice& c : choices) c.job->cancel();
  };
  // A choice that failed or was cancelled ends the request: the others are cancelled and the
  // reply is its error (499 when the client left). False while it is queued, running or done.
  auto ended = [&](const JobSnapshot& s) {
    if (s.state != JobSnapshot::State::Failed && s.state != JobSnapshot::State::Cancelled) return false;
    cancel_all();
    if (s.state == JobSnapshot::State::Failed)
      send_error(res, *s.error);
    else
      res.status = 499;
    return true;
  };
  try {
    const RequestLimits& lim = opt_.limits;
    const nlohmann::json body = parse_body(raw, lim);
    GenerateRequest r = chat ? parse_chat(body, lim) : parse_completion(body, lim);
    const Tokenizer& tok = *model_.tokenizer;
    const char* param = chat ? "messages" : "prompt";
    std::optional<ContextInfo> ci;
    if (r.context_id) {
      ci = sched_.context_info(*r.context_id);
      if (!ci) throw not_found(fmt::format("no context '{}'", *r.context_id), "context_not_found");
    }
    const bool score_prompt = r.echo && r.logprobs >= 0;
    if (score_prompt && ci)
      throw bad_request("echo with logprobs scores the prompt from its first token; on a stored context the first "
                        "question token's prediction was made when the context was created and is not kept: send the "
                        "context and the question as one prompt",
                        "echo");
    // One JobInput per prompt: its tokens, and its text when echoed.
    struct Prompt {
      std::vector<int32_t> tokens;
      std::string echo;
    };
    std::vector<Prompt> prompts;
    const size_t n_prompts = chat ? 1 : r.prompts.size();
    for (size_t pi = 0; pi < n_prompts; ++pi) {
      Prompt pr;
      try {
        if (chat && ci) {
          if (ci->format != "chat")
            throw bad_request(fmt::format("context '{}' was created from text: continue it with /v1/completions, or "
                                          "create it from messages for chat",
                                          ci->id),
                              "context_id", "context_format");
          pr.tokens = tokenize_bounded(continuation(tok, ci->roles, r.messages), false, true, "conversation", param);
        } else if (chat) {
          pr.tokens = tokenize_bounded(render_chat(tok, r.messages), true, true, "conversation", param);
        } else if (r.prompts[pi].ids) {
          pr.tokens = *r.prompts[pi].ids;
          if (r.echo) pr.echo = tok.decode(pr.tokens);
        } else {
          pr.tokens = tokenize_bounded(r.prompts[pi].text, /*add_special=*/!ci, false, "prompt", param);
          if (r.echo) pr.echo = r.prompts[pi].text;
        }
      } catch (const ApiError&) {
        throw;
      } catch (const Error& e) {
        throw bad_request(e.what(), param);
      }
      const std::string which = n_prompts > 1 ? fmt::format("prompt[{}]", pi) : "prompt";
      if (pr.tokens.empty())
        throw bad_request(ci ? "the prompt is empty: a question on a context needs at least one token"
                             : fmt::format("the {} tokenized to nothing", which),
                          param);
      if (static_cast<int64_t>(pr.tokens.size()) > lim.max_prompt_tokens)
        throw bad_request(fmt::format("the {} has {} tokens, more than this server's limit of {}", which,
                                      pr.tokens.size(), lim.max_prompt_tokens),
                          param, "context_length_exceeded");
      const int64_t positions = (ci ? ci->n_tokens : 0) + static_cast<int64_t>(pr.tokens.size()) + r.max_tokens;
      if (positions > lim.ctx_size)
        throw bad_request(fmt::format("{}{}{} prompt tokens + {} max_tokens = {} positions, more than this server's "
                                      "context of {} (--ctx-size)",
                                      n_prompts > 1 ? which + ": " : "",
                                      ci ? fmt::format("{} context tokens + ", ci->n_tokens) : "", pr.tokens.size(),
                                      r.max_tokens, positions, lim.ctx_size),
                          "max_tokens", "context_length_exceeded");
      if (r.compression && pr.tokens.size() < 2)
        throw bad_request("kv_compression needs a prompt of at least 2 tokens (all but the last are compressed)",
                          "kv_compression");
      prompts.push_back(std::move(pr));
    }
    const uint64_t seed = r.seeded ? r.sampler.seed : random_u64();
    for (size_t pi = 0; pi < prompts.size(); ++pi) {
      for (int j = 0; j < r.n; ++j) {
        JobInput in;
        in.kind = JobInput::Kind::Generate;
        if (ci) in.context_id = *r.context_id;
        in.tokens = prompts[pi].tokens;
        in.compression = r.compression ? *r.compression : no_compression();
        in.answer.max_new_tokens = r.max_tokens;
        in.answer.sampler = r.sampler;
        // Unseeded: every choice draws its own; seeded: derived from the seed, the same per sample
        // index whatever the prompt.
        in.answer.sampler.seed = r.seeded ? sample_seed(seed, j) : random_u64();
        in.answer.stop = r.stop;
        in.answer.stop_at_eog = !r.ignore_eos;
        in.answer.logprobs = r.logprobs;
        in.score_prompt = score_prompt;
        Choice c;
        c.index = static_cast<int>(pi) * r.n + j;
        c.echo_on = r.echo;
        c.echo = prompts[pi].echo;
        if (score_prompt) c.prompt = prompts[pi].tokens;
        c.text = TextStream(r.stop);
        c.job = std::make_shared<Job>(std::move(in));
        choices.push_back(std::move(c));
      }
    }
    // All or nothing: a choice the queue cannot take cancels those already queued.
    for (Choice& c : choices) sched_.submit(c.job);
    const ConnectionWatch watch;
    for (Choice& c : choices) {
      if (ended(await(*c.job, watch, admitted))) return;
    }
    const std::string id = fmt::format("{}-{:016x}", chat ? "chatcmpl" : "cmpl", random_u64());
    const int64_t created = static_cast<int64_t>(std::time(nullptr));
    if (r.stream) {
      auto st = std::make_shared<Stream>();
      st->choices = std::move(choices);
      st->usage.resize(st->choices.size());
      st->tok = &tok;
      st->chat = chat;
      st->include_usage = r.include_usage;
      st->logprobs = r.logprobs >= 0;
      st->n = r.n;
      st->id = id;
      st->model = opt_.model_id;
      st->created = created;
      res.set_header("Cache-Control", "no-cache");
      res.set_header("X-Accel-Buffering", "no");
      res.set_chunked_content_provider(
          "text/event-stream", [st](size_t, httplib::DataSink& sink) { return st->pump(sink); },
          [st](bool) {
            if (!st->finished) st->cancel_all();
          });
      return;
    }
    nlohmann::json out;
    out["id"] = id;
    out["object"] = chat ? "chat.completion" : "text_completion";
    out["created"] = created;
    out["model"] = opt_.model_id;
    out["choices"] = nlohmann::json::array();
    std::vector<JobUsage> usage;
    for (Choice& c : choices) {
      const JobSnapshot s = await(*c.job, watch, finished);
      if (ended(s)) return;
      usage.push_back(s.usage);
      nlohmann::json choice;
      choice["index"] = c.index;
      const std::vector<TokenLogprob> lp = r.logprobs >= 0 ? c.job->logprobs(0, s.n_logprobs) : std::vector<TokenLogprob>{};
      if (chat) {
        choice["message"] = {{"role", "assistant"}, {"content", s.text}};
        choice["logprobs"] = r.logprobs >= 0 ? nlohmann::json{{"content", chat_logprob_content(tok, lp)}, {"refusal", nullptr}}
                                             : nlohmann::json(nullptr);
      } else {
        choice["text"] = c.echo + s.text;
        if (r.logprobs >= 0) {
          CompletionLogprobs l(tok);
          if (score_prompt) {
            l.add_prompt(c.prompt, c.job->prompt_logprobs());
            l.set_offset(c.echo.size());
          }
          l.add(lp);
          choice["logprobs"] = l.json();
        } else {
          choice["logprobs"] = nullptr;
        }
      }
      choice["finish_reason"] = s.finish_reason;
      out["choices"].push_back(std::move(choice));
    }
    out["usage"] = usage_json(total_usage(usage, r.n));
    out["timings"] = timings_json(usage.front());
    res.set_content(dump_json(out), "application/json");
  } catch (const ApiError& e) {
    cancel_all();
    send_error(res, e);
  } catch (const Error& e) {
    cancel_all();
    send_error(res, bad_request(e.what()));
  } catch (const std::exception& e) {
    cancel_all();
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
