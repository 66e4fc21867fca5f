// A benchmark, not a test (it asserts nothing about time): D2O's per-decode-step cost vs H2O and
// vs no compression with the cache held at C tokens, and GVote's scoring time vs the prefill time,
// on a model given in the environment. Skipped unless KVS_BENCH_D2O_GVOTE names a model:
//
//   build/tools/kvshrink make-model --shape smollm2-135m --type q8_0 -o /tmp/smollm2-q8.gguf
//   KVS_BENCH_D2O_GVOTE=/tmp/smollm2-q8.gguf [KVS_BENCH_CTX=2048,8192] [KVS_BENCH_STEPS=32] \
//       build/tests/test_slow --gtest_filter='D2oGvoteBench.*'
//
// Decode: the context (random tokens) is prefilled once per statistics request; each method then
// runs on a fork: one token forward (with the statistics its press collects), then — for the
// evicting presses — evict_to_budget back to C tokens per head. The methods are interleaved
// round by round (full, h2o, d2o, d2o without merging) so that load from other processes hits
// them alike; the table gives the median over rounds of the mean per-step time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <sstream>

#include "core/timer.h"
#include "press/registry.h"
#include "runtime/engine_probe.h"
#include "runtime/session.h"

namespace kvs {
namespace {

std::vector<int> env_ints(const char* name, std::vector<int> def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  std::vector<int> out;
  std::stringstream ss(v);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
  return out;
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = 3 + static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab - 3));
  return v;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

CompressionSpec spec_for(const std::string& press, ParamMap opts = {}) {
  SpecArgs a;
  a.press = press;
  a.options = std::move(opts);
  a.keep = 0.5;  // unused for decode (evict_to_budget gives the token budget)
  return make_compression_spec(a);
}

TEST(D2oGvoteBench, DecodeStepAndScoringCost) {
  const char* path = std::getenv("KVS_BENCH_D2O_GVOTE");
  if (!path || !*path) GTEST_SKIP() << "set KVS_BENCH_D2O_GVOTE=<model.gguf> to run";
  auto model = Model::load(path);
  EngineParams ep;
  ep.n_threads = 2;
  Engine e(*model, ep);
  const int steps = env_ints("KVS_BENCH_STEPS", {32})[0];
  const int rounds = env_ints("KVS_BENCH_ROUNDS", {5})[0];
  std::printf("model: %s — %s, 2 threads\n\n", model->name.c_str(), model->hp.summary().c_str());
  for (int C : env_ints("KVS_BENCH_CTX", {2048, 8192})) {
    const auto ctx = random_tokens(C, model->hp.n_vocab, 42 + C);
    const auto next = random_tokens(steps, model->hp.n_vocab, 7);
    struct Method {
      std::string label;
      CompressionSpec spec;
      bool evict;
      Sequence base;
      std::vector<double> fwd, cmp;  // per round: mean seconds per step
    };
    std::vector<Method> ms;
    ms.push_back({"full (no compression, cache grows)", spec_for("full"), false, {}, {}, {}});
    ms.push_back({"h2o", spec_for("h2o"), true, {}, {}, {}});
    ms.push_back({"d2o", spec_for("d2o"), true, {}, {}, {}});
    ms.push_back({"d2o merge=false", spec_for("d2o", {{"merge", "false"}}), true, {}, {}, {}});
    double prefill_plain = 0;
    for (Method& m : ms) {
      m.base.cache = e.new_cache();
      m.base.stats = e.new_stats(m.spec.press.needs().stats);
      Timer t;
      e.forward(*m.base.cache, ctx, Logits::None, m.base.stats.get());
      if (!m.evict) prefill_plain = t.seconds();
    }
    EngineProbe probe(e, ctx);
    for (int r = 0; r < rounds; ++r)
      for (Method& m : ms) {
        Sequence s = m.base.fork();
        double f = 0, c = 0;
        for (int i = 0; i < steps; ++i) {
          Timer tf;
          e.forward(*s.cache, std::span<const int32_t>(&next[static_cast<size_t>(i)], 1), Logits::Last, s.stats.get());
          f += tf.seconds();
          if (m.evict) {
            Timer tc;
            evict_to_budget(e, s, m.spec, C, &probe);
            c += tc.seconds();
          }
        }
        m.fwd.push_back(f / steps);
        m.cmp.push_back(c / steps);
      }
    std::printf("## context %d tokens (prefill %.2f s; %d decode steps x %d interleaved rounds)\n\n", C, prefill_plain,
                steps, rounds);
    std::printf("| method | forward + statistics ms/step | eviction ms/step | total ms/step | vs full |\n");
    std::printf("|---|---:|---:|---:|---:|\n");
    std::vector<double> tot0;
    for (size_t r = 0; r < ms[0].fwd.size(); ++r) tot0.push_back(ms[0].fwd[r] + ms[0].cmp[r]);
    const double full_ms = 1e3 * median(tot0);
    for (Method& m : ms) {
      std::vector<double> tot;
      for (size_t r = 0; r < m.fwd.size(); ++r) tot.push_back(m.fwd[r] + m.cmp[r]);
      const double t = 1e3 * median(tot);
      std::printf("| %s | %.2f | %.3f | %.2f | %+.1f%% |\n", m.label.c_str(), 1e3 * median(m.fwd), 1e3 * median(m.cmp), t,
                  100.0 * (t / full_ms - 1.0));
    }
    // GVote: scoring (+ allocation, selection) vs a plain prefill, and what its statistics cost.
    std::printf("\n| GVote | prefill (no statistics) s | statistics during prefill s | scoring s | apply s | scoring / prefill | keep chosen |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
    for (const char* opts : {"", "samples=32"}) {
      ParamMap pm;
      if (*opts) pm["samples"] = "32";
      Press p = make_press("gvote", pm);
      std::vector<double> sc, ap, st, pf;
      double keep = 0;
      for (int r = 0; r < std::max(1, rounds / 2); ++r) {
        auto plain = e.new_cache();
        Timer tp;
        e.forward(*plain, ctx, Logits::None);
        pf.push_back(tp.seconds());
        plain.reset();
        auto cache = e.new_cache();
        auto stats = e.new_stats(p.needs().stats);
        e.forward(*cache, ctx, Logits::None, stats.get());
        PressState state;
        const CompressResult res = compress(*cache, stats.get(), p, CompressRequest{}, e.attn_shape(), e.pool(), {&probe, &state});
        sc.push_back(res.score_seconds);
        ap.push_back(res.apply_seconds);
        st.push_back(stats->seconds());
        keep = res.keep_chosen.value_or(1.0);
      }
      std::printf("| %s | %.3f | %.3f | %.3f | %.4f | %.3f | %.3f |\n", *opts ? opts : "defaults (S = 8)", median(pf),
                  median(st), median(sc), median(ap), median(sc) / median(pf), keep);
    }
    std::printf("\n");
  }
}

}  // namespace
}  // namespace kvs
