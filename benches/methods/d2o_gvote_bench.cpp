// A benchmark, not a test (it asserts nothing about time): D2O's per-decode-step cost vs H2O and
// vs no compression with the cache held at C tokens, and GVote's scoring time vs the prefill time,
// on a model given in the environment. Skipped unless KVS_BENCH_D2O_GVOTE names a model:
//
//   build/tools/kvshrink make-model --shape smollm2-135m --type q8_0 -o /tmp/smollm2-q8.gguf
//   KVS_BENCH_D2O_GVOTE=/tmp/smollm2-q8.gguf [KVS_BENCH_CTX=2048,8192] [KVS_BENCH_STEPS=32]
//       build/benches/kvs_method_bench --gtest_filter='D2oGvoteBench.*'
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

#include "bench_util.h"

namespace kvs {
namespace {

using bench::env_ints;
using bench::median;
using bench::random_tokens;

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
    const auto next = random_tokens(steps + 1, model->hp.n_vocab, 7);
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
    // Prefills: one without statistics (timed: the reference), one with column sums shared by the
    // evicting presses (forked per method).
    double prefill_plain = 0, prefill_colsum = 0;
    {
      Sequence plain;
      plain.cache = e.new_cache();
      Timer t;
      e.forward(*plain.cache, ctx, Logits::None);
      prefill_plain = t.seconds();
      ms[0].base = std::move(plain);
      Sequence cs;
      cs.cache = e.new_cache();
      cs.stats = e.new_stats(ms[1].spec.press.needs().stats);
      Timer t2;
      e.forward(*cs.cache, ctx, Logits::None, cs.stats.get());
      prefill_colsum = t2.seconds();
      for (size_t i = 1; i < ms.size(); ++i) {
        ASSERT_TRUE(cs.stats->request().covers(ms[i].spec.press.needs().stats));
        ms[i].base = cs.fork();
      }
    }
    EngineProbe probe(e, ctx);
    for (int r = 0; r < rounds; ++r)
      for (Method& m : ms) {
        Sequence s = m.base.fork();
        double f = 0, c = 0;
        // Step 0 is a warm-up, not timed (D2O's first compression fixes its layer sizes there).
        for (int i = 0; i <= steps; ++i) {
          Timer tf;
          e.forward(*s.cache, std::span<const int32_t>(&next[static_cast<size_t>(i)], 1), Logits::Last, s.stats.get());
          if (i > 0) f += tf.seconds();
          if (m.evict) {
            Timer tc;
            evict_to_budget(e, s, m.spec, C, &probe);
            if (i > 0) c += tc.seconds();
          }
        }
        m.fwd.push_back(f / steps);
        m.cmp.push_back(c / steps);
      }
    std::printf("## context %d tokens (prefill %.2f s, %.2f s with column sums; %d decode steps x %d interleaved rounds)\n\n",
                C, prefill_plain, prefill_colsum, steps, rounds);
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
    // GVote: scoring (+ allocation, selection) vs the plain prefill, and what its statistics cost.
    std::printf("\n| GVote | prefill with its statistics s | statistics share s | scoring s | apply s | scoring / prefill | keep chosen |\n");
    std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
    Press gv = make_press("gvote");
    Sequence g;
    g.cache = e.new_cache();
    g.stats = e.new_stats(gv.needs().stats);
    Timer tg;
    e.forward(*g.cache, ctx, Logits::None, g.stats.get());
    const double prefill_g = tg.seconds();
    for (const char* opts : {"", "samples=32"}) {
      ParamMap pm;
      if (*opts) pm["samples"] = "32";
      Press p = make_press("gvote", pm);
      std::vector<double> sc, ap;
      double keep = 0;
      for (int r = 0; r < rounds; ++r) {
        Sequence f = g.fork();
        const CompressResult res = compress(*f.cache, f.stats.get(), p, CompressRequest{}, e.attn_shape(), e.pool(), {&probe, &f.state});
        sc.push_back(res.score_seconds);
        ap.push_back(res.apply_seconds);
        keep = res.keep_chosen.value_or(1.0);
      }
      std::printf("| %s | %.3f | %.3f | %.3f | %.4f | %.3f | %.3f |\n", *opts ? opts : "defaults (S = 8)", prefill_g,
                  g.stats->seconds(), median(sc), median(ap), median(sc) / prefill_plain, keep);
    }
    std::printf("\n");
  }
}

}  // namespace
}  // namespace kvs
