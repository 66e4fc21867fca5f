// kvshrink bench-press: decode speed after compression at several keep ratios and context
// lengths, and each press's cost (statistics during prefill + scoring + compaction) as a
// fraction of the prefill time.
#include <fmt/format.h>

#include <map>
#include <random>

#include "cli_common.h"
#include "core/error.h"
#include "core/timer.h"
#include "press/registry.h"
#include "runtime/engine_probe.h"

namespace kvs::cli {
namespace {

struct BenchPressOptions {
  EngineOptions eng;
  std::vector<int> ctx_lens{2048, 8192};
  std::vector<double> keeps{1.0, 0.5, 0.25, 0.1};
  std::vector<std::string> presses;
  std::string decode_press = "snapkv";
  int n_decode = 32;
};

std::vector<int32_t> random_tokens(int n, int n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> d(3, n_vocab - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::string stats_key(const StatsRequest& r) {
  return fmt::format("{}{}{}w{}g{}{}", r.col_sum, r.col_max, r.pre_rope_keys, r.window, static_cast<int>(r.query_gram),
                     r.attn_input_moments);
}

void run_bench_press(BenchPressOptions o) {
  require_ints("--ctx-lens", o.ctx_lens, 1, kMaxTokensOption);
  require_numbers("--keep", o.keeps, 0, 1, /*lo_open=*/true);
  require_int("--n-decode", o.n_decode, 2, 100000);
  auto model = Model::load(o.eng.model);
  Engine engine(*model, o.eng.params());
  if (o.presses.empty())
    for (const auto& p : press_registry())
      if (p.name != "full") o.presses.push_back(p.name);
  const int V = model->hp.n_vocab;
  fmt::print("model: {} — {}; {} threads, kv {}\n\n", model->name, model->hp.summary(), engine.pool().size(), o.eng.kv_type);
  for (int C : o.ctx_lens) {
    const auto ctx = random_tokens(C, V, 42 + C);
    // One prefill per distinct statistics request (none, col sums, window, ...).
    std::map<std::string, std::pair<std::unique_ptr<KvCache>, std::unique_ptr<StatsCollector>>> prefilled;
    std::map<std::string, double> prefill_s;
    auto prefill = [&](const StatsRequest& req) -> std::string {
      const std::string key = stats_key(req);
      if (prefilled.count(key)) return key;
      auto cache = engine.new_cache();
      std::unique_ptr<StatsCollector> st = engine.new_stats(req);
      Timer t;
      engine.forward(*cache, ctx, Logits::None, st.get());
      prefill_s[key] = t.seconds();
      prefilled[key] = {std::move(cache), std::move(st)};
      return key;
    };
    const std::string base = prefill({});
    const double base_s = prefill_s[base];
    fmt::print("## context {} tokens: prefill {:.2f} s ({:.1f} tokens/s), KV held {}\n\n", C, base_s, C / base_s,
               format_bytes(prefilled[base].first->bytes_held()));
    fmt::print("| press | statistics during prefill | scoring + selection | compaction | total / prefill |\n");
    fmt::print("|---|---:|---:|---:|---:|\n");
    for (const auto& name : o.presses) {
      Press p = make_press(name);
      const std::string key = prefill(p.needs().stats);
      auto& [cache, st] = prefilled[key];
      auto fork = cache->fork();
      auto st_copy = st ? st->clone() : nullptr;
      CompressRequest r;
      if (!p.adaptive()) r.keep = 0.25;
      r.sinks = press_info(name).default_sinks;
      EngineProbe probe(engine, ctx);
      PressState state;
      CompressResult res = compress(*fork, st_copy.get(), p, r, engine.attn_shape(), engine.pool(), {&probe, &state});
      const double stats_s = st ? st->seconds() : 0.0;  // measured inside the collector
      fmt::print("| {} | {:.3f} s | {:.3f} s | {:.3f} s | {:.1f}% |\n", name, std::max(0.0, stats_s), res.score_seconds,
                 res.apply_seconds, 100.0 * (std::max(0.0, stats_s) + res.score_seconds + res.apply_seconds) / base_s);
    }
    fmt::print("\n| keep | KV held | decode tokens/s | ms/token |\n|---:|---:|---:|---:|\n");
    Press dp = make_press(o.decode_press);
    const std::string key = prefill(dp.needs().stats);
    for (double keep : o.keeps) {
      auto& [cache, st] = prefilled[key];
      auto fork = cache->fork();
      auto st_copy = st ? st->clone() : nullptr;
      CompressRequest r;
      r.keep = keep;
      EngineProbe probe(engine, ctx);
      PressState state;
      compress(*fork, st_copy.get(), dp, r, engine.attn_shape(), engine.pool(), {&probe, &state});
      const auto toks = random_tokens(o.n_decode, V, 7);
      engine.forward(*fork, std::span<const int32_t>(&toks[0], 1), Logits::Last);  // warm-up
      Timer t;
      for (int i = 1; i < o.n_decode; ++i) engine.forward(*fork, std::span<const int32_t>(&toks[i], 1), Logits::Last);
      const double s = t.seconds() / (o.n_decode - 1);
      fmt::print("| {} | {} | {:.1f} | {:.2f} |\n", keep, format_bytes(fork->bytes_held()), 1.0 / s, 1e3 * s);
    }
    fmt::print("\n");
  }
}

}  // namespace

void register_bench_press(CLI::App& app) {
  auto o = std::make_shared<BenchPressOptions>();
  CLI::App* cmd = app.add_subcommand("bench-press", "decode speed vs keep ratio, and each press's cost vs prefill");
  o->eng.add(cmd);
  cmd->add_option("-c,--ctx-lens", o->ctx_lens, "context lengths")->delimiter(',')->capture_default_str();
  cmd->add_option("--keep", o->keeps, "keep ratios for the decode measurement")->delimiter(',')->capture_default_str();
  cmd->add_option("--presses", o->presses, "presses to time (default: all)")->delimiter(',');
  cmd->add_option("--decode-press", o->decode_press, "press used for the decode measurement")->capture_default_str();
  cmd->add_option("-n,--n-decode", o->n_decode, "decode steps per measurement")->capture_default_str()->check(CLI::Range(2, 100000));
  cmd->callback([o] { run_bench_press(*o); });
}

}  // namespace kvs::cli
