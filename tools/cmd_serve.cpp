// kvshrink serve: an OpenAI-compatible HTTP server with per-request KV compression, compressed
// contexts as resources, continuous batching and a KV memory cap (src/server/, docs/server.md).
#include <fmt/format.h>

#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "cli_common.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "press/params.h"
#include "server/request_guard.h"
#include "server/server.h"
#include "server/store_budget.h"

namespace kvs::cli {
namespace {

struct ServeCliOptions {
  EngineOptions eng;
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string api_key, api_key_file, api_key_env = "KVSHRINK_API_KEY";
  std::string max_kv_bytes = "0";
  std::string contexts_dir, model_id;
  std::string contexts_url, contexts_prefix = "kvshrink:", contexts_password_file;
  int contexts_timeout_ms = 1000;
  double contexts_resident_mib = 0, contexts_disk_mib = 0;
  int64_t contexts_ttl_s = 0;
  int64_t contexts_max = 0;
  server::SchedulerOptions sched;
  server::RequestLimits limits;
  int ctx_size = 0;
  int max_body_mib = 8;
  server::ConnectionLimits conn;
  std::vector<std::string> allowed_hosts, allow_origins;
  double shutdown_grace_s = 10;
  bool api_key_given = false;
};

int g_stop_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = ::write(g_stop_pipe[1], &b, 1);
}

// "0", "512M", "2G", "1073741824" (the memory-trigger syntax); 0 means no cap.
size_t parse_bytes(const std::string& s) {
  if (s == "0") return 0;
  const Trigger t = parse_trigger("memory:" + s);
  return t.cap_bytes;
}

void run_serve(ServeCliOptions o) {
  require_int("--port", o.port, 0, 65535);
  require_int("--parallel", o.sched.parallel, 1, 4096);
  require_int("--max-queue", o.sched.max_queue, 0, 1 << 20);
  require_number("--queue-timeout", o.sched.queue_timeout_s, 0, 86400, true);
  require_int("--prefill-chunk", o.sched.prefill_chunk, 1, 1 << 20);
  require_int("--step-delay-ms", o.sched.step_delay_ms, 0, 10000);
  require_int("--max-tokens", o.limits.max_tokens, 1, 1 << 24);
  require_int("--max-prompt-tokens", o.limits.max_prompt_tokens, 1, 1 << 24);
  require_int("--ctx-size", o.ctx_size, 0, 1 << 30);
  require_int("--max-body-mib", o.max_body_mib, 1, 4096);
  require_int("--max-connections", o.conn.max_connections, 1, 1 << 16);
  require_int("--max-connections-per-client", o.conn.max_connections_per_client, 0, 1 << 16);
  require_number("--idle-timeout", o.conn.idle_timeout_s, 0, 86400, true);
  require_number("--header-timeout", o.conn.header_timeout_s, 0, 86400, true);
  require_number("--body-timeout", o.conn.body_timeout_s, 0, 86400, true);
  require_number("--write-timeout", o.conn.write_timeout_s, 0, 86400, true);
  require_number("--shutdown-grace", o.shutdown_grace_s, 0, 3600);
  // Admission control answers 429 when the queue is full; the connection cap must leave room
  // for that (and for /health and /metrics), or clients would meet 503 first.
  if (o.conn.max_connections < o.sched.parallel + o.sched.max_queue + 8)
    fail("--max-connections {} must be at least --parallel + --max-queue + 8 = {} (so that a full queue answers 429 "
         "and /health still gets in)",
         o.conn.max_connections, o.sched.parallel + o.sched.max_queue + 8);
  size_t cap = 0;
  try {
    cap = parse_bytes(o.max_kv_bytes);
  } catch (const Error& e) {
    fail("--max-kv-bytes must be a byte count (suffix K, M or G allowed) or 0, got '{}'", o.max_kv_bytes);
  }
  // The key: --api-key, --api-key-file (its first line: not visible in `ps`) or the environment.
  // An empty key would silently turn authentication off, and one a client cannot send (only
  // whitespace, a control character) would lock everyone out: refuse both, wherever they come from.
  if (o.api_key_given && !o.api_key_file.empty()) fail("give --api-key or --api-key-file, not both");
  std::string key_source = "--api-key";
  if (!o.api_key_file.empty()) {
    std::string k = read_file(o.api_key_file);
    k = k.substr(0, k.find_first_of("\r\n"));
    if (k.empty()) fail("--api-key-file {}: the file's first line is empty", o.api_key_file);
    o.api_key = k;
    o.api_key_given = true;
    key_source = "--api-key-file " + o.api_key_file + ": the key";
  }
  if (o.api_key_given && o.api_key.empty()) fail("--api-key must not be empty (leave the option out to run without a key)");
  if (o.api_key.empty() && !o.api_key_env.empty()) {
    if (const char* k = std::getenv(o.api_key_env.c_str())) {
      if (!*k) fail("${} is set but empty (unset it to run without a key)", o.api_key_env);
      o.api_key = k;
      key_source = "$" + o.api_key_env;
    }
  }
  if (!o.api_key.empty())
    if (const std::string why = server::api_key_problem(o.api_key); !why.empty())
      fail("{} {} (no client could send it in 'Authorization: Bearer KEY')", key_source, why);

  // SIGINT / SIGTERM stop the server from a thread of their own: the handler only writes to a
  // pipe (a mask would not do: OpenBLAS starts its threads before main, with the signals open).
  if (::pipe(g_stop_pipe) != 0) fail("cannot create the pipe that signals are relayed through");
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  auto model = Model::load(o.eng.model);
  server::ServeOptions so;
  so.engine = o.eng.params();
  so.engine.kv_max_bytes = cap;
  so.scheduler = o.sched;
  so.contexts_dir = o.contexts_dir;
  if (!o.contexts_url.empty()) {
    require_int("--contexts-timeout-ms", o.contexts_timeout_ms, 1, 600000);
    so.redis.url = o.contexts_url;
    so.redis.prefix = o.contexts_prefix;
    so.redis.client.timeout = std::chrono::milliseconds(o.contexts_timeout_ms);
    so.redis.client.retry = std::chrono::milliseconds(std::max(o.contexts_timeout_ms, 1000));
    // The password: a file (first line) or the environment, never the command line.
    if (!o.contexts_password_file.empty()) {
      std::string pw = read_file(o.contexts_password_file);
      pw = pw.substr(0, pw.find_first_of("\r\n"));
      if (pw.empty()) fail("--contexts-password-file {}: the file's first line is empty", o.contexts_password_file);
      so.redis.client.password = pw;
    } else if (const char* pw = std::getenv("KVSHRINK_REDIS_PASSWORD"); pw && *pw) {
      so.redis.client.password = pw;
    }
  } else if (!o.contexts_password_file.empty() || o.contexts_prefix != "kvshrink:") {
    fail("--contexts-password-file and --contexts-prefix configure the Redis store: give --contexts-url too");
  }
  so.contexts.resident_bytes = static_cast<size_t>(o.contexts_resident_mib * 1048576.0);
  so.contexts.disk_bytes = static_cast<size_t>(o.contexts_disk_mib * 1048576.0);
  so.contexts.ttl_s = o.contexts_ttl_s;
  so.contexts.max_contexts = static_cast<size_t>(o.contexts_max);
  so.http.host = o.host;
  so.http.port = o.port;
  so.http.api_key = o.api_key;
  so.http.connections = o.conn;
  so.http.allowed_hosts = o.allowed_hosts;
  so.http.allow_origins = o.allow_origins;
  so.http.shutdown_grace_s = o.shutdown_grace_s;
  so.http.model_id = o.model_id;
  so.http.limits = o.limits;
  so.http.limits.ctx_size = o.ctx_size > 0 ? o.ctx_size : std::max(model->hp.n_ctx_train, 1);
  so.http.limits.max_body_bytes = static_cast<size_t>(o.max_body_mib) << 20;
  so.http.limits.n_vocab = model->hp.n_vocab;
  server::Server srv(*model, so);
  for (const std::string& p : srv.restore_problems()) fmt::print(stderr, "kvshrink serve: warning: {}\n", p);
  std::thread sig([&srv, &o] {
    unsigned char got = 0;
    while (::read(g_stop_pipe[0], &got, 1) < 0 && errno == EINTR) {
    }
    fmt::print(stderr, "kvshrink serve: signal {}, stopping (in-flight requests have {} s to finish)\n",
               static_cast<int>(got), o.shutdown_grace_s);
    std::fflush(stderr);
    srv.stop();
    // A second signal: stop at once.
    while (::read(g_stop_pipe[0], &got, 1) < 0 && errno == EINTR) {
    }
    fmt::print(stderr, "kvshrink serve: second signal, exiting now\n");
    std::fflush(stderr);
    std::_Exit(1);
  });
  sig.detach();
  fmt::print(stderr,
             "kvshrink serve: listening on http://{}:{} (model {}, {} threads, KV cap {}, {} parallel, queue {}, contexts "
             "{}: {} loaded{})\n",
             o.host, srv.port(), model->name, srv.engine().pool().size(), cap ? format_bytes(cap) : std::string("none"),
             o.sched.parallel, o.sched.max_queue, srv.store().describe(), srv.store().size(),
             o.api_key.empty() ? "" : ", API key required");
  fmt::print(stderr, "kvshrink serve: context budgets: {}\n", server::describe_store_policy(srv.store().policy()));
  std::fflush(stderr);
  srv.run();
}

}  // namespace

void register_serve(CLI::App& app) {
  auto o = std::make_shared<ServeCliOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with KV compression (docs/server.md)");
  o->eng.add(cmd);
  cmd->add_option("--host", o->host, "address to listen on (default loopback only)")->capture_default_str();
  cmd->add_option("--port", o->port, "port (0: any free port, printed at start)")->capture_default_str();
  cmd->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY' (default: $KVSHRINK_API_KEY if set)")
      ->each([o](const std::string&) { o->api_key_given = true; });
  cmd->add_option("--api-key-file", o->api_key_file,
                  "file whose first line is the API key (kept out of `ps`, unlike --api-key)");
  cmd->add_option("--max-kv-bytes", o->max_kv_bytes, "cap on KV cache bytes for all sequences and contexts (K/M/G; 0 = none)")
      ->capture_default_str();
  cmd->add_option("--parallel", o->sched.parallel, "sequences decoded together at most")->capture_default_str();
  cmd->add_option("--max-queue", o->sched.max_queue, "requests waiting for admission at most (429 beyond)")->capture_default_str();
  cmd->add_option("--queue-timeout", o->sched.queue_timeout_s, "seconds a request may wait for admission (429 after)")
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", o->sched.prefill_chunk, "prompt tokens fed per step, interleaved with decoding")
      ->capture_default_str();
  cmd->add_option("--step-delay-ms", o->sched.step_delay_ms, "pause after every batched step (tests, demos)")
      ->capture_default_str();
  cmd->add_option("--contexts-dir", o->contexts_dir, "persist compressed contexts as .kvc files here (reloaded at start)");
  cmd->add_option("--contexts-url", o->contexts_url,
                  "share compressed contexts with other replicas through Redis: redis://HOST[:PORT][/DB] (password: "
                  "$KVSHRINK_REDIS_PASSWORD or --contexts-password-file; docs/deploy.md)");
  cmd->add_option("--contexts-prefix", o->contexts_prefix, "prefix of the Redis keys (one per model or deployment)")
      ->capture_default_str();
  cmd->add_option("--contexts-password-file", o->contexts_password_file,
                  "file whose first line is the Redis password (else $KVSHRINK_REDIS_PASSWORD)");
  cmd->add_option("--contexts-timeout-ms", o->contexts_timeout_ms,
                  "Redis connect and command timeout; past it context operations answer 503 (and fail fast for a "
                  "second)")
      ->capture_default_str();
  cmd->add_option("--contexts-resident-mib", o->contexts_resident_mib,
                  "KV MiB the stored contexts may hold in memory (0: the default, the KV cap, else a quarter of the "
                  "machine's memory); past it the least recently used are "
                  "dropped from memory and loaded back from --contexts-dir or Redis when used (without either: deleted)")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--contexts-ttl", o->contexts_ttl_s,
                  "seconds a stored context may go unused before it is deleted (0: never)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--contexts-disk-mib", o->contexts_disk_mib,
                  "MiB the .kvc files of --contexts-dir (or the Redis server of --contexts-url) may take (0: the "
                  "default: what the files take now plus half the free space; Redis: a quarter of the machine's "
                  "memory, at most 90% of maxmemory); the least recently used (Redis: the oldest) are deleted to make "
                  "room, a context larger than the directory's quota is refused (507)")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--contexts-max", o->contexts_max,
                  "stored contexts at most (0: the default, 10000); past it the least recently used are deleted")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  cmd->add_option("--ctx-size", o->ctx_size, "positions a sequence may reach (default: the model's training context)");
  cmd->add_option("--max-prompt-tokens", o->limits.max_prompt_tokens, "tokens of one prompt or context at most")
      ->capture_default_str();
  cmd->add_option("--max-tokens", o->limits.max_tokens, "cap on a request's max_tokens")->capture_default_str();
  cmd->add_option("--max-body-mib", o->max_body_mib, "request body size limit in MiB")->capture_default_str();
  cmd->add_option("--max-connections", o->conn.max_connections,
                  "open connections at most (idle/slow ones are closed to make room, else 503)")
      ->capture_default_str();
  cmd->add_option("--max-connections-per-client", o->conn.max_connections_per_client,
                  "open connections per client address at most (0 = no cap; behind a proxy every client is one)")
      ->capture_default_str();
  cmd->add_option("--idle-timeout", o->conn.idle_timeout_s, "seconds a connection may wait before (its next) request")
      ->capture_default_str();
  cmd->add_option("--header-timeout", o->conn.header_timeout_s, "seconds for a request line and headers to arrive")
      ->capture_default_str();
  cmd->add_option("--body-timeout", o->conn.body_timeout_s, "seconds for a request body to arrive")->capture_default_str();
  cmd->add_option("--write-timeout", o->conn.write_timeout_s, "seconds a client may leave its response unread")
      ->capture_default_str();
  cmd->add_option("--shutdown-grace", o->shutdown_grace_s,
                  "seconds in-flight requests may finish after SIGTERM (then 503 / an error event)")
      ->capture_default_str();
  cmd->add_option("--allowed-host", o->allowed_hosts,
                  "Host header value accepted besides the bound address and localhost (repeatable; '*' = any)");
  cmd->add_option("--allow-origin", o->allow_origins,
                  "browser origin allowed to call the API, with CORS (repeatable; '*' = any; default none)");
  cmd->add_option("--model-id", o->model_id, "model id in /v1/models and responses (default: the model's name)");
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace kvs::cli
