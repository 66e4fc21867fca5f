// The server's counters and gauges, rendered in Prometheus' text exposition format (GET /metrics).
// Thread-safe: handlers count requests, the scheduler counts tokens, steps and compressions and
// publishes its gauges after every step.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "server/context_store.h"

namespace kvs::server {

struct SchedulerGauges {
  size_t kv_bytes_in_use = 0;     // page pool: bytes of pages in use
  size_t kv_bytes_high_water = 0; // page pool: largest bytes in use since start
  size_t kv_bytes_cap = 0;        // --max-kv-bytes (0: none)
  size_t kv_bytes_contexts = 0;   // held by stored contexts
  size_t kv_bytes_reserved = 0;   // admitted sequences' worst-case growth (admission control)
  size_t kv_bytes_allocated = 0;  // page pool: memory its chunks hold (whole 2 MiB huge pages)
  int running = 0;                // sequences in flight
  int decoding = 0;               // of which generating (past their prompt)
  int queued = 0;                 // requests waiting for admission
  size_t contexts = 0;            // stored contexts
  StoreStats store;               // resident / on disk, evictions, reloads
};

// The HTTP front end's connection figures, read when /metrics is rendered.
struct HttpGauges {
  int connections_open = 0;
  uint64_t connections_accepted = 0;
  uint64_t rejected_max_connections = 0, rejected_per_client = 0, rejected_stopping = 0;
  uint64_t evicted = 0;
  size_t body_bytes = 0;  // request bodies held in memory now
};

class Metrics {
 public:
  // One finished HTTP request (endpoint: "/v1/completions", ...; anything unknown is "other").
  void request(const std::string& endpoint, int status, double seconds);
  void tokens(int64_t prompt, int64_t generated);
  void compression(const std::string& press, size_t bytes_before, size_t bytes_after);
  void step(int decode_rows, int prefill_rows, double seconds);
  void cancelled();
  void rejected(const std::string& reason);  // "queue_full", "queue_timeout", "kv_memory", ...
  void http_timeout(const std::string& phase);  // "idle", "headers", "body", "write"
  void set_gauges(const SchedulerGauges& g);
  SchedulerGauges gauges() const;
  int64_t cancelled_count() const;

  std::string render(const HttpGauges& http = {}) const;

 private:
  static constexpr std::array<double, 12> kBuckets{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120};
  struct Histogram {
    std::array<uint64_t, kBuckets.size()> le{};
    uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, Histogram> latency_;
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  std::map<std::string, uint64_t> compressions_;
  std::map<std::string, uint64_t> compress_bytes_before_, compress_bytes_after_;
  uint64_t steps_ = 0, decode_rows_ = 0, prefill_rows_ = 0;
  double step_seconds_ = 0;
  int64_t cancelled_ = 0;
  std::map<std::string, uint64_t> rejected_;
  std::map<std::string, uint64_t> http_timeouts_;
  SchedulerGauges g_;
};

}  // namespace kvs::server
