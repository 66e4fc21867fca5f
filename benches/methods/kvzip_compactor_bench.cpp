// A benchmark, not a test (it asserts nothing about time): KVzip's scoring time (the repeat pass)
// and Compactor's cost (its statistics during prefill + scoring) against the prefill time, and the
// peak extra KV memory while KVzip scores, on a model given in the environment. Skipped unless
// KVS_BENCH_KVZIP_COMPACTOR names a model:
//
//   build/tools/kvshrink make-model --shape smollm2-135m --type q8_0 -o /tmp/smollm2-q8.gguf
//   KVS_BENCH_KVZIP_COMPACTOR=/tmp/smollm2-q8.gguf [KVS_BENCH_CTX=2048,8192] [KVS_BENCH_ROUNDS=3]
//       build/benches/kvs_method_bench --gtest_filter='KvzipCompactorBench.*'
//
// KVS_BENCH_THREADS=1 runs one thread (default 2); KVS_BENCH_KVZIP_ONLY=1 skips Compactor and
// SnapKV; KVS_BENCH_KVZIP_PRECISION=f32,bf16 scores with each of KVzip's `precision` values in turn
// (every round, on forks of the same prefill; default: auto), one table row each. Besides wall seconds it prints the process CPU seconds of the prefill and of KVzip's
// scoring (less sensitive to other processes' load than wall time).
//
// Per context length (random tokens), round by round, interleaved so that load from other
// processes hits them alike: a plain prefill (no statistics), KVzip's scoring on a fork of it, a
// prefill collecting Compactor's statistics (pre-RoPE keys + non-causal chunk attention) then its
// scoring, a prefill with SnapKV's window then its scoring. Medians over rounds. Memory: the KV
// pool's bytes in use, sampled at every layer of every repeat pass (the probe's fork), minus what
// the cache held before; the scorer's own scratch (one tile per thread, one layer's gathered keys)
// is given by formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <sstream>
#include <ctime>

#include "core/timer.h"
#include "press/methods/kvzip.h"
#include "press/registry.h"
#include "runtime/engine_probe.h"
#include "runtime/session.h"

#include "bench_util.h"

namespace kvs {
namespace {

using bench::env_ints;
using bench::env_strs;
using bench::median;
using bench::random_tokens;

// An observer in front of another that samples the KV pool at every layer.
struct PoolSampler : LayerObserver {
  LayerObserver& inner;
  const PagePool& pool;
  size_t peak = 0;
  PoolSampler(LayerObserver& i, const PagePool& p) : inner(i), pool(p) {}
  void on_layer(const LayerView& v) override {
    peak = std::max(peak, pool.bytes_in_use());
    inner.on_layer(v);
  }
  bool needs_pre_rope() const override { return inner.needs_pre_rope(); }
};

// The engine's probe, with the pool sampled during probe forwards.
struct MeasuringProbe : ModelProbe {
  EngineProbe inner;
  const PagePool& pool;
  size_t peak = 0;
  MeasuringProbe(Engine& e, std::span<const int32_t> ctx) : inner(e, ctx), pool(e.page_pool()) {}
  ProbeDims dims() const override { return inner.dims(); }
  void project_queries(int l, const float* h, int n, const float* cs, bool shared, float* out) override {
    inner.project_queries(l, h, n, cs, shared, out);
  }
  void project_attn_input_queries(int l, const float* x, int n, const float* cs, bool shared, float* out) override {
    inner.project_attn_input_queries(l, x, n, cs, shared, out);
  }
  std::vector<float> rope_table(int l, std::span<const int32_t> pos) const override { return inner.rope_table(l, pos); }
  std::vector<float> rope_table_mean(int l, int32_t f, int32_t c) const override {
    return inner.rope_table_mean(l, f, c);
  }
  void probe_forward(const KvCache& c, std::span<const int32_t> t, LayerObserver& o, bool bf16 = false) override {
    PoolSampler s(o, pool);
    inner.probe_forward(c, t, s, bf16);
    peak = std::max(peak, s.peak);
  }
  void probe_forward_continue(const KvCache& c, std::span<const int32_t> t, LayerObserver& o) override {
    PoolSampler s(o, pool);
    inner.probe_forward_continue(c, t, s);
    peak = std::max(peak, s.peak);
  }
  void end_probe_session() override { inner.end_probe_session(); }
  std::span<const int32_t> context_tokens() const override { return inner.context_tokens(); }
  std::span<const float> context_nll() const override { return inner.context_nll(); }
  std::vector<int32_t> encode(const std::string& text, bool chat) const override { return inner.encode(text, chat); }
  bool has_chat_template() const override { return inner.has_chat_template(); }
  const nlohmann::json* calibration(const std::string& press) override { return inner.calibration(press); }
};

// CPU seconds used by this process so far (every thread).
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string mib(double b) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", b / (1024.0 * 1024.0));
  return buf;
}

TEST(KvzipCompactorBench, ScoringCostAndKvzipMemory) {
  const char* path = std::getenv("KVS_BENCH_KVZIP_COMPACTOR");
  if (!path || !*path) GTEST_SKIP() << "set KVS_BENCH_KVZIP_COMPACTOR=<model.gguf> to run";
  auto model = Model::load(path);
  EngineParams ep;
  ep.n_threads = env_ints("KVS_BENCH_THREADS", {2})[0];
  const bool kvzip_only = env_ints("KVS_BENCH_KVZIP_ONLY", {0})[0] != 0;
  ep.kv_dtype = DType::F16;
  Engine e(*model, ep);
  const int rounds = env_ints("KVS_BENCH_ROUNDS", {3})[0];
  const AttnShape shape = e.attn_shape();
  std::printf("model: %s — %s; %d threads, KV f16, n_batch %d\n\n", model->name.c_str(), model->hp.summary().c_str(),
              ep.n_threads, ep.n_batch);
  std::printf("| context | prefill | KVzip scoring | KVzip / prefill | Compactor stats + scoring | Compactor / prefill | "
              "SnapKV scoring / prefill | full KV | KVzip peak extra KV | + scorer scratch |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int C : env_ints("KVS_BENCH_CTX", {2048, 8192})) {
    const auto ctx = random_tokens(C, model->hp.n_vocab, 42 + C);
    const std::vector<std::string> precs = env_strs("KVS_BENCH_KVZIP_PRECISION", {"auto"});
    std::vector<double> tp, tcs, tcp, tsn, cp_pre;
    std::vector<std::vector<double>> tkz(precs.size()), cp_kz(precs.size());  // [precision][round]
    size_t full_bytes = 0, peak_extra = 0;
    for (int r = 0; r < rounds; ++r) {
      {  // plain prefill, then KVzip on a fork
        auto cache = e.new_cache();
        Timer t;
        const double c0 = cpu_seconds();
        e.forward(*cache, ctx, Logits::None);
        tp.push_back(t.seconds());
        cp_pre.push_back(cpu_seconds() - c0);
        full_bytes = cache->bytes_held();
        for (size_t pi = 0; pi < precs.size(); ++pi) {
          auto fork = cache->fork();
          const size_t before = e.page_pool().bytes_in_use();
          MeasuringProbe probe(e, ctx);
          CompressRequest req;
          req.keep = 0.25;
          req.sinks = 4;
          const double c1 = cpu_seconds();
          const CompressResult res = compress(*fork, nullptr, make_press("kvzip", {{"precision", precs[pi]}}), req, shape,
                                              e.pool(), {&probe, nullptr});
          cp_kz[pi].push_back(cpu_seconds() - c1);
          tkz[pi].push_back(res.score_seconds);
          peak_extra = std::max(peak_extra, probe.peak - before);
        }
      }
      if (kvzip_only) {
        tcs.push_back(0);
        tcp.push_back(0);
        tsn.push_back(0);
        continue;
      }
      // A press's statistics during a plain prefill, then its scoring + selection at keep 0.25:
      // (statistics seconds, scoring seconds).
      auto press_cost = [&](const char* name, int sinks, int window) {
        const Press p = make_press(name);
        auto cache = e.new_cache();
        auto st = e.new_stats(p.needs().stats);
        e.forward(*cache, ctx, Logits::None, st.get());
        CompressRequest req;
        req.keep = 0.25;
        req.sinks = sinks;
        req.window = window;
        const CompressResult res = compress(*cache, st.get(), p, req, shape, e.pool(), {});
        return std::pair{st->seconds(), res.score_seconds};
      };
      const auto [compactor_stats, compactor_score] = press_cost("compactor", 8, 4);
      tcs.push_back(compactor_stats);
      tcp.push_back(compactor_score);
      const auto [snapkv_stats, snapkv_score] = press_cost("snapkv", 0, 0);  // for reference
      tsn.push_back(snapkv_stats + snapkv_score);
    }
    const double p = median(tp), cs = median(tcs), cp = median(tcp), sn = median(tsn);
    // Scratch of the repeat pass's observer: per thread a 64 x (sinks + m + n_in) tile and the
    // queries; one layer's gathered keys (every KV head); per thread a max per chunk slot. (As
    // f32 panels for every precision: with BF16 the keys' panels take half, an upper bound here.)
    const int m = std::min(C - 4, 2048);
    EngineProbe ep_probe(e, ctx);
    const int n_in = static_cast<int>(kvzip_repeat_input(ep_probe, ctx, 4, 4 + m, true, KvzipOptions{}).size());
    const int cols = 4 + m + n_in;
    const double scratch = 4.0 * (e.pool().size() * (64.0 * cols + 64.0 * shape.head_dim + shape.n_head_kv * m) +
                                  shape.n_head_kv * static_cast<double>(cols) * shape.head_dim);
    for (size_t pi = 0; pi < precs.size(); ++pi) {
      const double kz = median(tkz[pi]);
      std::printf("| %d | %.2f s | %.2f s (precision=%s) | %.2fx | %.3f + %.3f s | %.3fx | %.3fx | %s | %s (%.0f%%) | %s |\n",
                  C, p, kz, precs[pi].c_str(), kz / p, cs, cp, (cs + cp) / p, sn / p,
                  mib(static_cast<double>(full_bytes)).c_str(), mib(static_cast<double>(peak_extra)).c_str(),
                  100.0 * peak_extra / full_bytes, mib(scratch).c_str());
      std::printf("  CPU seconds (all threads): prefill %.2f s, KVzip scoring + selection %.2f s, ratio %.2fx\n",
                  median(cp_pre), median(cp_kz[pi]), median(cp_kz[pi]) / median(cp_pre));
      std::printf("  rounds (prefill / scoring s):");
      for (size_t r = 0; r < tp.size(); ++r) std::printf(" %.2f / %.2f", tp[r], tkz[pi][r]);
      std::printf("\n");
    }
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace kvs
