#include "server/redis_context_store.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "runtime/kvc_meta.h"
#include "server/api_error.h"
#include "server/api_request.h"
#include "server/store_budget.h"

namespace kvs::server {

namespace {

constexpr auto kCheckEvery = std::chrono::seconds(1);  // the watcher: contexts held here still in Redis? TTLs refreshed

nlohmann::json info_to_json(const ContextInfo& i) {
  return {{"id", i.id},
          {"created", i.created},
          {"seq", i.seq},
          {"format", i.format},
          {"roles", i.roles},
          {"n_tokens", i.n_tokens},
          {"kv_bytes_full", i.kv_bytes_full},
          {"kv_bytes_held", i.kv_bytes_held},
          {"keep_measured", i.keep_measured},
          {"keep_chosen", i.keep_chosen ? nlohmann::json(*i.keep_chosen) : nlohmann::json(nullptr)},
          {"compression", i.compression}};
}

// Another replica wrote it; a malformed value is refused (kvs::Error), never trusted.
ContextInfo info_from_json(const std::string& text, const std::string& id) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) fail("its info is not a JSON object");
  ContextInfo i;
  auto num = [&](const char* k) {
    if (!j.contains(k) || !j.at(k).is_number()) fail("its info has no number '{}'", k);
    return j.at(k);
  };
  // An integer field in [lo, hi]: a float, a negative or a huge value is refused, never converted
  // (1e300 to int32 is undefined behaviour).
  auto integer = [&](const char* k, int64_t lo, int64_t hi) -> int64_t {
    const nlohmann::json& v = num(k);
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(u) >= lo) return static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      const int64_t n = v.get<int64_t>();
      if (n >= lo && n <= hi) return n;
    }
    fail("its info's '{}' is {} (expected an integer in [{}, {}])", k, v.dump().substr(0, 32), lo, hi);
  };
  auto fraction = [&](const nlohmann::json& v, const char* k) {
    const double d = v.get<double>();
    if (!(d >= 0.0 && d <= 1.0)) fail("its info's '{}' is {} (expected a number in [0, 1])", k, v.dump().substr(0, 32));
    return d;
  };
  constexpr int64_t kMaxBytes = int64_t{1} << 50, kMaxTokens = int64_t{1} << 30;
  i.id = id;
  i.created = integer("created", 0, int64_t{1} << 40);
  i.seq = static_cast<uint64_t>(integer("seq", 0, int64_t{1} << 62));
  i.n_tokens = static_cast<int32_t>(integer("n_tokens", 0, kMaxTokens));
  i.kv_bytes_full = static_cast<size_t>(integer("kv_bytes_full", 0, kMaxBytes));
  i.kv_bytes_held = static_cast<size_t>(integer("kv_bytes_held", 0, kMaxBytes));
  i.keep_measured = fraction(num("keep_measured"), "keep_measured");
  if (j.contains("keep_chosen") && j.at("keep_chosen").is_number()) i.keep_chosen = fraction(j.at("keep_chosen"), "keep_chosen");
  if (!j.contains("format") || !j.at("format").is_string()) fail("its info has no string 'format'");
  i.format = j.at("format").get<std::string>();
  if (j.contains("roles") && j.at("roles").is_array())
    for (const auto& r : j.at("roles"))
      if (r.is_string()) i.roles.push_back(r.get<std::string>());
  i.compression = j.value("compression", nlohmann::json::object());
  i.persisted = true;
  return i;
}

ApiError context_store_error(int status, std::string message) {
  return ApiError(status, std::move(message), "server_error", "", status == 503 ? "context_store_unavailable" : "");
}

}  // namespace

RedisContextStore::RedisContextStore(const RedisStoreOptions& opt, ContextCodec& codec, const Model& model)
    : client_(std::make_unique<RedisClient>(parse_redis_url(opt.url), opt.client)), codec_(codec), prefix_(opt.prefix),
      model_name_(model.name), fingerprint_(fingerprint_hex(model)) {
  if (prefix_.size() > 128 || prefix_.find_first_of(" \t\r\n") != std::string::npos)
    fail("--contexts-prefix '{}': at most 128 characters, no spaces", prefix_.substr(0, 140));
  watcher_ = std::thread([this] { watch(); });
}

RedisContextStore::~RedisContextStore() {
  {
    std::lock_guard<std::mutex> l(resident_mu_);
    stop_ = true;
  }
  watch_cv_.notify_all();
  watcher_.join();
}

void RedisContextStore::watch() {
  std::unique_lock<std::mutex> l(resident_mu_);
  for (;;) {
    watch_cv_.wait_for(l, kCheckEvery, [this] { return stop_; });
    if (stop_) return;
    if (known_ids_.empty() || client_->failing_fast()) continue;
    const std::vector<std::string> ids(known_ids_.begin(), known_ids_.end());
    std::set<std::string> touched;
    touched.swap(touched_);
    l.unlock();
    std::vector<std::string> keys;
    for (const std::string& id : ids) keys.push_back(key_of(id));
    const std::string ttl = std::to_string(ttl_s_);
    std::vector<RedisClient::Command> cmds;
    for (size_t i = 0; i < ids.size(); ++i) {
      // Refreshing the expiry of a context used here also answers whether it still exists.
      if (ttl_s_ > 0 && touched.count(ids[i])) {
        cmds.push_back({"EXPIRE", keys[i], ttl});
      } else {
        cmds.push_back({"EXISTS", keys[i]});
      }
    }
    std::vector<std::string> gone;
    bool ok = true;
    try {
      const std::vector<RedisReply> r = client_->pipeline(cmds);
      for (size_t i = 0; i < ids.size(); ++i)
        if (r[i].type == RedisReply::Type::Integer && r[i].integer == 0) gone.push_back(ids[i]);
    } catch (const RedisError&) {
      ok = false;  // unreachable: what is resident still answers; try again later
    }
    l.lock();
    gone_.insert(gone_.end(), gone.begin(), gone.end());
    if (!ok) touched_.insert(touched.begin(), touched.end());
  }
}

std::string RedisContextStore::describe() const { return fmt::format("Redis {} (keys {}*)", client_->endpoint(), prefix_); }

void RedisContextStore::unavailable(const std::string& what, const std::exception& e) const {
  throw context_store_error(503, fmt::format("{}: the shared context store is unavailable: {}", what, e.what()));
}

void RedisContextStore::other_model(const std::string& id, const std::string& model, const std::string& fingerprint) const {
  throw ApiError(409,
                 fmt::format("context '{}' was made with model '{}' (fingerprint {}), and this replica serves '{}' ({}); "
                             "ask a replica serving that model",
                             id, model, fingerprint, model_name_, fingerprint_),
                 "invalid_request_error", "context_id", "context_model_mismatch");
}

void RedisContextStore::set_policy(const StorePolicy& p) {
  ttl_s_ = p.ttl_s;
  max_contexts_ = p.max_contexts;
  StorePolicy memory = p;
  memory.ttl_s = 0;  // expiry is Redis's (EXPIRE): a context unused here may be in use elsewhere
  memory.max_contexts = 0;  // counted in Redis (put): the copies here are a cache of it
  // The disk budget of a Redis store is the Redis server's memory (used_memory, checked at every
  // put); by default a quarter of this machine's memory, lowered to 90% of Redis's maxmemory at
  // start (restore) so that the oldest contexts go before Redis refuses writes.
  if (memory.disk_bytes == 0) memory.disk_bytes = machine_memory_bytes() / 4;
  MemoryContextStore::set_policy(memory);
}

StorePolicy RedisContextStore::policy() const {
  StorePolicy p = MemoryContextStore::policy();  // resident_bytes, disk_bytes (Redis's memory)
  p.ttl_s = ttl_s_;
  p.max_contexts = max_contexts_;
  return p;
}

StoreStats RedisContextStore::stats() const {
  StoreStats s = MemoryContextStore::stats();
  s.budget = policy();
  s.deleted_count += deleted_count_;
  return s;
}

void RedisContextStore::publish_resident() {
  std::set<std::string> resident, known;
  for (const auto& [id, e] : entries_) {
    known.insert(id);
    if (e.ctx) resident.insert(id);
  }
  std::lock_guard<std::mutex> l(resident_mu_);
  resident_ids_.swap(resident);
  known_ids_.swap(known);
}

void RedisContextStore::check_writable() const {
  try {
    client_->command({"PING"});
  } catch (const RedisError& e) {
    unavailable("cannot create a context", e);
  }
}

std::vector<std::string> RedisContextStore::restore() {
  try {
    client_->command({"PING"});
  } catch (const RedisError& e) {
    return {fmt::format("{} (contexts cannot be created or loaded until it answers; completions work)", e.what())};
  }
  try {
    // CONFIG may be disabled (managed Redis): the budget stays as it is then.
    const std::vector<RedisReply> r = client_->command({"CONFIG", "GET", "maxmemory"}).elements;
    const long long maxmemory = r.size() == 2 ? std::atoll(r[1].str.c_str()) : 0;
    const size_t ceiling = static_cast<size_t>(static_cast<double>(maxmemory) * 0.9);
    if (maxmemory > 0 && (policy_.disk_bytes == 0 || policy_.disk_bytes > ceiling)) policy_.disk_bytes = ceiling;
  } catch (const RedisError&) {
  }
  return {};
}

size_t RedisContextStore::delete_contexts(const std::vector<RedisReply>& ids_in_order, const std::string& keep,
                                          uint64_t& counter) {
  // A command holds views of its words: the keys must outlive the pipeline call.
  const std::string ids = prefix_ + "ids";
  std::vector<std::string> keys;
  keys.reserve(ids_in_order.size());
  for (const RedisReply& o : ids_in_order) keys.push_back(key_of(o.str));
  std::vector<RedisClient::Command> del;
  for (size_t i = 0; i < ids_in_order.size(); ++i) {
    const RedisReply& o = ids_in_order[i];
    if (o.str == keep) continue;
    del.push_back({"MULTI"});
    del.push_back({"DEL", keys[i]});
    del.push_back({"ZREM", ids, o.str});
    del.push_back({"EXEC"});
    entries_.erase(o.str);
    ++counter;
  }
  if (!del.empty()) client_->pipeline(del);
  return del.size() / 4;
}

void RedisContextStore::put(std::shared_ptr<ServedContext> c) {
  const std::string id = c->info.id;
  if (entries_.count(id)) fail("context '{}' exists already", id);
  const std::vector<uint8_t> bytes = codec_.encode(*c);
  const std::string key = key_of(id), ids = prefix_ + "ids";
  try {
    c->info.seq = static_cast<uint64_t>(client_->command({"INCR", prefix_ + "seq"}).integer);  // the order of creation
  } catch (const RedisError& e) {
    unavailable(fmt::format("context '{}' could not be stored", id), e);
  }
  const std::string info = info_to_json(c->info).dump();
  const std::string seq = std::to_string(c->info.seq), ttl = std::to_string(ttl_s_);
  const std::string_view kvc(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  std::vector<RedisClient::Command> tx = {
      {"MULTI"},
      {"HSET", key, "kvc", kvc, "info", info, "model", model_name_, "fingerprint", fingerprint_},
      {"ZADD", ids, seq, id},
  };
  if (ttl_s_ > 0) tx.push_back({"EXPIRE", key, ttl});
  tx.push_back({"EXEC"});
  std::vector<RedisReply> r;
  try {
    r = client_->pipeline(tx);
  } catch (const RedisError& e) {
    unavailable(fmt::format("context '{}' could not be stored", id), e);
  }
  // Every queued command answers QUEUED; EXEC answers their replies, or an error / nil when the
  // transaction was refused (out of memory under maxmemory, read-only replica, ...).
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i].type == RedisReply::Type::Error)
      throw context_store_error(503, fmt::format("context '{}' could not be stored: Redis at {} refused it: {}", id,
                                                 client_->endpoint(), r[i].str));
  }
  if (r.back().type != RedisReply::Type::Array)
    throw context_store_error(503, fmt::format("context '{}' could not be stored: Redis at {} aborted the transaction", id,
                                               client_->endpoint()));
  c->info.persisted = true;
  MemoryContextStore::put(std::move(c));
  entries_[id].file_bytes = bytes.size();
  // The disk budget (Redis's used_memory): the oldest contexts under the prefix go, a batch sized
  // by the excess at a time, never the new one.
  [&] {
    if (policy_.disk_bytes == 0) return;
    auto used = [&]() -> size_t {
      const std::string info = client_->command({"INFO", "memory"}).str;
      const size_t p = info.find("used_memory:");
      return p == std::string::npos ? 0 : static_cast<size_t>(std::atoll(info.c_str() + p + 12));
    };
    try {
      for (int round = 0; round < 16; ++round) {
        const size_t u = used();
        if (u <= policy_.disk_bytes) return;
        const size_t per = std::max<size_t>(entries_.count(id) ? entries_.at(id).file_bytes : 0, 4096);
        const size_t n = std::min<size_t>((u - policy_.disk_bytes) / per + 1, 256);
        const std::vector<RedisReply> old = client_->command({"ZRANGE", ids, "0", std::to_string(n - 1)}).elements;
        if (delete_contexts(old, id, counters_.deleted_disk) == 0) return;  // only the new context is left: it stays
      }
    } catch (const RedisError&) {
      // unreachable now: the next put tries again
    }
  }();
  if (max_contexts_ > 0) {
    // The count budget, shared by the replicas: the oldest contexts under the prefix go (not this
    // one: it has the highest score). A failure here leaves the new context stored; the next put
    // tries again.
    try {
      const long long n = client_->command({"ZCARD", ids}).integer;
      if (n > static_cast<long long>(max_contexts_)) {
        const std::string last = std::to_string(n - static_cast<long long>(max_contexts_) - 1);
        const std::vector<RedisReply> old = client_->command({"ZRANGE", ids, "0", last}).elements;
        delete_contexts(old, id, deleted_count_);
      }
    } catch (const RedisError&) {
    }
  }
  publish_resident();
}

std::shared_ptr<ServedContext> RedisContextStore::get(const std::string& id) {
  const auto it = entries_.find(id);
  if (it != entries_.end() && it->second.ctx) {
    touch(it->second);
    std::lock_guard<std::mutex> l(resident_mu_);
    touched_.insert(id);
    return it->second.ctx;
  }
  std::vector<RedisReply> r;
  try {
    r = client_->command({"HMGET", key_of(id), "kvc", "fingerprint", "model", "info"}).elements;
  } catch (const RedisError& e) {
    unavailable(fmt::format("context '{}' could not be loaded", id), e);
  }
  if (r.size() != 4 || r[0].is_nil()) {
    if (it != entries_.end()) entries_.erase(it);  // deleted (or expired) elsewhere
    publish_resident();
    return nullptr;
  }
  if (r[1].str != fingerprint_) other_model(id, r[2].str, r[1].str);
  std::shared_ptr<ServedContext> c;
  try {
    c = codec_.decode(reinterpret_cast<const uint8_t*>(r[0].str.data()), r[0].str.size(), key_of(id), id);
    const ContextInfo stored = info_from_json(r[3].str, id);
    c->info.seq = stored.seq;
    c->info.created = stored.created;
  } catch (const Error& e) {
    throw context_store_error(500, fmt::format("context '{}' in Redis at {} cannot be used: {}", id, client_->endpoint(),
                                               e.what()));
  }
  c->info.persisted = true;
  Entry e;
  e.info = c->info;
  e.ctx = c;
  e.file_bytes = r[0].str.size();
  touch(e);
  entries_[id] = std::move(e);
  ++counters_.reloads;
  enforce_resident(id);
  publish_resident();
  return c;
}

bool RedisContextStore::contains(const std::string& id) const {
  if (entries_.count(id)) return true;
  try {
    return client_->command({"EXISTS", key_of(id)}).integer > 0;
  } catch (const RedisError&) {
    return false;  // only used to avoid id collisions (random 96-bit ids)
  }
}

bool RedisContextStore::remove(const std::string& id) {
  const std::string key = key_of(id);
  try {
    const std::vector<RedisReply> f = client_->command({"HMGET", key, "fingerprint", "model"}).elements;
    if (f.size() == 2 && !f[0].is_nil() && f[0].str != fingerprint_) other_model(id, f[1].str, f[0].str);
    const std::vector<RedisReply> r =
        client_->pipeline({{"MULTI"}, {"DEL", key}, {"ZREM", prefix_ + "ids", id}, {"EXEC"}});
    if (r.back().type != RedisReply::Type::Array || r.back().elements.empty())
      throw context_store_error(503, fmt::format("context '{}' could not be deleted: Redis at {} aborted the transaction",
                                                 id, client_->endpoint()));
    const bool existed = r.back().elements[0].integer > 0;  // Redis is the truth: a copy here alone is stale
    entries_.erase(id);
    publish_resident();
    return existed;
  } catch (const RedisError& e) {
    unavailable(fmt::format("context '{}' could not be deleted", id), e);
  }
}

std::vector<std::string> RedisContextStore::maintain(int64_t now) {
  std::vector<std::string> gone;
  {
    std::lock_guard<std::mutex> l(resident_mu_);
    gone.swap(gone_);
  }
  for (const std::string& id : gone) entries_.erase(id);  // deleted through another replica, or expired
  std::vector<std::string> out = MemoryContextStore::maintain(now);
  publish_resident();
  return out;
}

bool RedisContextStore::release_for_kv(const std::vector<const ServedContext*>& in_use, bool may_delete) {
  (void)may_delete;  // every context is in Redis: dropping the copy here is enough
  const bool released = MemoryContextStore::release_for_kv(in_use, false);
  publish_resident();
  return released;
}

size_t RedisContextStore::load_bytes(const std::string& id) const {
  if (entries_.count(id)) return MemoryContextStore::load_bytes(id);
  try {
    const std::optional<ContextInfo> i = lookup(id);  // made by another replica: its info says
    return i ? i->kv_bytes_held : 0;
  } catch (const std::exception&) {
    return 0;  // get() reports what is wrong
  }
}

std::optional<ContextInfo> RedisContextStore::lookup(const std::string& id) const {
  std::vector<RedisReply> r;
  try {
    r = client_->command({"HMGET", key_of(id), "fingerprint", "model", "info"}).elements;
  } catch (const RedisError& e) {
    unavailable(fmt::format("context '{}'", id), e);
  }
  if (r.size() != 3 || r[0].is_nil() || r[2].is_nil()) return std::nullopt;
  if (r[0].str != fingerprint_) other_model(id, r[1].str, r[0].str);
  ContextInfo i;
  try {
    i = info_from_json(r[2].str, id);
  } catch (const Error& e) {
    throw context_store_error(500, fmt::format("context '{}' in Redis at {} cannot be used: {}", id, client_->endpoint(),
                                               e.what()));
  }
  std::lock_guard<std::mutex> l(resident_mu_);
  i.resident = resident_ids_.count(id) > 0;
  return i;
}

std::vector<ContextInfo> RedisContextStore::infos_of(const std::vector<RedisReply>& ids) const {
  std::vector<ContextInfo> out;
  if (ids.empty()) return out;
  std::vector<std::string> keys;
  std::vector<RedisClient::Command> cmds;
  for (const RedisReply& id : ids) keys.push_back(key_of(id.str));
  for (const std::string& k : keys) cmds.push_back({"HMGET", k, "fingerprint", "info"});
  const std::vector<RedisReply> infos = client_->pipeline(cmds);
  std::vector<std::string> gone;
  {
    std::lock_guard<std::mutex> l(resident_mu_);
    for (size_t i = 0; i < ids.size(); ++i) {
      const std::vector<RedisReply>& f = infos[i].elements;
      if (f.size() != 2 || f[0].is_nil() || f[1].is_nil()) {
        gone.push_back(ids[i].str);  // expired (TTL): its index entry goes too
        continue;
      }
      if (f[0].str != fingerprint_ || !valid_context_id(ids[i].str)) continue;  // another model's
      try {
        ContextInfo c = info_from_json(f[1].str, ids[i].str);
        c.resident = resident_ids_.count(c.id) > 0;
        out.push_back(std::move(c));
      } catch (const Error&) {
        // unreadable: left out of the list (a GET of it says why)
      }
    }
  }
  if (!gone.empty()) {
    const std::string index = prefix_ + "ids";
    RedisClient::Command zrem = {"ZREM", index};
    for (const std::string& g : gone) zrem.push_back(g);
    client_->command(zrem);
  }
  return out;
}

std::vector<ContextInfo> RedisContextStore::lookup_all() const {
  std::vector<ContextInfo> out;
  try {
    out = infos_of(client_->command({"ZRANGE", prefix_ + "ids", "0", "-1"}).elements);
  } catch (const RedisError& e) {
    unavailable("the contexts cannot be listed", e);
  }
  // The shared counter orders creations across replicas (their clocks may differ).
  std::sort(out.begin(), out.end(), [](const ContextInfo& a, const ContextInfo& b) {
    return a.seq != b.seq ? a.seq < b.seq : a.id < b.id;
  });
  return out;
}

ContextPage RedisContextStore::lookup_page(const std::string& after, size_t limit, bool descending) const {
  ContextPage page;
  const std::string index = prefix_ + "ids";
  try {
    std::string bound = descending ? "+inf" : "-inf";  // where the next read starts
    if (!after.empty()) {
      const RedisReply score = client_->command({"ZSCORE", index, after});
      if (score.is_nil()) {
        page.after_found = false;
        return page;
      }
      bound = "(" + score.str;  // exclusive: the page starts after it
    }
    const std::string end = descending ? "-inf" : "+inf";
    // Entries left out (expired, another model's) are skipped: read on until the page holds one
    // more than asked (which says whether more follow) or the index ends.
    for (;;) {
      const size_t want = limit + 1 - page.data.size();
      const std::string count = std::to_string(want);
      const std::vector<RedisReply> r =
          client_->command({descending ? "ZREVRANGEBYSCORE" : "ZRANGEBYSCORE", index, bound, end, "WITHSCORES", "LIMIT",
                            "0", count})
              .elements;
      std::vector<RedisReply> ids;
      for (size_t i = 0; i + 1 < r.size(); i += 2) ids.push_back(r[i]);
      for (ContextInfo& c : infos_of(ids)) page.data.push_back(std::move(c));
      if (ids.size() < want || page.data.size() > limit) break;
      bound = "(" + r[r.size() - 1].str;
    }
  } catch (const RedisError& e) {
    unavailable("the contexts cannot be listed", e);
  }
  page.has_more = page.data.size() > limit;
  if (page.has_more) page.data.resize(limit);
  return page;
}

}  // namespace kvs::server
