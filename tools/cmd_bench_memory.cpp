// kvshrink bench-memory: the read bandwidth of this machine from DRAM, as the decode roofline uses
// it (BENCHMARKS.md, issue 25): T threads of the engine's pool each sum their contiguous share of
// a buffer far larger than the last-level cache with the active kernel table's dot product (the
// same loop as kvs_bench's Kernels/MemStream). A decode step can read its weights and KV bytes no
// faster than this; `tests/server/bench/bench.mjs throughput --roofline` runs it before and after
// each measurement to put the bound beside the tokens per second. Reports the median and the best
// of --reps passes (a pass reads the whole buffer once); --json prints one JSON line instead.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <vector>

#include "cli_common.h"
#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/ops.h"

namespace kvs::cli {
namespace {

struct MemoryOptions {
  int threads = 0;  // 0: every core
  int mib = 256;
  int reps = 5;
  bool json = false;
};

void run_bench_memory(MemoryOptions o) {
  require_int("--mib", o.mib, 1, 1 << 16);
  require_int("--reps", o.reps, 1, 1000);
  const int nth = capped_threads("-t", o.threads);
  const int64_t n = static_cast<int64_t>(o.mib) << 18;  // floats: mib x 2^20 bytes / 4
  ThreadPool pool(nth);
  AlignedBuffer<float> buf(static_cast<size_t>(n));  // [n] summed, never written after the first touch
  // First touch by the thread that reads each share (its pages near it), values that keep the sum finite.
  pool.parallel_for(n, [&](int64_t b, int64_t e) { std::fill(buf.data() + b, buf.data() + e, 1.0f); });
  std::vector<double> gbs;
  std::vector<float> sink(static_cast<size_t>(nth), 0.0f);
  for (int r = 0; r <= o.reps; ++r) {  // pass 0 warms up (page tables, the pool's threads)
    Timer t;
    pool.run([&](int ith, int n_th) {
      const auto [b, e] = ThreadPool::split(n, ith, n_th);
      sink[static_cast<size_t>(ith)] += kernels::dot_f32(buf.data() + b, buf.data() + b, e - b);
    });
    const double s = t.seconds();
    if (r > 0) gbs.push_back(static_cast<double>(n) * sizeof(float) / s * 1e-9);
  }
  float total = 0;
  for (float x : sink) total += x;
  if (!(total > 0)) fail("bench-memory: the sum came out {} (expected positive)", total);
  std::vector<double> sorted = gbs;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2], best = sorted.back();
  if (o.json) {
    const nlohmann::json j = {{"threads", nth},      {"bytes", n * static_cast<int64_t>(sizeof(float))},
                              {"reps", o.reps},      {"read_gbps_median", median},
                              {"read_gbps_best", best}, {"read_gbps", gbs},
                              {"kernels", kernels::active_kernels().name}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("read bandwidth, {} thread{}, {} MiB buffer, {} passes ({} kernels): median {:.1f} GB/s, best {:.1f} GB/s\n",
               nth, nth == 1 ? "" : "s", o.mib, o.reps, kernels::active_kernels().name, median, best);
  }
}

}  // namespace

void register_bench_memory(CLI::App& app) {
  auto o = std::make_shared<MemoryOptions>();
  CLI::App* cmd = app.add_subcommand("bench-memory", "measure the read bandwidth from memory (the decode roofline's bound)");
  cmd->add_option("-t,--threads", o->threads, "threads (default 0: every core)");
  cmd->add_option("--mib", o->mib, "buffer size in MiB (default 256: far beyond any last-level cache)");
  cmd->add_option("--reps", o->reps, "timed passes over the buffer (default 5)");
  cmd->add_flag("--json", o->json, "print one JSON line: read_gbps_median, read_gbps_best, read_gbps, threads, bytes");
  cmd->callback([o] { run_bench_memory(*o); });
}

}  // namespace kvs::cli
