// Decode attention over a long per-head paged cache: the part of decode that grows with context.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "kvcache/attention.h"

namespace kvs {
namespace {

// args: context length, kv dtype (0 = f32, 1 = f16, 2 = q8_0, 3 = q4_0), threads
void BM_DecodeAttention(benchmark::State& st) {
  const int L = static_cast<int>(st.range(0));
  constexpr DType kTypes[] = {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0};
  const DType dt = kTypes[st.range(1)];
  const int threads = static_cast<int>(st.range(2));
  KvLayout l{1, 3, 64, dt, 32};
  PagePool pool(l.page_bytes());
  KvCache c(pool, l);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> k(static_cast<size_t>(L) * 3 * 64), v(k.size());
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  std::vector<int32_t> pos(L);
  for (int i = 0; i < L; ++i) pos[i] = i;
  c.append(0, L, k.data(), v.data(), pos.data());
  AttnShape s{9, 3, 64, 0.125f};
  std::vector<float> q(9 * 64), out(9 * 64);
  for (auto& x : q) x = nd(rng);
  int32_t qp = L;
  ThreadPool tp(threads);
  AttnScratch scr;
  for (auto _ : st) {
    attention(c, 0, s, q.data(), &qp, 1, out.data(), nullptr, tp, scr);
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = static_cast<double>(L) * 3 * 2 * l.row_bytes();
  st.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_DecodeAttention)
    ->ArgsProduct({{2048, 8192}, {0, 1, 2, 3}, {1, 2}})
    ->ArgNames({"ctx", "type", "thr"})
    ->Unit(benchmark::kMicrosecond);

// Batched decoding: 16 sequences of `ctx` tokens each, one query each, over 8 layers (32 below
// 2,048 tokens) of the SmolLM2-135M attention shape (9 query heads on 3 KV heads, head_dim 64,
// F16 pages): 200 MB of KV, so the pages come from DRAM as in a real step (the single-layer benchmark
// above stays in the L3). args: context length, mode (0 = one attention() call per sequence,
// 1 = attention_batch over all of them), threads, page size in tokens, page type (0 = F32,
// 1 = F16, 2 = Q8_0, 3 = Q4_0; GB/s counts the bytes of the pages' rows), reuse (1: the pages
// taken from the free list of a cleared set of caches).
void BM_BatchedDecodeAttention(benchmark::State& st) {
  // Layers: enough for the pages to outgrow the L3 (16 x 2,048 x 8 layers F16: 201 MB; 16 x 512 x 32: 201 MB).
  const int L = static_cast<int>(st.range(0)), n_seq = 16, n_layer = L >= 2048 ? 8 : 32;
  const bool batched = st.range(1) == 1;
  const int threads = static_cast<int>(st.range(2));
  constexpr DType kTypes[] = {DType::F32, DType::F16, DType::Q8_0, DType::Q4_0};
  KvLayout l{n_layer, 3, 64, kTypes[st.range(4)], static_cast<int>(st.range(3))};
  PagePool pool(l.page_bytes());
  std::vector<std::unique_ptr<KvCache>> caches;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> k(static_cast<size_t>(L) * 3 * 64), v(k.size());
  std::vector<int32_t> pos(L);
  for (int i = 0; i < L; ++i) pos[i] = i;
  for (int sq = 0; sq < n_seq; ++sq) caches.push_back(std::make_unique<KvCache>(pool, l));
  // Appended layer by layer, sequence by sequence, in prefill-sized chunks, as an engine fills them.
  // reuse: filled, cleared and filled again, so the pages come from the pool's free list (a server's
  // caches after others were freed) instead of fresh chunks.
  const int rounds = st.range(5) == 1 ? 2 : 1;
  for (int rd = 0; rd < rounds; ++rd) {
    if (rd > 0) for (auto& c : caches) c->clear();
    for (int c0 = 0; c0 < L; c0 += 512)
      for (int sq = 0; sq < n_seq; ++sq)
        for (int il = 0; il < n_layer; ++il) {
          const int n = std::min(512, L - c0);
          for (auto& x : k) x = nd(rng);
          for (auto& x : v) x = nd(rng);
          caches[sq]->append(il, n, k.data(), v.data(), pos.data() + c0);
        }
  }
  AttnShape s{9, 3, 64, 0.125f};
  std::vector<float> q(static_cast<size_t>(n_seq) * 9 * 64), out(q.size());
  for (auto& x : q) x = nd(rng);
  int32_t qp = L;
  ThreadPool tp(threads);
  AttnScratch scr;
  std::vector<AttnJob> jobs;
  for (int sq = 0; sq < n_seq; ++sq)
    jobs.push_back({caches[sq].get(), q.data() + sq * 9 * 64, &qp, 1, out.data() + sq * 9 * 64, nullptr});
  for (auto _ : st) {
    for (int il = 0; il < n_layer; ++il) {
      if (batched) {
        attention_batch(jobs, il, s, tp, scr);
      } else {
        for (const AttnJob& j : jobs) attention(*j.cache, il, s, j.q, j.qpos, 1, j.out, nullptr, tp, scr);
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = static_cast<double>(L) * 3 * 2 * l.row_bytes() * n_seq * n_layer;
  st.counters["GB/s"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_BatchedDecodeAttention)
    ->ArgsProduct({{2048}, {0, 1}, {1, 2}, {32, 128}, {1, 2}, {0}})
    ->ArgNames({"ctx", "batched", "thr", "page", "type", "reuse"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_BatchedDecodeAttention)
    ->ArgsProduct({{2048}, {1}, {2}, {32}, {0, 3}, {0}})
    ->ArgNames({"ctx", "batched", "thr", "page", "type", "reuse"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_BatchedDecodeAttention)
    ->ArgsProduct({{2048}, {1}, {2}, {32}, {1, 2}, {1}})
    ->ArgNames({"ctx", "batched", "thr", "page", "type", "reuse"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// Keep-0.25 contexts (512 of 2,048 tokens held, then 32 more decoded): one key range per head.
BENCHMARK(BM_BatchedDecodeAttention)
    ->ArgsProduct({{512, 544}, {1}, {2}, {32}, {1, 2}, {0}})
    ->ArgNames({"ctx", "batched", "thr", "page", "type", "reuse"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Prefill attention: a chunk of `chunk` tokens (512: the default -b) at the end of a `ctx`-token
// context, one layer, causal, pages of `type` (1 = F16, 2 = Q8_0, 3 = Q4_0). Shapes: 0 =
// SmolLM2-135M (9 query heads on 3 KV heads), 1 = Llama-3.2-1B (32 on 8); head_dim 64. GFLOP/s
// counts 4 D flops per visible (query head, key) pair. Short chunks (16 tokens) are a server's
// small prefill steps over a long context. BM_PrefillAttentionBf16: the same with BF16 products
// (AttnShape::bf16_products, KVzip's repeat pass at precision=bf16).
void prefill_attention(benchmark::State& st, bool bf16) {
  const int L = static_cast<int>(st.range(0)), n_tok = static_cast<int>(st.range(4));
  const int H = st.range(1) == 0 ? 9 : 32, Hkv = st.range(1) == 0 ? 3 : 8, D = 64;
  const int threads = static_cast<int>(st.range(2));
  const DType dt = st.range(3) == 2 ? DType::Q8_0 : st.range(3) == 3 ? DType::Q4_0 : DType::F16;
  KvLayout l{1, Hkv, D, dt, 32};
  PagePool pool(l.page_bytes());
  KvCache c(pool, l);
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> k(static_cast<size_t>(L) * Hkv * D), v(k.size());
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  std::vector<int32_t> pos(L);
  for (int i = 0; i < L; ++i) pos[i] = i;
  c.append(0, L, k.data(), v.data(), pos.data());
  AttnShape s{H, Hkv, D, 0.125f};
  s.bf16_products = bf16;
  std::vector<float> q(static_cast<size_t>(n_tok) * H * D), out(q.size());
  for (auto& x : q) x = nd(rng);
  ThreadPool tp(threads);
  AttnScratch scr;
  for (auto _ : st) {
    attention(c, 0, s, q.data(), pos.data() + (L - n_tok), n_tok, out.data(), nullptr, tp, scr);
    benchmark::DoNotOptimize(out.data());
  }
  // visible pairs per query head: sum over the chunk's queries of (position + 1)
  const double pairs = static_cast<double>(n_tok) * (L - n_tok) + 0.5 * n_tok * (n_tok + 1);
  st.counters["GFLOP/s"] = benchmark::Counter(pairs * H * D * 4, benchmark::Counter::kIsIterationInvariantRate);
}
void BM_PrefillAttention(benchmark::State& st) { prefill_attention(st, false); }
void BM_PrefillAttentionBf16(benchmark::State& st) { prefill_attention(st, true); }
BENCHMARK(BM_PrefillAttentionBf16)
    ->ArgsProduct({{2048, 8192}, {0, 1}, {1, 2}, {1}, {512}})
    ->ArgsProduct({{8192}, {1}, {1, 2}, {1, 2}, {16}})
    ->ArgNames({"ctx", "shape", "thr", "type", "chunk"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_PrefillAttention)
    ->ArgsProduct({{2048, 8192}, {0, 1}, {1, 2}, {1}, {512}})
    ->ArgsProduct({{8192}, {1}, {1, 2}, {2, 3}, {512}})
    ->ArgsProduct({{8192}, {1}, {1, 2}, {1, 2, 3}, {16}})
    ->ArgNames({"ctx", "shape", "thr", "type", "chunk"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace kvs
