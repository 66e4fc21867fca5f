// The server's batched decode step without the server: Engine::forward_batch over N sequences,
// one token each, every sequence's cache holding `held` tokens per KV head in its own pages
// (random K/V appended layer by layer in 512-token chunks, sequence after sequence, as prefills
// fill the pool; the values do not change the cost). The model is the GGUF named by
// KVS_BENCH_MODEL (e.g. `kvshrink make-model --shape smollm2-135m --type q8_0 -o F`); skipped
// without it. args: sequences, tokens held per head (2,048 = a full 2k context, 512 = keep 0.25
// of it, 16 = next to nothing: what a step costs besides the KV reads), KV page type (1 = F16,
// 2 = Q8_0), threads, compact (1: each sequence prefilled with 4x the tokens, then edited down to
// every 4th slot, as a keep-0.25 press leaves the server's contexts; 0: appended). Counters: tok/s
// (aggregate decode), and GB/s = (the weights' bytes + every sequence's KV bytes held) per step /
// step time — the share of the memory bound, as in BENCHMARKS.md's roofline tables.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "model/model.h"
#include "runtime/engine.h"

namespace kvs {
namespace {

const Model* bench_model() {
  static std::unique_ptr<Model> m = [] {
    const char* p = std::getenv("KVS_BENCH_MODEL");
    return p && *p ? Model::load(p) : nullptr;
  }();
  return m.get();
}

void BM_BatchedDecodeStep(benchmark::State& st) {
  const Model* model = bench_model();
  if (!model) {
    st.SkipWithError("set KVS_BENCH_MODEL to a GGUF file");
    return;
  }
  const int n_seq = static_cast<int>(st.range(0)), held = static_cast<int>(st.range(1));
  // compact: each sequence prefilled with 4 x held tokens, then every 4th slot kept (a keep-0.25
  // press's compaction, as the server's contexts are), instead of held tokens appended.
  const bool compact = st.range(4) == 1;
  const int filled = compact ? 4 * held : held;
  EngineParams ep;
  ep.kv_dtype = st.range(2) == 2 ? DType::Q8_0 : DType::F16;
  ep.n_threads = static_cast<int>(st.range(3));
  Engine engine(*model, ep);
  const HParams& hp = model->hp;
  const int Hkv = hp.n_head_kv, D = hp.head_dim;
  std::vector<std::unique_ptr<KvCache>> caches;
  for (int s = 0; s < n_seq; ++s) caches.push_back(engine.new_cache());
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  constexpr int kChunk = 512;
  std::vector<float> k(static_cast<size_t>(kChunk) * Hkv * D), v(k.size());  // [chunk][Hkv][D]
  std::vector<int32_t> pos(static_cast<size_t>(filled));
  for (int i = 0; i < filled; ++i) pos[static_cast<size_t>(i)] = i;
  for (auto& x : k) x = nd(rng);  // the same random rows for every sequence and layer
  for (auto& x : v) x = nd(rng);
  auto fill = [&](int s, int c0) {
    for (int il = 0; il < hp.n_layer; ++il)
      caches[static_cast<size_t>(s)]->append(il, std::min(kChunk, filled - c0), k.data(), v.data(), pos.data() + c0);
  };
  if (compact) {
    // Sequence after sequence, as the server builds its contexts: prefill, then the press's edit.
    for (int s = 0; s < n_seq; ++s) {
      for (int c0 = 0; c0 < filled; c0 += kChunk) fill(s, c0);
      KvCache& c = *caches[static_cast<size_t>(s)];
      CacheEdit edit(c.layout());
      for (auto& h : edit.heads) {
        h.active = true;
        for (int i = 0; i < filled; i += 4) h.keep.push_back(i);
      }
      if (!c.apply(edit)) {
        st.SkipWithError("the pool could not supply the edit's pages");
        return;
      }
    }
  } else {
    for (int c0 = 0; c0 < filled; c0 += kChunk)
      for (int s = 0; s < n_seq; ++s) fill(s, c0);
  }
  for (auto& c : caches) c->set_n_past(filled);
  std::vector<int32_t> tok(static_cast<size_t>(n_seq));
  std::uniform_int_distribution<int32_t> ud(3, hp.n_vocab - 1);
  std::vector<Engine::BatchItem> items(static_cast<size_t>(n_seq));
  for (int s = 0; s < n_seq; ++s) {
    tok[static_cast<size_t>(s)] = ud(rng);
    items[static_cast<size_t>(s)] = {caches[static_cast<size_t>(s)].get(), {&tok[static_cast<size_t>(s)], 1}};
  }
  double kv_bytes = 0;
  for (auto& c : caches) kv_bytes += static_cast<double>(c->bytes_of_slots());
  for (auto _ : st) {
    // As the server's step (runtime/batch_step.cpp): the logits left in the engine.
    auto logits = engine.forward_batch_spans(items);
    benchmark::DoNotOptimize(logits.data());
    engine.trim_batch_logits();
  }
  st.counters["tok/s"] = benchmark::Counter(n_seq, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["GB/s"] = benchmark::Counter(static_cast<double>(model->weight_bytes()) + kv_bytes,
                                           benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_BatchedDecodeStep)
    ->ArgsProduct({{1, 4, 16}, {2048, 512, 16}, {1, 2}, {2}, {0}})
    ->Args({16, 512, 2, 2, 1})
    ->Args({16, 512, 1, 2, 1})
    ->ArgNames({"seqs", "held", "type", "thr", "compact"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace kvs
