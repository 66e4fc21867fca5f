// Token sampling per token at the vocabulary sizes of the supported models (SmolLM2 / Llama-3
// 128k / Qwen 152k / Gemma 262k), with the server's default settings (temperature 1, no top-k,
// top-p 1), nucleus sampling (top-p 0.95) and top-k 40. Logits: random normal times 3, a spread
// like a trained model's (a few tokens hold most of the mass).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "runtime/sampler.h"

namespace kvs {
namespace {

// args: vocabulary size, filter (0 = none, 1 = top-p 0.95, 2 = top-k 40, 3 = greedy: temperature 0)
void BM_Sample(benchmark::State& st) {
  const int V = static_cast<int>(st.range(0));
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(V));
  for (auto& x : logits) x = nd(rng);
  SamplerParams p;
  p.temp = st.range(1) == 3 ? 0.0f : 1.0f;
  p.top_k = st.range(1) == 2 ? 40 : 0;
  p.top_p = st.range(1) == 1 ? 0.95f : 1.0f;
  p.seed = 7;
  Sampler s(p);
  for (auto _ : st) benchmark::DoNotOptimize(s.sample(logits));
}
BENCHMARK(BM_Sample)
    ->ArgsProduct({{49152, 151936, 262144}, {0, 1, 2, 3}})
    ->ArgNames({"vocab", "filter"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvs
