// y[t][r] = sum_c x[t][c] * W[r][c] for a weight W of any computable type.
//
// Dot tiles ("decode" path; n_tok below the per-type, per-table crossover of
// default_decode_max_tok, which is every batch for the AVX-512 table unless OpenBLAS runs AVX-512
// too): the activations are converted once into W's activation format (F32 / Q8_0 / Q8_K), the
// weight rows are handed out in chunks of contiguous rows to the pool threads, and each thread
// walks its chunks with the dot-tile kernel (4 rows x the tokens of a block per call). Tokens are
// blocked so that a block's activations stay in L2 while the chunk's rows pass over them; with
// few tokens (decode) there is one block and every weight byte is streamed from memory once.
//
// Prefill: BLAS sgemm. F32 weights are passed to sgemm in place, one call per thread on its
// contiguous block of rows; other types are dequantised, tile_rows rows at a time, into a
// per-thread F32 buffer that sgemm then consumes. By default OpenBLAS runs single-threaded and
// every pool thread calls sgemm on its own rows (BlasThreading::PoolPerThread), which beat one
// multithreaded OpenBLAS call (docs/benchmarks/kernels-first-tables.md).
//
// Dimension legend: n_tok = activation rows (tokens), rows/cols = W's shape (cols = ne[0] =
// input features), ldy = output row stride (>= rows), tr = weight rows per prefill tile.
#include <cblas.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <limits>
#include <memory>
#include <span>
#include <string>

#include "core/error.h"
#include "kernels/matmul.h"
#include "kernels/matmul_internal.h"
#include "kernels/ops.h"
#include "kernels/packed_weights.h"
#include "kernels/ref/ref.h"

namespace kvs::kernels {
namespace {

// Weight rows handed to one dot-tile call in decode.
constexpr int kDecodeRowBlock = 4;
// Dot-tile path with many tokens: activation bytes per token block (L2-resident) and the most
// weight bytes per row chunk.
constexpr int64_t kActBlockBytes = 256 << 10;
constexpr int64_t kWeightChunkBytes = 512 << 10;
// Default size of a per-thread dequantised weight tile in prefill.
constexpr int64_t kDefaultTileBytes = 1 << 20;

// OpenBLAS's thread count is process-global; matmul is called from one thread at a time (the
// pool's caller), and a read of the current value is cheap, so set it only when it differs.
void set_blas_threads(int n) {
  if (openblas_get_num_threads() != n) openblas_set_num_threads(n);
}

// Runs fn(ith, nth) on the pool, or inline on the caller when the work is too small to split.
// (A pool dispatch costs a few microseconds.)
template <typename Fn>
void run_parallel(ThreadPool& pool, const MatmulConfig& cfg, int64_t macs, const Fn& fn) {
  if (pool.size() == 1 || macs < cfg.min_parallel_macs) {
    fn(0, 1);
    return;
  }
  pool.run([&fn](int ith, int nth) { fn(ith, nth); });
}

// Hands out [begin, end) chunks of n items to whichever thread asks next, so a thread that shares
// its core with another process does less of the work instead of holding everyone up.
class ChunkQueue {
 public:
  ChunkQueue(int64_t n, int64_t chunk) : n_(n), chunk_(chunk) {}
  bool next(int64_t* b, int64_t* e) {
    const int64_t s = next_.fetch_add(chunk_, std::memory_order_relaxed);
    if (s >= n_) return false;
    *b = s;
    *e = std::min(n_, s + chunk_);
    return true;
  }

 private:
  std::atomic<int64_t> next_{0};
  const int64_t n_, chunk_;
};

// The dot-tile paths prepare the activations inside the section that multiplies them: each
// thread converts its share of the n_tok rows, then waits until every thread has (the tiles read
// all of them). Before, the conversion was a parallel section of its own, one more dispatch and
// join per matmul (~2 us each, 120 a 16-sequence decode step of the SmolLM2-135M shape).
// Inline (nth = 1) it converts them all.
template <typename Quantize>
void quantize_share_then_wait(int64_t n_tok, int ith, int nth, const Quantize& quantize,
                              ThreadPool::SectionBarrier& prepared) {
  const auto [b, e] = ThreadPool::split(n_tok, ith, nth);
  if (b < e) quantize(b, e);
  prepared.arrive_and_wait(nth);
}

// C[n_tok][n] (ldc) = X[n_tok][cols] . B[n][cols]^T
inline void sgemm_xbt(int64_t n_tok, int64_t n, int64_t cols, const float* x, const float* b,
                      float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n_tok), static_cast<int>(n),
              static_cast<int>(cols), 1.0f, x, static_cast<int>(cols), b, static_cast<int>(cols), 0.0f,
              c, static_cast<int>(ldc));
}

void matmul_decode(const KernelTable& k, const MatmulConfig& cfg, const TensorView& W,
                   const float* x, int64_t n_tok, float* y, int64_t ldy, ThreadPool& pool,
                   MatmulScratch& scratch) {
  const int64_t rows = W.rows(), cols = W.cols();
  const QuantFn quant = act_quant_fn(k, W.type);
  const uint8_t* act = reinterpret_cast<const uint8_t*>(x);  // [n_tok][act_stride bytes]
  size_t act_stride = static_cast<size_t>(cols) * sizeof(float);
  uint8_t* qa = nullptr;  // the prepared activations, [n_tok][act_stride bytes]; none for F32 ones
  if (quant) {
    act_stride = ref::act_row_bytes(W.type, cols);
    scratch.act.resize(act_stride * n_tok);
    qa = scratch.act.data();
    act = qa;
  }
  const DotTileFn tile = dot_tile_fn(k, W.type);
  const uint8_t* w = static_cast<const uint8_t*>(W.data);  // [rows][row_bytes]
  const size_t w_stride = W.row_bytes();
  // Token blocks whose activations stay in L2 while a chunk of rows passes over them; a chunk's
  // weights then stay in L2 (or L3) for the next token block instead of coming from DRAM again.
  const int64_t tb = n_tok <= 4 ? n_tok
                                : std::clamp<int64_t>(kActBlockBytes / static_cast<int64_t>(act_stride) / 4 * 4, 4, n_tok);
  // ~4 chunks per thread, each a multiple of the tile's row block; with several token blocks, at
  // most ~kWeightChunkBytes of weights per chunk.
  int64_t chunk = (rows + 4 * pool.size() - 1) / (4 * pool.size());
  if (tb < n_tok) chunk = std::min<int64_t>(chunk, kWeightChunkBytes / static_cast<int64_t>(w_stride));
  chunk = std::max<int64_t>(16, (chunk + kDecodeRowBlock - 1) / kDecodeRowBlock * kDecodeRowBlock);
  ChunkQueue queue(rows, chunk);
  ThreadPool::SectionBarrier prepared;
  run_parallel(pool, cfg, rows * cols * n_tok, [&](int ith, int nth) {
    if (qa)
      quantize_share_then_wait(n_tok, ith, nth, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) quant(x + t * cols, qa + t * act_stride, cols);
      }, prepared);
    int64_t rb, re;
    while (queue.next(&rb, &re)) {
      for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
        const int nt = static_cast<int>(std::min(tb, n_tok - t0));
        for (int64_t r = rb; r < re; r += kDecodeRowBlock) {
          const int nr = static_cast<int>(std::min<int64_t>(kDecodeRowBlock, re - r));
          tile(w + r * w_stride, w_stride, nr, act + t0 * act_stride, act_stride, nt, cols, y + t0 * ldy + r, ldy);
        }
      }
    }
  });
}

// Q4_0 / Q8_0 weights repacked at load (packed_weights.h), every batch size: the activations are
// prepared once in the packed activation format, chunks of 16-row groups are handed out as in
// matmul_decode, and each chunk meets the token blocks in turn (the packed tile walks its groups
// one by one, up to 8 tokens per pass). Several weights of one packed type over the same
// activations (matmul_shared: a layer's Q, K and V) share the preparation and one parallel
// section: their chunks are handed out from one queue. A row's result does not depend on the
// chunking (a 16-row group is one tile call), so fused or not, the output is the same.
struct PackedJob {
  const PackedWeights* P;
  float* y;
  int64_t ldy;
};

void matmul_packed(const KernelTable& k, const MatmulConfig& cfg, std::span<const PackedJob> jobs, PackedTileFn tile,
                   const float* x, int64_t n_tok, ThreadPool& pool, MatmulScratch& scratch) {
  constexpr size_t kMaxJobs = 4;
  KVS_ASSERT(!jobs.empty() && jobs.size() <= kMaxJobs);
  const PackedWeights& P0 = *jobs[0].P;
  const int64_t cols = P0.cols;
  const int32_t offset = packed_layout(P0.type).offset;
  const size_t act_stride = (act_packed_bytes(cols) + 63) / 64 * 64;
  scratch.act.resize(act_stride * n_tok);
  uint8_t* act = scratch.act.data();  // [n_tok][act_stride bytes]
  auto quantize = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      k.quant_act_q8_0(x + t * cols, act + t * act_stride, cols);
      finish_act_packed(act + t * act_stride, cols, offset);
    }
  };
  const int64_t tb = n_tok <= 8 ? n_tok
                                : std::clamp<int64_t>(kActBlockBytes / static_cast<int64_t>(act_stride) / 8 * 8, 8, n_tok);
  int64_t groups = 0, macs = 0;
  for (const PackedJob& j : jobs) {
    KVS_ASSERT(j.P->type == P0.type && j.P->cols == cols && j.P->group_stride == P0.group_stride);
    groups += j.P->ngroups;
    macs += j.P->rows * cols * n_tok;
  }
  // ~4 chunks per thread over all the jobs' groups; with several token blocks, at most
  // ~kWeightChunkBytes of weights per chunk. Then, once fewer groups are left than 2 such chunks a
  // thread, chunks of a quarter of what is left per thread ("guided", down to one group), so that
  // the threads finish within about a group of each other: with equal chunks the last one ran on
  // alone for half a chunk on average (an LM head's chunk of 3.7 MB at 16 tokens). Chunks never
  // span two jobs.
  int64_t chunk = (groups + 4 * pool.size() - 1) / (4 * pool.size());
  if (tb < n_tok) chunk = std::min<int64_t>(chunk, kWeightChunkBytes / static_cast<int64_t>(P0.group_stride));
  chunk = std::max<int64_t>(1, chunk);
  auto& chunks = scratch.chunks;
  chunks.clear();
  const int64_t share = 2 * static_cast<int64_t>(pool.size());
  int64_t left = groups;
  for (size_t j = 0; j < jobs.size(); ++j)
    for (int64_t g = 0, ng = jobs[j].P->ngroups; g < ng;) {
      const int64_t c = std::min({chunk, std::max<int64_t>(1, (left + share - 1) / share), ng - g});
      chunks.push_back({static_cast<int64_t>(j), g, g + c});
      g += c;
      left -= c;
    }
  ChunkQueue queue(static_cast<int64_t>(chunks.size()), 1);
  ThreadPool::SectionBarrier prepared;
  run_parallel(pool, cfg, macs, [&](int ith, int nth) {
    quantize_share_then_wait(n_tok, ith, nth, quantize, prepared);
    // Each thread takes its next chunk from the queue before running the current one, so that the
    // current one's last group prefetches the next one's first (otherwise every chunk starts on
    // weights straight from DRAM: ~8 chunks per matrix, 4-5 matrices per layer).
    int64_t c, ce;
    bool have = queue.next(&c, &ce);
    for (bool have_next; have; have = have_next) {
      const MatmulScratch::GroupChunk cur = chunks[static_cast<size_t>(c)];
      have_next = queue.next(&c, &ce);
      const uint8_t* next = nullptr;
      if (have_next) {
        const MatmulScratch::GroupChunk& n = chunks[static_cast<size_t>(c)];
        next = jobs[static_cast<size_t>(n.job)].P->group(n.begin);
      }
      const PackedJob& job = jobs[static_cast<size_t>(cur.job)];
      const PackedWeights& P = *job.P;
      const int64_t gb = cur.begin, r0 = gb * kPackRows;
      for (int64_t t0 = 0; t0 < n_tok; t0 += tb) {
        const int nt = static_cast<int>(std::min(tb, n_tok - t0));
        // (With several token blocks only the last one's pass moves on to the next chunk.)
        tile(P.group(gb), P.group_stride, static_cast<int>(cur.end - gb), P.rows - r0, act + t0 * act_stride,
             act_stride, nt, cols, job.y + t0 * job.ldy + r0, job.ldy, t0 + tb >= n_tok ? next : P.group(gb));
      }
    }
  });
}

int64_t prefill_tile_rows(const MatmulConfig& cfg, int64_t cols) {
  if (cfg.tile_rows > 0) return cfg.tile_rows;
  const int64_t bytes = cfg.tile_bytes > 0 ? cfg.tile_bytes : kDefaultTileBytes;
  const int64_t tr = bytes / (cols * static_cast<int64_t>(sizeof(float)));
  return std::max<int64_t>(16, tr / 16 * 16);
}

void matmul_prefill(const KernelTable& k, const MatmulConfig& cfg, const TensorView& W,
                    const float* x, int64_t n_tok, float* y, int64_t ldy, ThreadPool& pool,
                    MatmulScratch& scratch) {
  const int64_t rows = W.rows(), cols = W.cols();
  const DequantFn dequant = dequant_fn(k, W.type);
  const int64_t tr = prefill_tile_rows(cfg, cols);
  const int nth = pool.size();

  if (cfg.blas == BlasThreading::BlasInternal) {
    set_blas_threads(nth);
    if (!dequant) {
      sgemm_xbt(n_tok, rows, cols, x, W.f32(), y, ldy);
      return;
    }
    if (scratch.wtile.empty()) scratch.wtile.resize(1);
    const int64_t big = std::min(rows, tr * nth);
    scratch.wtile[0].resize(static_cast<size_t>(big * cols));
    float* buf = scratch.wtile[0].data();  // [big][cols]
    for (int64_t r0 = 0; r0 < rows; r0 += big) {
      const int64_t n = std::min(big, rows - r0);
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) dequant(W.row(r0 + i), buf + i * cols, cols);
      });
      sgemm_xbt(n_tok, n, cols, x, buf, y + r0, ldy);
    }
    return;
  }

  set_blas_threads(1);
  if (scratch.wtile.size() < static_cast<size_t>(nth)) scratch.wtile.resize(nth);
  if (dequant)
    for (int i = 0; i < nth; ++i) scratch.wtile[i].resize(static_cast<size_t>(std::min(tr, rows) * cols));

  if (!dequant) {  // F32: one sgemm per thread on its contiguous block (sgemm packs X per call)
    run_parallel(pool, cfg, rows * cols * n_tok, [&](int ith, int nth_run) {
      const auto [rb, re] = ThreadPool::split(rows, ith, nth_run);
      if (rb < re) sgemm_xbt(n_tok, re - rb, cols, x, W.f32() + rb * cols, y + rb, ldy);
    });
    return;
  }
  ChunkQueue queue(rows, tr);  // one dequantised tile + sgemm per chunk
  run_parallel(pool, cfg, rows * cols * n_tok, [&](int ith, int) {
    float* buf = scratch.wtile[ith].data();  // [tr][cols]
    int64_t r, re;
    while (queue.next(&r, &re)) {
      for (int64_t i = r; i < re; ++i) dequant(W.row(i), buf + (i - r) * cols, cols);
      sgemm_xbt(n_tok, re - r, cols, x, buf, y + r, ldy);
    }
  });
}

}  // namespace

bool blas_runs_avx512() {
  static const bool on = [] {
    std::string c = blas_core_name();
    for (char& ch : c) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (const char* n : {"skylakex", "cooperlake", "sapphirerapids"})
      if (c.find(n) != std::string::npos) return true;
    return false;
  }();
  return on;
}

// Measured on the 2-core EPYC (Zen 5), one thread, CPU time (Kernels/Crossover and
// Kernels/Prefill1B in benches/kernels_bench.cpp; tables in docs/benchmarks/kernels-first-tables.md).
// AVX2 table, OpenBLAS Haswell kernels: float weights: sgemm wins from 8-12 (F32) / 12-16 (F16,
// BF16) tokens. Quantised weights: the int8 dot tiles run at 90-118 GFLOP/s, as fast as sgemm
// (~110) plus its dequantisation, so decode stays ahead up to 48-128 tokens; where the two are
// within a few percent we switch to sgemm, which multiplies unquantised activations.
// AVX-512 table (VNNI tiles, 4 rows x 4 tokens): 150-230 GFLOP/s for the quantised types and
// 130-190 for F16/BF16 on the Llama-3.2-1B shapes, so with AVX2-class sgemm (~110) the tiles win
// at every batch size. With AVX-512 sgemm (~200-230 for F32) the tiles still win for Q8_0, Q4_0
// and Q6_K (and for 8192-column rows, where dequantised tiles are short), not for F32/F16/BF16/Q4_K.
int64_t default_decode_max_tok(const KernelTable& k, DType wtype) {
  constexpr int64_t kAlways = std::numeric_limits<int64_t>::max();
  if (k.wide_tiles) {
    if (!blas_runs_avx512()) return kAlways;
    if (wtype == DType::Q8_0 || wtype == DType::Q4_0 || wtype == DType::Q6_K) return kAlways;
  }
  switch (wtype) {
    case DType::F32: return 10;
    case DType::F16:
    case DType::BF16: return 13;
    case DType::Q4_0: return 48;
    case DType::Q8_0: return 64;
    case DType::Q4_K:
    case DType::Q6_K: return 128;
    // Not measured separately: the 32-element formats take Q4_0's crossover, the 256-element
    // ones Q4_K's (their AVX2 tiles have the same structure, a little more unpacking per block).
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL: return 48;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q5_K:
    case DType::IQ4_XS: return 128;
    default: return 8;
  }
}

namespace {
// W's repacked copy when matmul runs it (registered by the model loader for a type whose packed
// tile the table has, and the path not forced to sgemm — which reads the original bytes); else null.
std::shared_ptr<const PackedWeights> usable_packed(const KernelTable& k, const MatmulConfig& cfg, const TensorView& W) {
  if (cfg.path == MatmulPath::Prefill || !packed_tile_fn(k, W.type)) return nullptr;
  auto packed = find_packed(W.data, W.rows(), W.cols());
  return packed && packed->type == W.type ? packed : nullptr;
}
}  // namespace

void matmul_with(const KernelTable& k, const MatmulConfig& cfg, const TensorView& W,
                 const float* x, int64_t n_tok, float* y, ThreadPool& pool,
                 MatmulScratch& scratch, int64_t ldy) {
  if (!dtype_computable(W.type))
    fail("matmul: weight '{}' has unsupported type {}", W.name, dtype_name(W.type));
  KVS_ASSERT(W.valid() && n_tok >= 0);
  const int64_t rows = W.rows(), cols = W.cols();
  if (ldy == 0) ldy = rows;
  KVS_ASSERT(ldy >= rows);
  if (cols % dtype_info(W.type).block_size != 0)
    fail("matmul: weight '{}' {} has {} columns, not a multiple of the {} block size", W.name,
         shape_str(W), cols, dtype_name(W.type));
  if (n_tok == 0 || rows == 0) return;
  bool decode;
  switch (cfg.path) {
    case MatmulPath::Decode: decode = true; break;
    case MatmulPath::Prefill: decode = false; break;
    default:
      decode = n_tok < (cfg.decode_max_tok > 0 ? cfg.decode_max_tok : default_decode_max_tok(k, W.type));
  }
  // OpenBLAS single-threaded unless asked otherwise: our pool threads call sgemm themselves, and
  // so do the presses' statistics products (press/stats.cpp, kvcache/attention_probs.cpp, ...)
  // from inside pool tasks, where OpenBLAS's own threads would compete with ours (and spin in
  // exec_blas_async). (The attention itself runs on the kernel tables' tiles, no BLAS.)
  if (cfg.blas == BlasThreading::PoolPerThread) set_blas_threads(1);
  // Repacked Q4_0 / Q8_0 runs the packed tile in decode and prefill alike.
  if (const auto packed = usable_packed(k, cfg, W)) {
    const PackedJob job{packed.get(), y, ldy};
    matmul_packed(k, cfg, std::span<const PackedJob>(&job, 1), packed_tile_fn(k, W.type), x, n_tok, pool, scratch);
    return;
  }
  if (decode)
    matmul_decode(k, cfg, W, x, n_tok, y, ldy, pool, scratch);
  else
    matmul_prefill(k, cfg, W, x, n_tok, y, ldy, pool, scratch);
}

void matmul_shared_with(const KernelTable& k, const MatmulConfig& cfg, std::span<const MatmulTarget> targets,
                        const float* x, int64_t n_tok, ThreadPool& pool, MatmulScratch& scratch) {
  // One section when every weight is repacked (usable_packed), of one type and one input width;
  // otherwise one matmul after the other.
  std::array<PackedJob, 4> jobs{};
  std::array<std::shared_ptr<const PackedWeights>, 4> hold;  // usable_packed's references, for the call
  bool fused = targets.size() >= 2 && targets.size() <= jobs.size() && n_tok > 0;
  for (size_t i = 0; fused && i < targets.size(); ++i) {
    const TensorView& W = *targets[i].W;
    fused = W.valid() && W.rows() > 0 && W.type == targets[0].W->type && W.cols() == targets[0].W->cols() &&
            (hold[i] = usable_packed(k, cfg, W)) != nullptr;
    if (fused) {
      const int64_t ldy = targets[i].ldy == 0 ? W.rows() : targets[i].ldy;
      KVS_ASSERT(ldy >= W.rows());
      jobs[i] = {hold[i].get(), targets[i].y, ldy};
    }
  }
  if (!fused) {
    for (const MatmulTarget& t : targets) matmul_with(k, cfg, *t.W, x, n_tok, t.y, pool, scratch, t.ldy);
    return;
  }
  if (cfg.blas == BlasThreading::PoolPerThread) set_blas_threads(1);
  matmul_packed(k, cfg, std::span<const PackedJob>(jobs.data(), targets.size()), packed_tile_fn(k, targets[0].W->type),
                x, n_tok, pool, scratch);
}

void matmul_shared(std::span<const MatmulTarget> targets, const float* x, int64_t n_tok, ThreadPool& pool,
                   MatmulScratch& scratch) {
  static const MatmulConfig kDefault{};
  matmul_shared_with(active_kernels(), kDefault, targets, x, n_tok, pool, scratch);
}

const char* blas_core_name() {
  const char* c = openblas_get_corename();
  return c ? c : "unknown";
}

void matmul(const TensorView& W, const float* x, int64_t n_tok, float* y, ThreadPool& pool,
            MatmulScratch& scratch, int64_t ldy) {
  static const MatmulConfig kDefault{};
  matmul_with(active_kernels(), kDefault, W, x, n_tok, y, pool, scratch, ldy);
}

}  // namespace kvs::kernels
