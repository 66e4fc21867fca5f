// A benchmark, not a test (it asserts nothing about time): UNComp's group-stage prefill (hidden
// states pruned between layer groups, so later layers run on fewer rows) against a full prefill
// of the same context, on a model given in the environment. Skipped unless KVS_BENCH_UNCOMP names
// a model:
//
//   build/tools/kvshrink make-model --shape smollm2-135m --type q8_0 -o /tmp/smollm2-q8.gguf
//   KVS_BENCH_UNCOMP=/tmp/smollm2-q8.gguf [KVS_BENCH_CTX=2048,8192] [KVS_BENCH_ROUNDS=3]
//       [KVS_BENCH_LAYER_GROUPS=4] [KVS_BENCH_STAGE_MIN_TOKENS=1536] [KVS_BENCH_N_BATCH=512]
//       build/benches/kvs_method_bench --gtest_filter='UncompBench.*'
//
// The model's calibration is replaced by a synthetic one in a temporary KVSHRINK_CALIB_DIR (KV
// heads in round-robin groups; random weights have no meaningful entropy groups), and the layer
// groups are given explicitly: KVS_BENCH_LAYER_GROUPS equal runs of layers (default 4, the
// official Llama-2-7B partition has 5 groups). Row counts per group follow Eq. 10 with the default
// stage_min (0.375): linear from N down to 0.375 N, or down to KVS_BENCH_STAGE_MIN_TOKENS rows
// (the official code's 1,536). n_batch: KVS_BENCH_N_BATCH, default the context (one chunk); the
// pruned prefill runs layer-major whatever it is. Per context length (random tokens),
// interleaved rounds, medians.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <sstream>

#include "core/timer.h"
#include "press/methods/uncomp.h"
#include "press/registry.h"
#include "runtime/calibration_store.h"
#include "runtime/session.h"
#include "runtime/test_util.h"

#include "bench_util.h"

namespace kvs {
namespace {

using bench::env_ints;
using bench::median;
using bench::random_tokens;

TEST(UncompBench, GroupStagePrefillVsFull) {
  const char* path = std::getenv("KVS_BENCH_UNCOMP");
  if (!path || !*path) GTEST_SKIP() << "set KVS_BENCH_UNCOMP=<model.gguf> to run";
  test::TempDir calib("uncomp_bench_calib");
  ::setenv("KVSHRINK_CALIB_DIR", calib.str().c_str(), 1);
  auto model = Model::load(path);
  const HParams& hp = model->hp;
  const int n_groups = std::clamp(env_ints("KVS_BENCH_LAYER_GROUPS", {4})[0], 1, hp.n_layer);
  // Synthetic calibration: KV head h of every layer in group h mod 8; layer groups in equal runs.
  nlohmann::json d;
  d["groups"] = 8;
  std::vector<int> heads(static_cast<size_t>(hp.n_head_kv));
  for (int h = 0; h < hp.n_head_kv; ++h) heads[static_cast<size_t>(h)] = h % 8;
  d["kv_head_groups"] = std::vector<std::vector<int>>(static_cast<size_t>(hp.n_layer), heads);
  std::vector<int> lg(static_cast<size_t>(hp.n_layer));
  std::string lg_opt;
  for (int l = 0; l < hp.n_layer; ++l) {
    lg[static_cast<size_t>(l)] = l * n_groups / hp.n_layer;
    lg_opt += (l ? "," : "") + std::to_string(lg[static_cast<size_t>(l)]);
  }
  d["layer_groups"] = lg;
  save_calibration(*model, "uncomp", d);
  const int rounds = env_ints("KVS_BENCH_ROUNDS", {3})[0];
  const int64_t min_tokens = env_ints("KVS_BENCH_STAGE_MIN_TOKENS", {0})[0];
  const int n_batch = env_ints("KVS_BENCH_N_BATCH", {0})[0];
  std::printf("model: %s — %s; 2 threads, KV f16; layer groups %s; last stage %s; n_batch %s\n\n", model->name.c_str(),
              hp.summary().c_str(), lg_opt.c_str(),
              min_tokens > 0 ? (std::to_string(min_tokens) + " rows").c_str() : "0.375 of the context",
              n_batch > 0 ? std::to_string(n_batch).c_str() : "the context");
  std::printf("| context | full prefill s | group-stage prefill s | faster by | rows through the layers (Eq. 10) |\n");
  std::printf("|---:|---:|---:|---:|---:|\n");
  for (int C : env_ints("KVS_BENCH_CTX", {2048, 8192})) {
    const auto ctx = random_tokens(C, hp.n_vocab, 42 + C);
    EngineParams ep;
    ep.n_threads = 2;
    ep.kv_dtype = DType::F16;
    ep.n_batch = n_batch > 0 ? n_batch : C;
    Engine e(*model, ep);
    CompressionSpec full_spec;
    full_spec.press = make_press("full");
    CompressionSpec gs;
    gs.press = make_press("uncomp", {{"variant", "group-stage"}, {"stage_min_tokens", std::to_string(min_tokens)}});
    gs.trigger = gs.press.trigger;
    gs.request.keep = 0.25;  // the row counts depend on stage_min only; keep 1 would not prune
    std::vector<double> tf, tg;
    for (int r = 0; r < rounds; ++r) {
      {
        CompressedContext c(e, full_spec);
        c.prefill(ctx);
        tf.push_back(c.prefill_seconds());
      }
      {
        CompressedContext c(e, gs);
        c.prefill(ctx);
        tg.push_back(c.prefill_seconds());
      }
    }
    const double f = median(tf), g = median(tg);
    double rows = 0;
    for (int64_t r : uncomp_stage_rows(lg, C, 0.375, 9, min_tokens)) rows += static_cast<double>(r);
    std::printf("| %d | %.2f | %.2f | %.0f%% | %.0f%% |\n", C, f, g, 100.0 * (1.0 - g / f),
                100.0 * rows / (static_cast<double>(C) * hp.n_layer));
    std::fflush(stdout);
  }
  ::unsetenv("KVSHRINK_CALIB_DIR");
}

}  // namespace
}  // namespace kvs
