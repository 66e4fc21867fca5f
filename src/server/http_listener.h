// The server's own accept loop: the listening socket (never shared: no SO_REUSEPORT, so a second
// server on a taken port fails to start), caps on open connections in total and per client
// address, and one thread per connection, started on demand (so the admission queue, not a fixed
// HTTP thread pool, decides who waits; 429 is reachable whatever the connection cap).
//
// At the total cap a new connection evicts the connection that has waited longest for (or in)
// the headers of a request — an idle keep-alive socket, or a slow client still sending its request
// line — so that slow or idle clients cannot keep /health and real requests out. With none to
// evict, the new connection gets an immediate 503 with Retry-After, never silence.
//
// Beyond the per-client cap a connection is still taken as a "probe" (at most kProbeConnections
// at once; a new one evicts the probe that has waited longest): it may send one request within
// kProbeWaitS, and only `GET /health` is answered — anything else, or nothing, gets 503
// `too_many_connections` — so that health checks from an address that holds many connections
// (loopback, one proxy) still get through.
//
// Shutdown: stop_accepting() closes the listening socket; connections waiting for a request are
// woken and closed; the caller waits for the others (wait_drained) and finally shuts them down
// (close_all).
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace kvs::server {

// Limits on connections and on how long and how much a client may take to send a request
// (`kvshrink serve` options; docs/server.md lists them).
struct ConnectionLimits {
  int max_connections = 256;            // open connections in total (--max-connections)
  int max_connections_per_client = 128; // per client address; 0 = no per-client cap
  double idle_timeout_s = 5;            // no (next) request this long after connecting / the last response: closed
  double header_timeout_s = 10;         // request line + headers must arrive within this of their first byte
  double body_timeout_s = 60;           // the body must arrive within this of the end of the headers
                                        // (with no pause longer than header_timeout_s)
  double write_timeout_s = 30;          // a client that reads none of its response for this long is dropped
  size_t max_header_bytes = 64 << 10;   // request line + headers
  size_t max_body_buffer_bytes = size_t{256} << 20;  // request bodies held in memory, all connections
  int max_requests_per_connection = 1000;
};

// Connections over the per-client cap that may still ask for /health, and how long each may wait
// for its request.
inline constexpr int kProbeConnections = 16;
inline constexpr double kProbeWaitS = 1.0;

// What a connection is doing, for eviction and shutdown.
enum class ConnPhase : int { Idle, Headers, Body, Handler };

struct Connection {
  int fd = -1;
  std::string peer_ip, local_ip;
  int peer_port = 0, local_port = 0;
  std::atomic<int> phase{static_cast<int>(ConnPhase::Idle)};
  // Since when (steady clock) this connection has waited for its current request: its accept, or
  // the end of its previous response. Kept while the request line and headers trickle in (a slow
  // client is as old as its wait), and not reset when its thread starts late on a loaded machine
  // (which would make an honest request younger than the idle sockets opened before it).
  std::atomic<int64_t> waiting_since_ns{0};
  std::atomic<bool> evicted{false};        // shut down to make room: answer 503
  std::atomic<bool> woken{false};          // shut down for the server's stop
  bool probe = false;                      // over the per-client cap: /health only (set before serving)

  // Idle after a response (or at accept) starts a new wait; Idle -> Idle and Idle -> Headers keep it.
  void set_phase(ConnPhase p);
  ConnPhase get_phase() const { return static_cast<ConnPhase>(phase.load()); }
};

// Connection counters for /metrics.
struct ListenerStats {
  int open = 0;
  uint64_t accepted = 0;
  uint64_t rejected_total_cap = 0, rejected_per_client = 0, rejected_stopping = 0;
  uint64_t evicted = 0;
  uint64_t probes = 0;  // connections taken over the per-client cap (for /health only)
};

class HttpListener {
 public:
  explicit HttpListener(ConnectionLimits lim);
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  // Binds and listens (host: an address or a name; port 0 = any free port). Returns the port.
  // Throws kvs::Error naming the address and why (a port already taken says so).
  int bind(const std::string& host, int port);
  // Accepts until stop_accepting(); every connection runs `serve` on a thread of its own, and is
  // closed when `serve` returns.
  void run(std::function<void(Connection&)> serve);
  // Closes the listening socket (new connections are refused) and wakes connections that wait
  // for a request, which then close. Safe from any thread, idempotent.
  void stop_accepting();
  bool stopping() const { return stopping_.load(); }
  // Waits until no connection is open, at most `seconds`; true when none is.
  bool wait_drained(double seconds);
  // Shuts every open connection down (their threads then end quickly).
  void close_all();
  ListenerStats stats() const;
  // A probe connection was refused (its request was not /health, or none came): counted as a
  // per-client rejection.
  void probe_refused();

 private:
  void accept_one(int fd);
  void reject(int fd, const char* reason_code, const std::string& message);
  // Evicts the longest-waiting connection (among probes only, when `probes_only`); false if none.
  bool evict_one_locked(bool probes_only = false);
  void finished(Connection* c);

  ConnectionLimits lim_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // stop_accepting() writes here to wake the accept loop
  std::atomic<bool> stopping_{false};
  std::function<void(Connection&)> serve_;

  mutable std::mutex mu_;
  std::condition_variable drained_;
  std::map<Connection*, std::unique_ptr<Connection>> open_;
  std::map<std::string, int> per_client_;  // connections per address, probes not counted
  ListenerStats stats_;
};

}  // namespace kvs::server
