#include "server/context_file.h"

#include <fmt/format.h>

#include <cmath>
#include <ctime>

#include "core/error.h"
#include "core/mapped_file.h"
#include "kvcache/cache_file.h"
#include "kvcache/header_fields.h"
#include "press/params.h"
#include "press/press_state_json.h"
#include "runtime/kvc_meta.h"

namespace kvs::server {

namespace {

constexpr int64_t kMaxPos = int64_t{1} << 30;

// The id, creation time, format, roles and kv_compression echo a server wrote (its "server"
// object), checked; a file `kvshrink compress` wrote has none: a text context made now.
void server_fields(const nlohmann::json& meta, const std::string& path, const std::string& id, const std::string& press,
                   ContextInfo& info) {
  info.id = id;
  info.created = static_cast<int64_t>(std::time(nullptr));
  nlohmann::json echo = {{"press", press}};
  if (meta.contains("server") && meta.at("server").is_object()) {
    const HeaderFields s(meta.at("server"), path + " (server)");
    info.created = s.integer_or("created", 0, int64_t{1} << 40, info.created);
    info.format = s.string_or("format", "text");
    if (info.format != "text" && info.format != "chat") s.bad("format", "must be 'text' or 'chat'");
    for (const std::string& r : s.strings_or("roles")) {
      if (r != "system" && r != "user" && r != "assistant") s.bad("roles", "must hold 'system', 'user' or 'assistant'");
      info.roles.push_back(r);
    }
    if (info.format == "chat" && info.roles.empty()) s.bad("roles", "must not be empty for a chat context");
    s.object_if_present("compression");
    if (meta.at("server").contains("compression") && meta.at("server").at("compression").is_object())
      echo = meta.at("server").at("compression");
  }
  info.compression = echo;
}

void check_fingerprint(const HeaderFields& f, const Model& model, const std::string& path) {
  const std::string want = f.string_or("model_fingerprint", "");
  const std::string have = fingerprint_hex(model);
  if (want != have)
    fail("{}: made with model '{}' (fingerprint {}), not this server's '{}' ({})", path, f.string_or("model_name", "?"),
         want.empty() ? "missing" : want, model.name, have);
}

}  // namespace

ContextInfo KvcContextCodec::describe(const std::string& path, const std::string& id) {
  const MappedFile file(path);
  const KvLayout& l = engine_.kv_layout();
  CacheHeaderLayout h;
  size_t pages = 0;
  const nlohmann::json meta = walk_cache_file(
      file.data(), file.size(), path,
      [&](const CacheHeaderLayout& hl) {
        h = hl;
        if (h.n_layer != l.n_layer || h.n_head_kv != l.n_head_kv || h.head_dim != l.head_dim)
          fail("{}: cache shape {} layers x {} KV heads x {} dims does not match the model's {} x {} x {}", path, h.n_layer,
               h.n_head_kv, h.head_dim, l.n_layer, l.n_head_kv, l.head_dim);
      },
      [&](const CacheFileHead& head) { pages += (head.pos.size() + l.page_tokens - 1) / l.page_tokens; });
  const HeaderFields f(meta, path);
  check_fingerprint(f, model_, path);
  ContextInfo info;
  server_fields(meta, path, id, f.string_or("press", "full"), info);
  const int64_t all_slots = int64_t{h.n_layer} * h.n_head_kv * h.n_past;
  const auto full_slots = f.integer_or("full_slots", static_cast<int64_t>(h.slots), all_slots, static_cast<int64_t>(h.slots));
  const size_t full_bytes = static_cast<size_t>(f.integer_or("full_bytes", 0, int64_t{1} << 50, 0));
  info.n_tokens = static_cast<int32_t>(f.integer_or("context_tokens", 0, h.n_past, h.n_past));
  info.kv_bytes_full = full_bytes && h.dtype == l.dtype ? full_bytes : full_context_bytes(l, info.n_tokens);
  info.kv_bytes_held = pages * l.page_bytes();
  info.keep_measured = full_slots ? static_cast<double>(h.slots) / static_cast<double>(full_slots) : 1.0;
  info.keep_chosen = f.number_or_null("keep_chosen", 0.0, 1.0);
  info.persisted = true;
  info.resident = false;
  return info;
}

nlohmann::json KvcContextCodec::header(const ServedContext& c) const {
  const BuiltContext& b = *c.built;
  const SpecArgs& a = c.args;
  nlohmann::json j;
  add_model_identity(j, model_);
  j["press"] = a.press;
  std::vector<std::string> opts;
  for (const auto& [k, v] : a.options) opts.push_back(k + "=" + v);
  j["press_options"] = opts;
  j["keep"] = a.keep ? nlohmann::json(*a.keep) : nlohmann::json(nullptr);
  if (a.quality) j["quality"] = *a.quality;
  j["keep_measured"] = b.keep_measured();
  j["keep_chosen"] = b.keep_chosen() ? nlohmann::json(*b.keep_chosen()) : nlohmann::json(nullptr);
  j["press_state"] = press_state_to_json(b.seq.state);
  j["budget"] = a.budget;
  j["sinks"] = a.sinks;
  j["window"] = a.window;
  j["trigger"] = a.trigger;
  j["seed"] = a.seed;
  j["chat"] = false;
  j["question_template"] = "";
  j["context_tokens"] = b.n_tokens;
  // The context's token ids, so that `kvshrink inspect` shows the server's contexts as it shows the
  // CLI's (null for a context whose ids are not known).
  j["context_ids"] = !b.tokens.empty() && b.tokens.size() == static_cast<size_t>(b.n_tokens) ? nlohmann::json(b.tokens)
                                                                                            : nlohmann::json(nullptr);
  j["full_bytes"] = b.full_bytes;
  j["full_slots"] = b.full_slots;
  nlohmann::json s;
  s["id"] = c.info.id;
  s["created"] = c.info.created;
  s["format"] = c.info.format;
  s["roles"] = c.info.roles;
  s["compression"] = c.info.compression;
  j["server"] = s;
  return j;
}

void KvcContextCodec::save(const ServedContext& c, const std::string& path) {
  save_cache(path, *c.built->seq.cache, header(c));
}

std::vector<uint8_t> KvcContextCodec::encode(const ServedContext& c) const {
  return encode_cache(*c.built->seq.cache, header(c));
}

size_t KvcContextCodec::load_bytes_bound(const std::string& path) {
  const CacheHeaderLayout h = check_cache_header(read_cache_header(path), path);
  const KvLayout& l = engine_.kv_layout();
  // Every head holds at most ceil(len / page_tokens) <= len / page_tokens + 1 pages.
  const uint64_t heads = static_cast<uint64_t>(h.n_layer) * static_cast<uint64_t>(h.n_head_kv);
  return static_cast<size_t>((h.slots / static_cast<uint64_t>(l.page_tokens) + heads + 1) * l.page_bytes());
}

size_t KvcContextCodec::kv_room() const {
  const PagePool& p = engine_.page_pool();
  if (p.max_bytes() == 0) return SIZE_MAX;
  return p.max_bytes() > p.bytes_in_use() ? p.max_bytes() - p.bytes_in_use() : 0;
}

std::shared_ptr<ServedContext> KvcContextCodec::load(const std::string& path, const std::string& id) {
  const MappedFile f(path);
  return decode(f.data(), f.size(), path, id);
}

std::shared_ptr<ServedContext> KvcContextCodec::decode(const uint8_t* data, size_t n, const std::string& path,
                                                       const std::string& id) {
  const nlohmann::json meta = parse_cache_header(data, n, path);
  const CacheHeaderLayout h = check_cache_header(meta, path);
  const HeaderFields f(meta, path);
  check_fingerprint(f, model_, path);
  auto c = std::make_shared<ServedContext>();
  SpecArgs& a = c->args;
  a.press = f.string_or("press", "full");
  a.options = parse_params(f.strings_or("press_options"));
  a.keep = f.number_or_null("keep", 0.0, 1.0);
  if (a.keep && *a.keep <= 0.0) f.bad("keep", "must be in (0, 1]");
  if (f.has("quality")) a.quality = f.number_or("quality", 0.0, 1.0, true, 1.0);
  a.budget = static_cast<int32_t>(f.integer_or("budget", 0, kMaxPos, 0));
  a.sinks = static_cast<int>(f.integer_or("sinks", -1, kMaxPos, -1));
  a.window = static_cast<int>(f.integer_or("window", -1, kMaxPos, -1));
  a.trigger = f.string_or("trigger", "");
  a.seed = f.uint64_or("seed", 0);
  CompressionSpec spec;
  try {
    spec = make_compression_spec(a);
  } catch (const Error& e) {
    fail("{}: header fields 'press', 'press_options', 'keep' or 'trigger': {}", path, e.what());
  }
  const int64_t all_slots = int64_t{h.n_layer} * h.n_head_kv * h.n_past;
  const size_t full_slots = static_cast<size_t>(f.integer_or("full_slots", static_cast<int64_t>(h.slots), all_slots,
                                                             static_cast<int64_t>(h.slots)));
  const size_t full_bytes = static_cast<size_t>(f.integer_or("full_bytes", 0, int64_t{1} << 50, 0));
  const int32_t n_tokens = static_cast<int32_t>(f.integer_or("context_tokens", 0, h.n_past, h.n_past));
  check_context_ids(meta, n_tokens, path);
  const std::optional<double> chosen = f.number_or_null("keep_chosen", 0.0, 1.0);
  PressState state = press_state_from_meta(meta, path);

  ContextInfo& info = c->info;
  server_fields(meta, path, id, a.press, info);

  LoadedCache lc = load_cache(data, n, path, engine_.page_pool(), engine_.kv_layout());
  auto b = std::make_shared<BuiltContext>();
  b->spec = spec;
  b->seq.cache = std::move(lc.cache);
  b->seq.stats = engine_.new_stats(spec.press.needs().stats);
  b->seq.state = std::move(state);
  b->n_tokens = n_tokens;
  if (meta.contains("context_ids") && meta.at("context_ids").is_array()) {  // checked above; kept for a re-save
    b->tokens = meta.at("context_ids").get<std::vector<int32_t>>();
    for (const int32_t t : b->tokens)
      if (t >= model_.hp.n_vocab)
        fail("{}: header field 'context_ids' holds {}, outside the model's vocabulary of {}", path, t, model_.hp.n_vocab);
  }
  b->full_slots = full_slots;
  // The header's full size is in the file's KV type; loaded into another type (a q4_0 file into an
  // f16 server) the rows were converted, and the full size is this server's.
  const bool converted = h.dtype != engine_.kv_layout().dtype;
  b->full_bytes = full_bytes && !converted ? full_bytes : full_context_bytes(b->seq.cache->layout(), n_tokens);
  b->result.slots_before = full_slots;
  b->result.slots_after = b->seq.cache->total_slots();
  b->kept_slots = b->result.slots_after;
  b->result.bytes_before = b->full_bytes;
  b->result.bytes_after = b->seq.cache->bytes_held();
  b->result.keep_chosen = chosen;
  info.n_tokens = n_tokens;
  info.kv_bytes_full = b->full_bytes;
  info.kv_bytes_held = b->seq.cache->bytes_held();
  info.keep_measured = b->keep_measured();
  info.keep_chosen = chosen;
  c->built = std::move(b);
  return c;
}

}  // namespace kvs::server
