// Kernel micro-benchmarks: memory streaming baseline, vec_dot per type (in cache), matmul decode
// (n_tok = 1) and prefill (n_tok = 512) for the SmolLM2-135M shapes, the decode/prefill
// crossover, prefill BLAS threading modes, raw OpenBLAS sgemm as the prefill roofline, and a 16-token
// step's weight stream (Kernels/LayerStack).
// Counters: GB/s = weight bytes streamed per second, GFLOP/s = 2 * rows * cols * n_tok per second.
//
// Shapes are rows x cols of W (y = x W^T, cols = input features):
//   576x1536 (ffn_down), 1536x576 (ffn_gate/up), 49152x576 (output / tied embeddings), and for
//   decode 49152x1536 (a DRAM-resident matrix the K-quants can represent).
// Run: build-kern/benches/kvs_bench --benchmark_filter='Kernels/' (see BENCHMARKS.md).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/matmul.h"
#include "kernels/packed_weights.h"
#include "kernels/matmul_internal.h"
#include "kernels/ops.h"

namespace kvs::kernels {
namespace {

constexpr DType kTypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                            DType::Q4_0, DType::Q4_K, DType::Q6_K};

ThreadPool& pool(int n) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[n];
  if (!p) p = std::make_unique<ThreadPool>(n);
  return *p;
}

std::vector<float> randn(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// A rows x cols weight of type t: 64 distinct quantised rows repeated (fast to build, realistic
// values), cached per (type, shape) for the whole run.
struct BenchWeight {
  AlignedBuffer<uint8_t> bytes;  // [rows][row_bytes]
  TensorView view;
};

const BenchWeight& weight(DType t, int64_t rows, int64_t cols) {
  static std::map<std::tuple<int, int64_t, int64_t>, std::unique_ptr<BenchWeight>> cache;
  auto& w = cache[{static_cast<int>(t), rows, cols}];
  if (w) return *w;
  w = std::make_unique<BenchWeight>();
  const size_t rb = dtype_row_bytes(t, cols);
  w->bytes.resize(rb * rows);
  const int64_t distinct = std::min<int64_t>(64, rows);
  const auto f = randn(distinct * cols, 42);
  for (int64_t r = 0; r < distinct; ++r) quantize_row(t, f.data() + r * cols, w->bytes.data() + r * rb, cols);
  for (int64_t r = distinct; r < rows; ++r)
    std::memcpy(w->bytes.data() + r * rb, w->bytes.data() + (r % distinct) * rb, rb);
  w->view.name = "bench";
  w->view.type = t;
  w->view.n_dims = 2;
  w->view.ne = {cols, rows, 1, 1};
  w->view.data = w->bytes.data();
  w->view.nbytes = rb * rows;
  return *w;
}

void set_counters(benchmark::State& st, double bytes, double flops) {
  st.counters["GB/s"] = benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- memory bandwidth baseline: sum a 256 MiB buffer -------------------------------------------
void BM_MemStream(benchmark::State& st) {
  const int nth = static_cast<int>(st.range(0));
  const int64_t n = int64_t{64} << 20;  // floats
  static AlignedBuffer<float> buf(n);
  static bool init = [] {
    for (int64_t i = 0; i < (int64_t{64} << 20); ++i) buf[i] = 1.0f;
    return true;
  }();
  (void)init;
  float sink[16] = {};
  for (auto _ : st) {
    pool(nth).parallel_for(n, [&](int64_t b, int64_t e) {
      const float s = dot_f32(buf.data() + b, buf.data() + b, e - b);
      sink[b * 16 / n] += s;
    });
    benchmark::DoNotOptimize(sink);
  }
  set_counters(st, double(n) * 4, 0);
}
BENCHMARK(BM_MemStream)->Name("Kernels/MemStream/threads")->Arg(1)->MinTime(0.5);
BENCHMARK(BM_MemStream)->Name("Kernels/MemStream/threads")->Arg(2)->UseRealTime()->MinTime(0.5);

// ---- cost of one empty pool dispatch (what matmul's min_parallel_macs must amortise) ----------
void BM_PoolDispatch(benchmark::State& st) {
  ThreadPool& p = pool(static_cast<int>(st.range(0)));
  std::atomic<int> sink{0};
  for (auto _ : st) p.run([&](int ith, int) { sink.fetch_add(ith, std::memory_order_relaxed); });
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_PoolDispatch)->Name("Kernels/PoolDispatch/threads")->Arg(2)->UseRealTime();

// ---- vec_dot per type, working set in L2 -------------------------------------------------------
void BM_VecDot(benchmark::State& st) {
  const DType t = static_cast<DType>(st.range(0));
  const bool generic = st.range(1) != 0;
  const KernelTable& k = generic ? generic_kernels() : active_kernels();
  const int64_t n = 4096, rows = 32;
  const BenchWeight& w = weight(t, rows, n);
  const auto x = randn(n, 1);
  AlignedBuffer<uint8_t> act(act_row_bytes(t, n));
  prepare_act(t, x.data(), act.data(), n);
  const DotFn dot = dot_fn(k, t);
  for (auto _ : st) {
    float s = 0;
    for (int64_t r = 0; r < rows; ++r) s += dot(w.view.row(r), act.data(), n);
    benchmark::DoNotOptimize(s);
  }
  st.SetLabel(std::string(dtype_name(t)) + (generic ? " generic" : " avx2"));
  set_counters(st, double(w.view.row_bytes()) * rows, 2.0 * n * rows);
}
void vec_dot_args(benchmark::internal::Benchmark* b) {
  for (int g : {0, 1})
    for (DType t : kTypes) b->Args({static_cast<int64_t>(t), g});
}
BENCHMARK(BM_VecDot)->Name("Kernels/VecDot/type/generic")->Apply(vec_dot_args);

// ---- dequantise to F32 (the prefill path's per-tile cost), working set in L2 ------------------
void BM_Dequant(benchmark::State& st) {
  const DType t = static_cast<DType>(st.range(0));
  const int64_t n = 4096, rows = 32;
  const BenchWeight& w = weight(t, rows, n);
  std::vector<float> out(n);
  for (auto _ : st) {
    for (int64_t r = 0; r < rows; ++r) dequantize_row(t, w.view.row(r), out.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  st.SetLabel(std::string(dtype_name(t)));
  // GB/s here counts the F32 output written.
  set_counters(st, 4.0 * n * rows, 0);
}
BENCHMARK(BM_Dequant)->Name("Kernels/DequantF32Out/type")->DenseRange(0, 0)->Arg(1)->Arg(30)->Arg(8)->Arg(2)->Arg(12)->Arg(14);

// ---- matmul -------------------------------------------------------------------------------------
// Args: type, rows, cols, n_tok, threads, path (0 auto, 1 decode, 2 prefill), blas mode.
void BM_Matmul(benchmark::State& st) {
  const DType t = static_cast<DType>(st.range(0));
  const int64_t rows = st.range(1), cols = st.range(2), n_tok = st.range(3);
  const int nth = static_cast<int>(st.range(4));
  MatmulConfig cfg;
  const bool packed = st.range(5) == 3;  // path 3: the weight repacked and registered (packed tile)
  cfg.path = packed ? MatmulPath::Auto : static_cast<MatmulPath>(st.range(5));
  cfg.blas = static_cast<BlasThreading>(st.range(6));
  const BenchWeight& w = weight(t, rows, cols);
  if (packed) register_packed(w.view.data, pack_weights(t, w.view.data, rows, cols));
  const auto x = randn(n_tok * cols, 2);
  std::vector<float> y(n_tok * rows);
  MatmulScratch scratch;
  for (auto _ : st) {
    matmul_with(active_kernels(), cfg, w.view, x.data(), n_tok, y.data(), pool(nth), scratch);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  if (packed) unregister_packed(w.view.data);
  // (Without the type's packed tile in the active table, matmul ignores the registration.)
  const bool ran_packed = packed && packed_tile_fn(active_kernels(), t) != nullptr;
  st.SetLabel(std::string(dtype_name(t)) + (ran_packed ? " packed" : packed ? " (no packed tile: plain)" : ""));
  set_counters(st, double(w.view.nbytes), 2.0 * rows * cols * n_tok);
}

const int64_t kShapes[][2] = {{576, 1536}, {1536, 576}, {49152, 576}};

// K-quants need cols % 256 == 0: 576-wide rows are not representable (llama.cpp falls back to
// another type for such tensors), so those shapes are skipped for Q4_K/Q6_K.
bool valid_shape(DType t, int64_t cols) { return cols % dtype_info(t).block_size == 0; }

// Single-thread variants are timed by CPU time (robust when other processes share the machine),
// 2-thread variants by wall time (the pool's threads spin, so CPU time would overcount).
// Decode also gets a DRAM-resident shape the K-quants can represent (49152x1536: 42-62 MB).
template <int64_t kThreads>
void decode_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "rows", "cols", "n_tok", "thr", "path", "blas"});
  for (DType t : kTypes) {
    for (const auto& s : kShapes)
      if (valid_shape(t, s[1])) b->Args({static_cast<int64_t>(t), s[0], s[1], 1, kThreads, 0, 0});
    if (t == DType::Q8_0 || t == DType::Q4_K || t == DType::Q6_K)
      b->Args({static_cast<int64_t>(t), 49152, 1536, 1, kThreads, 0, 0});
  }
}
BENCHMARK(BM_Matmul)->Name("Kernels/MatmulDecode")->Apply(decode_args<1>);
BENCHMARK(BM_Matmul)->Name("Kernels/MatmulDecode")->Apply(decode_args<2>)->UseRealTime();

template <int64_t kThreads>
void prefill_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "rows", "cols", "n_tok", "thr", "path", "blas"});
  for (DType t : kTypes)
    for (const auto& s : kShapes)
      if (valid_shape(t, s[1])) b->Args({static_cast<int64_t>(t), s[0], s[1], 512, kThreads, 0, 0});
}
BENCHMARK(BM_Matmul)->Name("Kernels/MatmulPrefill")->Apply(prefill_args<1>);
BENCHMARK(BM_Matmul)->Name("Kernels/MatmulPrefill")->Apply(prefill_args<2>)->UseRealTime();

// Prefill threading: our pool with single-threaded OpenBLAS vs one multithreaded sgemm.
void blas_mode_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "rows", "cols", "n_tok", "thr", "path", "blas"});
  for (DType t : {DType::F32, DType::Q8_0, DType::Q4_K})
    for (const auto& s : kShapes)
      for (int mode : {0, 1})
        if (valid_shape(t, s[1])) b->Args({static_cast<int64_t>(t), s[0], s[1], 512, 2, 2, mode});
}
BENCHMARK(BM_Matmul)->Name("Kernels/PrefillBlasMode")->Apply(blas_mode_args)->UseRealTime();

// Decode/prefill crossover on 576x1536 (valid for every type): both paths forced, n_tok 1..512.
template <int64_t kThreads>
void crossover_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "rows", "cols", "n_tok", "thr", "path", "blas"});
  for (DType t : kTypes)
    for (int64_t n_tok : {1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 512})
      for (int path : {1, 2}) b->Args({static_cast<int64_t>(t), 576, 1536, n_tok, kThreads, path, 0});
}
BENCHMARK(BM_Matmul)->Name("Kernels/Crossover")->Apply(crossover_args<1>);
BENCHMARK(BM_Matmul)->Name("Kernels/Crossover")->Apply(crossover_args<2>)->UseRealTime();

// Repacked Q4_0 / Q8_0 (path 3, kernels/packed_weights.h) against their plain dot tiles (path 1)
// on the SmolLM2-135M shapes, one token (decode) and 16 (a 16-sequence batched decode step).
template <int64_t kThreads>
void packed_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "rows", "cols", "n_tok", "thr", "path", "blas"});
  for (DType t : {DType::Q8_0, DType::Q4_0})
    for (const auto& s : kShapes)
      for (int64_t n_tok : {1, 16})
        for (int path : {1, 3}) b->Args({static_cast<int64_t>(t), s[0], s[1], n_tok, kThreads, path, 0});
}
BENCHMARK(BM_Matmul)->Name("Kernels/Packed")->Apply(packed_args<1>);
BENCHMARK(BM_Matmul)->Name("Kernels/Packed")->Apply(packed_args<2>)->UseRealTime();

// A 16-sequence decode step's weight stream, by itself: the SmolLM2-135M shape's per-layer matrices
// (W_o 576x576, ffn_gate / ffn_up 1536x576, ffn_down 576x1536) x 30 layers, Q8_0, repacked into one
// block as the model's are (93 MB: from DRAM), run back to back for 16 tokens as the forward runs them;
// against three 49152x576 matrices (the LM head's shape, 90 MB) that stream long. The gap is what
// the many short matrices cost the packed tile (BENCHMARKS.md, issue 25). args: threads, shape
// (0: the layers, 1: the LM-head-shaped matrices).
void BM_LayerStack(benchmark::State& st) {
  const int nth = static_cast<int>(st.range(0));
  const bool long_rows = st.range(1) == 1;
  struct Matrix {
    AlignedBuffer<uint8_t> bytes;
    TensorView view;
  };
  std::vector<std::unique_ptr<Matrix>> ms;
  auto add = [&](int64_t rows, int64_t cols) {
    const BenchWeight& src = weight(DType::Q8_0, rows, cols);
    auto m = std::make_unique<Matrix>();
    m->bytes.resize(src.view.nbytes);
    std::memcpy(m->bytes.data(), src.bytes.data(), src.view.nbytes);
    m->view = src.view;
    m->view.data = m->bytes.data();
    ms.push_back(std::move(m));
  };
  if (long_rows) {
    for (int i = 0; i < 3; ++i) add(49152, 576);
  } else {
    for (int l = 0; l < 30; ++l) {
      add(576, 576);
      add(1536, 576);
      add(1536, 576);
      add(576, 1536);
    }
  }
  // Packed into one block in this order, as model/repack.cpp packs a model's matrices (huge pages).
  std::vector<PackSource> sources;
  for (const auto& m : ms) sources.push_back({DType::Q8_0, m->view.data, m->view.rows(), m->view.cols()});
  pack_weights_in_one_block(sources, [&](size_t i, std::shared_ptr<PackedWeights> p) {
    register_packed(ms[i]->view.data, std::move(p));
  });
  constexpr int kTokens = 16;
  const auto x = randn(kTokens * 1536, 2);  // [16][up to 1536]
  std::vector<float> y(kTokens * 49152);    // [16][up to 49152]
  MatmulConfig cfg;
  MatmulScratch scratch;
  double bytes = 0;
  for (const auto& m : ms) bytes += static_cast<double>(m->view.nbytes);
  for (auto _ : st) {
    for (const auto& m : ms) matmul_with(active_kernels(), cfg, m->view, x.data(), kTokens, y.data(), pool(nth), scratch);
    benchmark::ClobberMemory();
  }
  for (const auto& m : ms) unregister_packed(m->view.data);
  set_counters(st, bytes, 2.0 * kTokens * bytes / 1.0625);  // Q8_0: 34 bytes a 32 weights
}
BENCHMARK(BM_LayerStack)
    ->Name("Kernels/LayerStack")
    ->ArgNames({"thr", "long_rows"})
    ->ArgsProduct({{1, 2}, {0, 1}})
    ->UseRealTime();

// Llama-3.2-1B shapes (wq/wo 2048x2048, ffn_gate/up 8192x2048, ffn_down 2048x8192) at a 512-token
// prefill, both paths forced: the activations (1-4 MB per token block of 512) no longer fit L2.
template <int64_t kThreads>
void prefill_1b_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"type", "rows", "cols", "n_tok", "thr", "path", "blas"});
  for (DType t : kTypes)
    for (const auto& s : {std::pair<int64_t, int64_t>{2048, 2048}, {8192, 2048}, {2048, 8192}})
      for (int path : {1, 2}) b->Args({static_cast<int64_t>(t), s.first, s.second, 512, kThreads, path, 0});
}
BENCHMARK(BM_Matmul)->Name("Kernels/Prefill1B")->Apply(prefill_1b_args<1>);
BENCHMARK(BM_Matmul)->Name("Kernels/Prefill1B")->Apply(prefill_1b_args<2>)->UseRealTime();

// ---- raw sgemm roofline: C[512][rows] = X[512][cols] . W^T -------------------------------------
void BM_Sgemm(benchmark::State& st) {
  const int64_t rows = st.range(0), cols = st.range(1), n_tok = st.range(2);
  const int thr = static_cast<int>(st.range(3));
  const BenchWeight& w = weight(DType::F32, rows, cols);
  const auto x = randn(n_tok * cols, 3);
  std::vector<float> y(n_tok * rows);
  openblas_set_num_threads(thr);
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n_tok), static_cast<int>(rows),
                static_cast<int>(cols), 1.0f, x.data(), static_cast<int>(cols), w.view.f32(),
                static_cast<int>(cols), 0.0f, y.data(), static_cast<int>(rows));
    benchmark::ClobberMemory();
  }
  openblas_set_num_threads(1);
  set_counters(st, double(w.view.nbytes), 2.0 * rows * cols * n_tok);
}
BENCHMARK(BM_Sgemm)
    ->Name("Kernels/OpenBlasSgemm")
    ->ArgNames({"rows", "cols", "n_tok", "blas_thr"})
    ->Args({576, 1536, 512, 1})
    ->Args({1536, 576, 512, 1})
    ->Args({49152, 576, 512, 1});
BENCHMARK(BM_Sgemm)
    ->Name("Kernels/OpenBlasSgemm")
    ->ArgNames({"rows", "cols", "n_tok", "blas_thr"})
    ->Args({576, 1536, 512, 2})
    ->Args({1536, 576, 512, 2})
    ->Args({49152, 576, 512, 2})
    ->UseRealTime();

}  // namespace
}  // namespace kvs::kernels
