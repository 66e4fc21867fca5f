#include "server/metrics.h"

#include <fmt/format.h>

namespace kvs::server {

namespace {

// Label values are ours (endpoints, press names), but escape anyway.
std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// A metric with one unlabelled sample: its HELP/TYPE lines, then "name value".
template <typename T>
void scalar(std::string& out, const char* name, const char* type, const char* help, const T& value) {
  header(out, name, type, help);
  out += fmt::format("{} {}\n", name, value);
}

}  // namespace

void Metrics::request(const std::string& endpoint, int status, double seconds) {
  std::lock_guard<std::mutex> l(mu_);
  ++requests_[{endpoint, status}];
  Histogram& h = latency_[endpoint];
  for (size_t i = 0; i < kBuckets.size(); ++i)
    if (seconds <= kBuckets[i]) ++h.le[i];
  ++h.count;
  h.sum += seconds;
}

void Metrics::tokens(int64_t prompt, int64_t generated) {
  std::lock_guard<std::mutex> l(mu_);
  prompt_tokens_ += prompt;
  generated_tokens_ += generated;
}

void Metrics::compression(const std::string& press, size_t bytes_before, size_t bytes_after) {
  std::lock_guard<std::mutex> l(mu_);
  ++compressions_[press];
  compress_bytes_before_[press] += bytes_before;
  compress_bytes_after_[press] += bytes_after;
}

void Metrics::step(int decode_rows, int prefill_rows, double seconds) {
  std::lock_guard<std::mutex> l(mu_);
  ++steps_;
  decode_rows_ += static_cast<uint64_t>(decode_rows);
  prefill_rows_ += static_cast<uint64_t>(prefill_rows);
  step_seconds_ += seconds;
}

void Metrics::cancelled() {
  std::lock_guard<std::mutex> l(mu_);
  ++cancelled_;
}

int64_t Metrics::cancelled_count() const {
  std::lock_guard<std::mutex> l(mu_);
  return cancelled_;
}

void Metrics::rejected(const std::string& reason) {
  std::lock_guard<std::mutex> l(mu_);
  ++rejected_[reason];
}

void Metrics::http_timeout(const std::string& phase) {
  std::lock_guard<std::mutex> l(mu_);
  ++http_timeouts_[phase];
}

void Metrics::set_gauges(const SchedulerGauges& g) {
  std::lock_guard<std::mutex> l(mu_);
  g_ = g;
}

SchedulerGauges Metrics::gauges() const {
  std::lock_guard<std::mutex> l(mu_);
  return g_;
}

std::string Metrics::render(const HttpGauges& http) const {
  std::lock_guard<std::mutex> l(mu_);
  std::string o;
  header(o, "kvshrink_requests_total", "counter", "HTTP requests by endpoint and status code.");
  for (const auto& [k, n] : requests_)
    o += fmt::format("kvshrink_requests_total{{endpoint=\"{}\",status=\"{}\"}} {}\n", esc(k.first), k.second, n);
  header(o, "kvshrink_request_duration_seconds", "histogram", "HTTP request latency (to the last byte) by endpoint.");
  for (const auto& [ep, h] : latency_) {
    for (size_t i = 0; i < kBuckets.size(); ++i)
      o += fmt::format("kvshrink_request_duration_seconds_bucket{{endpoint=\"{}\",le=\"{}\"}} {}\n", esc(ep), kBuckets[i],
                       h.le[i]);
    o += fmt::format("kvshrink_request_duration_seconds_bucket{{endpoint=\"{}\",le=\"+Inf\"}} {}\n", esc(ep), h.count);
    o += fmt::format("kvshrink_request_duration_seconds_sum{{endpoint=\"{}\"}} {}\n", esc(ep), h.sum);
    o += fmt::format("kvshrink_request_duration_seconds_count{{endpoint=\"{}\"}} {}\n", esc(ep), h.count);
  }
  scalar(o, "kvshrink_prompt_tokens_total", "counter", "Prompt tokens prefilled (contexts, prompts, questions).", prompt_tokens_);
  scalar(o, "kvshrink_generated_tokens_total", "counter", "Tokens generated.", generated_tokens_);
  header(o, "kvshrink_compressions_total", "counter", "Contexts and prompts compressed, by press.");
  for (const auto& [p, n] : compressions_) o += fmt::format("kvshrink_compressions_total{{press=\"{}\"}} {}\n", esc(p), n);
  header(o, "kvshrink_compression_kv_bytes_before_total", "counter", "KV bytes before compression, by press.");
  for (const auto& [p, n] : compress_bytes_before_)
    o += fmt::format("kvshrink_compression_kv_bytes_before_total{{press=\"{}\"}} {}\n", esc(p), n);
  header(o, "kvshrink_compression_kv_bytes_after_total", "counter", "KV bytes after compression, by press.");
  for (const auto& [p, n] : compress_bytes_after_)
    o += fmt::format("kvshrink_compression_kv_bytes_after_total{{press=\"{}\"}} {}\n", esc(p), n);
  scalar(o, "kvshrink_batch_steps_total", "counter", "Batched forward steps run.", steps_);
  scalar(o, "kvshrink_batch_decode_rows_total", "counter", "Decode tokens fed in batched steps.", decode_rows_);
  scalar(o, "kvshrink_batch_prefill_rows_total", "counter", "Prompt tokens fed in batched steps.", prefill_rows_);
  scalar(o, "kvshrink_batch_step_seconds_total", "counter", "Time spent in batched steps.", step_seconds_);
  scalar(o, "kvshrink_cancelled_total", "counter", "Sequences cancelled because their client disconnected.", cancelled_);
  header(o, "kvshrink_rejected_total", "counter", "Requests refused by admission control, by reason.");
  for (const auto& [r, n] : rejected_) o += fmt::format("kvshrink_rejected_total{{reason=\"{}\"}} {}\n", esc(r), n);
  scalar(o, "kvshrink_kv_bytes", "gauge", "KV page-pool bytes in use.", g_.kv_bytes_in_use);
  scalar(o, "kvshrink_kv_bytes_high_water", "gauge", "Largest KV page-pool bytes in use since start.", g_.kv_bytes_high_water);
  scalar(o, "kvshrink_kv_bytes_allocated", "gauge",
         "KV page-pool memory allocated: its chunks of whole 2 MiB huge pages, pages in use or free.", g_.kv_bytes_allocated);
  scalar(o, "kvshrink_kv_bytes_cap", "gauge", "KV page-pool cap (--max-kv-bytes; 0 = none).", g_.kv_bytes_cap);
  scalar(o, "kvshrink_kv_bytes_contexts", "gauge", "KV bytes held by stored contexts.", g_.kv_bytes_contexts);
  scalar(o, "kvshrink_kv_bytes_reserved", "gauge", "KV bytes reserved for the worst-case growth of running sequences.", g_.kv_bytes_reserved);
  scalar(o, "kvshrink_sequences_running", "gauge", "Sequences in flight (prefilling or decoding).", g_.running);
  scalar(o, "kvshrink_sequences_decoding", "gauge", "Sequences in flight that are generating (past their prompt).", g_.decoding);
  scalar(o, "kvshrink_sequences_queued", "gauge", "Requests waiting for admission.", g_.queued);
  scalar(o, "kvshrink_contexts", "gauge", "Stored compressed contexts.", g_.contexts);
  scalar(o, "kvshrink_contexts_resident", "gauge", "Stored contexts held in memory (the others are on disk only).",
         g_.store.resident);
  scalar(o, "kvshrink_contexts_resident_bytes", "gauge", "KV bytes of the stored contexts held in memory.",
         g_.store.resident_bytes);
  scalar(o, "kvshrink_contexts_disk_bytes", "gauge", "Bytes of the stored contexts' files.", g_.store.disk_bytes);
  scalar(o, "kvshrink_contexts_reloaded_total", "counter", "Stored contexts loaded back from disk when used.",
         g_.store.reloads);
  o += "# HELP kvshrink_contexts_evicted_total Stored contexts dropped from memory (kept on disk) or deleted, by reason.\n"
       "# TYPE kvshrink_contexts_evicted_total counter\n";
  o += fmt::format("kvshrink_contexts_evicted_total{{reason=\"resident_budget\"}} {}\n", g_.store.evicted_memory);
  o += fmt::format("kvshrink_contexts_evicted_total{{reason=\"kv_pressure\"}} {}\n", g_.store.evicted_kv_pressure);
  o += "# HELP kvshrink_contexts_deleted_total Stored contexts deleted by the store's policy, by reason.\n"
       "# TYPE kvshrink_contexts_deleted_total counter\n";
  o += fmt::format("kvshrink_contexts_deleted_total{{reason=\"ttl\"}} {}\n", g_.store.deleted_ttl);
  o += fmt::format("kvshrink_contexts_deleted_total{{reason=\"disk_quota\"}} {}\n", g_.store.deleted_disk);
  o += fmt::format("kvshrink_contexts_deleted_total{{reason=\"resident_budget\"}} {}\n", g_.store.deleted_memory);
  o += fmt::format("kvshrink_contexts_deleted_total{{reason=\"count\"}} {}\n", g_.store.deleted_count);
  o += fmt::format("kvshrink_contexts_deleted_total{{reason=\"kv_pressure\"}} {}\n", g_.store.deleted_kv_pressure);
  scalar(o, "kvshrink_contexts_budget_resident_bytes", "gauge",
         "KV bytes the stored contexts may hold in memory (--contexts-resident-mib or its default; 0 = none).",
         g_.store.budget.resident_bytes);
  scalar(o, "kvshrink_contexts_budget_disk_bytes", "gauge",
         "Bytes the contexts directory's files may take (--contexts-disk-mib or its default; 0 = none).",
         g_.store.budget.disk_bytes);
  scalar(o, "kvshrink_contexts_budget_count", "gauge", "Stored contexts at most (--contexts-max or its default; 0 = none).",
         g_.store.budget.max_contexts);
  scalar(o, "kvshrink_contexts_budget_ttl_seconds", "gauge", "Seconds a stored context may go unused (--contexts-ttl; 0 = none).",
         g_.store.budget.ttl_s);
  scalar(o, "kvshrink_http_connections", "gauge", "Open HTTP connections.", http.connections_open);
  scalar(o, "kvshrink_http_connections_accepted_total", "counter", "HTTP connections accepted.", http.connections_accepted);
  header(o, "kvshrink_http_connections_rejected_total", "counter",
         "HTTP connections answered 503 at once, by reason (max_connections, per_client, shutting_down).");
  o += fmt::format("kvshrink_http_connections_rejected_total{{reason=\"max_connections\"}} {}\n", http.rejected_max_connections);
  o += fmt::format("kvshrink_http_connections_rejected_total{{reason=\"per_client\"}} {}\n", http.rejected_per_client);
  o += fmt::format("kvshrink_http_connections_rejected_total{{reason=\"shutting_down\"}} {}\n", http.rejected_stopping);
  scalar(o, "kvshrink_http_connections_evicted_total", "counter",
         "Idle or slow HTTP connections closed to make room at the connection cap.", http.evicted);
  header(o, "kvshrink_http_timeouts_total", "counter",
         "HTTP connections closed for a timeout, by phase (idle, headers, body, write).");
  for (const char* ph : {"idle", "headers", "body", "write"}) {
    const auto it = http_timeouts_.find(ph);
    o += fmt::format("kvshrink_http_timeouts_total{{phase=\"{}\"}} {}\n", ph, it == http_timeouts_.end() ? 0 : it->second);
  }
  scalar(o, "kvshrink_http_body_bytes", "gauge", "Request bodies held in memory now.", http.body_bytes);
  return o;
}

}  // namespace kvs::server
