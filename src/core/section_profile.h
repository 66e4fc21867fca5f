// Opt-in timing of the thread pool's parallel sections, per call site: where a decode step's time
// goes inside sections (the calling thread's own share of the work), at their ends (its wait for
// the other threads) and between them (serial work on the calling thread while the others spin).
// Off unless the environment sets KVS_SECTION_PROFILE when the process starts:
//   KVS_SECTION_PROFILE=FILE  the report is written to FILE when the process exits ("-": stderr)
// While it is on, SIGUSR1 clears the counts (to leave out a warm-up: a server's context building
// before its decode rounds). When off, ThreadPool::run pays one relaxed load.
// A call site is the return address of ThreadPool::run (inside the function that called it or
// the parallel_for it inlined), printed as module+offset with the symbol when the dynamic symbol
// table has it; scripts/section-profile-symbols FILE names every site with addr2line.
// How its figures were used: docs/benchmarks/issue25-server-step-5-intel-2026-11-30.md.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace kvs::section_profile {

namespace detail {
extern std::atomic<bool> g_on;
}

inline bool on() noexcept { return detail::g_on.load(std::memory_order_relaxed); }

// Monotonic nanoseconds (steady_clock).
uint64_t now_ns() noexcept;

// Turns profiling on for this process; the report goes to report_path ("-": stderr) at exit, or
// nowhere when empty (tests read report() instead).
void enable(const std::string& report_path);
// Turns it off (tests; the report at exit is then not written).
void disable();
// Clears every count (what SIGUSR1 asks for; done at the next record()).
void reset();

// One section run from call site `site`: started at t_start, the calling thread's own part ended
// at t_work_end, the last thread finished at t_end; gap_ns = t_start - the end of the same pool's
// previous section (0 for the first). Gaps of 10 ms or more are idle time, counted apart.
void record(const void* site, uint64_t t_start, uint64_t t_work_end, uint64_t t_end, uint64_t gap_ns);

// The table: one row per call site, the costliest first (work + wait + gap), and the totals.
std::string report();

}  // namespace kvs::section_profile
