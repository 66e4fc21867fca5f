// kvshrink bench-kernels: every weight type's decode mat-vec (one token, the matmul decode path as
// the model runs it: a Q4_0 / Q8_0 weight repacked where the table has its packed tile) on every
// kernel table this CPU can run (generic, avx2, avx512), each as GB/s of weight bytes streamed from
// DRAM beside the read bound `kvshrink bench-memory` measures with the same threads. A wide table
// slower than a narrow one for some type shows at once, on any machine.
//
// Method: per type one weight of --mib MiB (rows x --cols, 64 distinct quantised rows repeated:
// far beyond the last-level cache, so every pass reads it from DRAM); for each rep, every table
// runs one pass in turn (interleaved, so load from other processes hits the tables alike); the
// median of --reps passes per table. With -t 1 a pass is timed by the thread's CPU time (robust when
// other processes share the machine), with more threads by wall time. --json prints one JSON line per type instead of the table.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cli_common.h"
#include "core/aligned_buffer.h"
#include "core/error.h"
#include "core/tensor_view.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"
#include "kernels/ops.h"
#include "kernels/packed_weights.h"

namespace kvs::cli {
namespace {

struct KernelsOptions {
  int threads = 0;  // 0: every core
  int mib = 128;
  int cols = 2048;
  int reps = 5;
  std::string types;  // comma-separated; empty: every weight type
  bool generic = false;
  bool json = false;
};

constexpr DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,   DType::Q4_0,
                               DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::Q2_K,
                               DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K,   DType::IQ4_XS};

// The tables this CPU can call into, ignoring KVS_NO_AVX512 / KVS_FORCE_GENERIC (they pick the
// active table only); the portable one only with --generic (it is 5-20x slower).
std::vector<const kernels::KernelTable*> runnable_tables(bool with_generic) {
  const kernels::CpuFeatures& f = kernels::cpu_features();
  std::vector<const kernels::KernelTable*> ts;
  if (with_generic) ts.push_back(&kernels::generic_kernels());
  if (f.avx2 && f.fma && f.f16c) ts.push_back(&kernels::avx2_kernels());
  if (f.avx2 && f.fma && f.f16c && f.avx512f && f.avx512bw && f.avx512dq && f.avx512vl && f.avx512vnni && f.os_avx512)
    ts.push_back(&kernels::avx512_kernels());
  if (ts.empty()) ts.push_back(&kernels::generic_kernels());
  return ts;
}

bool same_name(std::string_view a, std::string_view b) {  // case-insensitive: q4_k or Q4_K
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

std::vector<DType> parse_types(const std::string& s) {
  if (s.empty()) return {std::begin(kAllTypes), std::end(kAllTypes)};
  std::vector<DType> out;
  size_t p = 0;
  while (p <= s.size()) {
    const size_t q = std::min(s.find(',', p), s.size());
    const std::string name = s.substr(p, q - p);
    bool found = false;
    for (DType t : kAllTypes)
      if (same_name(dtype_name(t), name)) {
        out.push_back(t);
        found = true;
      }
    if (!found) {
      std::string names;
      for (DType t : kAllTypes) names += fmt::format("{}{}", names.empty() ? "" : ", ", dtype_name(t));
      fail("--types: unknown weight type '{}' (one of {}, any case)", name, names);
    }
    p = q + 1;
  }
  return out;
}

// Seconds fn takes: with one thread (matmul then runs on this thread) the thread's CPU time, robust
// when other processes share the cores; with more, wall time (the pool's threads spin).
template <typename Fn>
double timed_seconds(int nth, const Fn& fn) {
  if (nth > 1) {
    Timer t;
    fn();
    return t.seconds();
  }
  timespec a{}, b{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  fn();
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  return static_cast<double>(b.tv_sec - a.tv_sec) + 1e-9 * static_cast<double>(b.tv_nsec - a.tv_nsec);
}

// The read bound, as bench-memory measures it: each thread sums its share of a 256 MiB buffer (timed
// as the mat-vecs are).
double measure_read_gbps(ThreadPool& pool, int reps) {
  const int64_t n = int64_t{256} << 18;
  AlignedBuffer<float> buf(static_cast<size_t>(n));
  pool.parallel_for(n, [&](int64_t b, int64_t e) { std::fill(buf.data() + b, buf.data() + e, 1.0f); });
  std::vector<double> gbs;
  std::vector<float> sink(static_cast<size_t>(pool.size()), 0.0f);
  for (int r = 0; r <= reps; ++r) {
    const double s = timed_seconds(pool.size(), [&] {
      pool.run([&](int ith, int n_th) {
        const auto [b, e] = ThreadPool::split(n, ith, n_th);
        sink[static_cast<size_t>(ith)] += kernels::dot_f32(buf.data() + b, buf.data() + b, e - b);
      });
    });
    if (r > 0) gbs.push_back(static_cast<double>(n) * sizeof(float) / s * 1e-9);
  }
  std::sort(gbs.begin(), gbs.end());
  return gbs[gbs.size() / 2];
}

struct Weight {
  AlignedBuffer<uint8_t> bytes;  // [rows][row_bytes]
  TensorView view;
};

void make_weight(DType t, int64_t cols, int64_t target_bytes, Weight& w) {
  const size_t rb = dtype_row_bytes(t, cols);
  const int64_t rows = std::max<int64_t>(64, target_bytes / static_cast<int64_t>(rb) / 64 * 64);
  w.bytes.resize(rb * static_cast<size_t>(rows));
  std::mt19937 rng(42);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> f(static_cast<size_t>(cols));
  for (int64_t r = 0; r < 64; ++r) {
    for (auto& v : f) v = d(rng);
    kernels::quantize_row(t, f.data(), w.bytes.data() + r * rb, cols);
  }
  for (int64_t r = 64; r < rows; ++r) std::memcpy(w.bytes.data() + r * rb, w.bytes.data() + (r % 64) * rb, rb);
  w.view.name = "bench";
  w.view.type = t;
  w.view.n_dims = 2;
  w.view.ne = {cols, rows, 1, 1};
  w.view.data = w.bytes.data();
  w.view.nbytes = rb * static_cast<size_t>(rows);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run_bench_kernels(KernelsOptions o) {
  require_int("--mib", o.mib, 1, 1 << 16);
  require_int("--reps", o.reps, 1, 1000);
  require_int("--cols", o.cols, 256, 1 << 20);
  if (o.cols % 256 != 0) fail("--cols must be a multiple of 256 (every weight type's block size divides it), got {}", o.cols);
  const std::vector<DType> types = parse_types(o.types);
  const int nth = capped_threads("-t", o.threads);
  ThreadPool pool(nth);
  const auto tables = runnable_tables(o.generic);
  const double bound = measure_read_gbps(pool, o.reps);
  if (!o.json) {
    fmt::print("decode mat-vec (1 token), {} thread{}, {} MiB per weight, {} columns, median of {} interleaved passes\n",
               nth, nth == 1 ? "" : "s", o.mib, o.cols, o.reps);
    fmt::print("read bound (bench-memory's loop, {} kernels): {:.1f} GB/s; cells: GB/s (share of the bound)\n\n",
               kernels::active_kernels().name, bound);
    std::string head = "| type |", rule = "|---|";
    for (const auto* k : tables) {
      head += fmt::format(" {} |", k->name);
      rule += "---:|";
    }
    fmt::print("{} fastest |\n{}---|\n", head, rule);
  }
  std::vector<float> x(static_cast<size_t>(o.cols));
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (auto& v : x) v = d(rng);
  kernels::MatmulConfig cfg;
  cfg.path = kernels::MatmulPath::Decode;
  kernels::MatmulScratch scratch;
  for (DType t : types) {
    Weight w;
    make_weight(t, o.cols, int64_t{o.mib} << 20, w);
    const bool has_packed_layout = t == DType::Q4_0 || t == DType::Q8_0;
    std::shared_ptr<kernels::PackedWeights> packed;
    if (has_packed_layout) packed = kernels::pack_weights(t, w.view.data, w.view.rows(), w.view.cols());
    std::vector<float> y(static_cast<size_t>(w.view.rows()));
    std::vector<std::vector<double>> gbs(tables.size());
    for (int r = 0; r <= o.reps; ++r) {  // pass 0 warms up
      for (size_t i = 0; i < tables.size(); ++i) {
        const kernels::KernelTable& k = *tables[i];
        const bool use_packed = packed && kernels::packed_tile_fn(k, t);
        if (use_packed) kernels::register_packed(w.view.data, packed);
        const double s = timed_seconds(nth, [&] { kernels::matmul_with(k, cfg, w.view, x.data(), 1, y.data(), pool, scratch); });
        if (use_packed) kernels::unregister_packed(w.view.data);
        // A packed pass reads the packed copy: its bytes (within 1% of the GGUF ones) are counted.
        const double bytes = use_packed ? static_cast<double>(kernels::packed_bytes(t, w.view.rows(), w.view.cols()))
                                        : static_cast<double>(w.view.nbytes);
        if (r > 0) gbs[i].push_back(bytes / s * 1e-9);
      }
    }
    std::vector<double> med;
    for (const auto& g : gbs) med.push_back(median(g));
    const size_t best = static_cast<size_t>(std::max_element(med.begin(), med.end()) - med.begin());
    if (o.json) {
      nlohmann::json j = {{"type", std::string(dtype_name(t))}, {"threads", nth},   {"bytes", w.view.nbytes},
                          {"cols", o.cols},        {"reps", o.reps},   {"read_gbps_median", bound},
                          {"fastest", tables[best]->name}};
      for (size_t i = 0; i < tables.size(); ++i) {
        j["tables"][tables[i]->name] = {{"gbps_median", med[i]},
                                        {"share_of_bound", med[i] / bound},
                                        {"packed", packed && kernels::packed_tile_fn(*tables[i], t) != nullptr},
                                        {"gbps", gbs[i]}};
      }
      fmt::print("{}\n", j.dump());
    } else {
      std::string line = fmt::format("| {} |", dtype_name(t));
      for (size_t i = 0; i < tables.size(); ++i)
        line += fmt::format(" {:.1f} ({:.0f}%){} |", med[i], 100.0 * med[i] / bound,
                            packed && kernels::packed_tile_fn(*tables[i], t) ? " packed" : "");
      fmt::print("{} {} |\n", line, tables[best]->name);
    }
    std::fflush(stdout);
  }
}

}  // namespace

void register_bench_kernels(CLI::App& app) {
  auto o = std::make_shared<KernelsOptions>();
  CLI::App* cmd = app.add_subcommand(
      "bench-kernels", "every weight type's decode mat-vec on every kernel table this CPU runs, in GB/s beside the read bound");
  cmd->add_option("-t,--threads", o->threads, "threads (default 0: every core)");
  cmd->add_option("--mib", o->mib, "weight bytes per type in MiB (default 128: beyond any last-level cache; 1: in L2, the kernels' compute speed)");
  cmd->add_option("--cols", o->cols, "row length, a multiple of 256 (default 2048: Llama-3.2-1B's hidden size)");
  cmd->add_option("--reps", o->reps, "timed passes per table and type (default 5)");
  cmd->add_option("--types", o->types, "comma-separated weight types, e.g. Q4_K,Q6_K (default: every weight type)");
  cmd->add_flag("--generic", o->generic, "also run the portable table (slow)");
  cmd->add_flag("--json", o->json, "one JSON line per type: tables.<name>.gbps_median, share_of_bound, read_gbps_median");
  cmd->callback([o] { run_bench_kernels(*o); });
}

}  // namespace kvs::cli
