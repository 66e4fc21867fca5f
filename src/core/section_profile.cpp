#include "core/section_profile.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

namespace kvs::section_profile {

namespace detail {
std::atomic<bool> g_on{false};
}

namespace {

constexpr uint64_t kIdleGapNs = 10'000'000;  // 10 ms: between requests, not between sections

struct Site {
  uint64_t calls = 0, work_ns = 0, wait_ns = 0, gap_ns = 0;
};

struct Profile {
  std::mutex mu;
  std::unordered_map<const void*, Site> sites;  // by call site
  uint64_t idle_gaps = 0, idle_ns = 0, since_ns = 0;
  std::string report_path;
  std::atomic<bool> reset_asked{false};

  Profile() {
    const char* p = std::getenv("KVS_SECTION_PROFILE");
    if (p && *p) {
      clear_locked();  // (no other thread runs yet)
      start(p);
    }
  }
  ~Profile() {
    if (!detail::g_on.exchange(false) || report_path.empty()) return;
    const std::string r = report();
    if (report_path == "-") {
      std::fputs(r.c_str(), stderr);
      return;
    }
    if (FILE* f = std::fopen(report_path.c_str(), "w")) {
      std::fputs(r.c_str(), f);
      std::fclose(f);
    } else {
      std::fprintf(stderr, "kvshrink: KVS_SECTION_PROFILE: cannot write '%s'\n", report_path.c_str());
    }
  }
  // Counts from now on (since_ns: clear_locked), written to path at exit; SIGUSR1 calls reset().
  void start(const std::string& path) {
    report_path = path;
    std::signal(SIGUSR1, [](int) { reset(); });
    detail::g_on.store(true);
  }
  void clear_locked() {
    sites.clear();
    idle_gaps = idle_ns = 0;
    since_ns = now_ns();
  }
  std::string report();
  static Profile& instance();
};

Profile g_profile;  // constructed at start-up: reads KVS_SECTION_PROFILE
Profile& Profile::instance() { return g_profile; }

// "module+0xoffset [0xaddress] (symbol)" for a code address (the offset for a position-independent
// module, the address for one linked at a fixed address: scripts/section-profile-symbols).
std::string describe(const void* site) {
  Dl_info info{};
  if (dladdr(site, &info) == 0 || info.dli_fname == nullptr) return fmt::format("{}", site);
  const auto off = reinterpret_cast<uintptr_t>(site) - reinterpret_cast<uintptr_t>(info.dli_fbase);
  std::string s = fmt::format("{}+0x{:x} [{}]", info.dli_fname, off, site);
  if (info.dli_sname) s += fmt::format(" ({})", info.dli_sname);
  return s;
}

std::string Profile::report() {
  std::lock_guard<std::mutex> lock(mu);
  std::vector<std::pair<const void*, Site>> rows(sites.begin(), sites.end());
  auto cost = [](const Site& s) { return s.work_ns + s.wait_ns + s.gap_ns; };
  std::sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) { return cost(a.second) > cost(b.second); });
  Site total;
  for (const auto& [site, s] : rows) {
    total.calls += s.calls;
    total.work_ns += s.work_ns;
    total.wait_ns += s.wait_ns;
    total.gap_ns += s.gap_ns;
  }
  const double wall_s = static_cast<double>(now_ns() - since_ns) * 1e-9;
  std::string out = fmt::format(
      "# parallel sections by call site (KVS_SECTION_PROFILE): {} sections in {:.3f} s of wall time since the start "
      "or the last SIGUSR1\n"
      "# work: the calling thread's own part; wait: its wait for the other threads; gap: time since the same pool's "
      "previous section ended (serial work), gaps of 10 ms or more left out as idle ({} of them, {:.3f} s)\n"
      "# sites: module+offset; `scripts/section-profile-symbols FILE` names them (addr2line)\n",
      total.calls, wall_s, idle_gaps, static_cast<double>(idle_ns) * 1e-9);
  out += fmt::format("{:>10} {:>12} {:>12} {:>12} {:>10} {:>10} {:>10}  {}\n", "calls", "work_us", "wait_us", "gap_us",
                     "work/call", "wait/call", "gap/call", "site");
  auto line = [&](const Site& s, const std::string& name) {
    const double n = static_cast<double>(std::max<uint64_t>(1, s.calls));
    out += fmt::format("{:>10} {:>12.1f} {:>12.1f} {:>12.1f} {:>10.2f} {:>10.2f} {:>10.2f}  {}\n", s.calls,
                       s.work_ns * 1e-3, s.wait_ns * 1e-3, s.gap_ns * 1e-3, s.work_ns * 1e-3 / n, s.wait_ns * 1e-3 / n,
                       s.gap_ns * 1e-3 / n, name);
  };
  for (const auto& [site, s] : rows) line(s, describe(site));
  line(total, "total");
  return out;
}

}  // namespace

uint64_t now_ns() noexcept {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

void enable(const std::string& report_path) {
  Profile& p = Profile::instance();
  std::lock_guard<std::mutex> lock(p.mu);
  p.clear_locked();
  p.start(report_path);
}

void disable() { detail::g_on.store(false); }

// Only an atomic store: the SIGUSR1 handler calls it.
void reset() { Profile::instance().reset_asked.store(true, std::memory_order_relaxed); }

void record(const void* site, uint64_t t_start, uint64_t t_work_end, uint64_t t_end, uint64_t gap_ns) {
  Profile& p = Profile::instance();
  std::lock_guard<std::mutex> lock(p.mu);
  if (p.reset_asked.exchange(false, std::memory_order_relaxed)) p.clear_locked();
  Site& s = p.sites[site];
  ++s.calls;
  s.work_ns += t_work_end - t_start;
  s.wait_ns += t_end - t_work_end;
  if (gap_ns >= kIdleGapNs) {
    ++p.idle_gaps;
    p.idle_ns += gap_ns;
  } else {
    s.gap_ns += gap_ns;
  }
}

std::string report() { return Profile::instance().report(); }

}  // namespace kvs::section_profile
