// kvshrink bench: prefill tokens/s at several prompt lengths and decode tokens/s at several
// context lengths, for one or more thread counts, as a markdown table. With --press (and --keep,
// or whatever else `kvshrink compress` takes), each decode context is compressed after its
// prefill, exactly as `compress` does (CompressedContext), before the timed decode steps.
#include <fmt/format.h>

#include <random>

#include "cli_common.h"
#include "core/error.h"
#include "core/mapped_file.h"
#include "core/timer.h"
#include "kernels/cpu/kernel_table.h"
#include "kernels/matmul.h"
#include "model/gguf/gguf.h"
#include "press_options.h"
#include "runtime/session.h"

namespace kvs::cli {
namespace {

struct BenchOptions {
  EngineOptions eng;
  PressOptions press;  // "full" (the default): decode on the whole context
  std::vector<int> prompt_lens{128, 512, 2048};
  std::vector<int> ctx_lens{0, 512, 2048};
  std::vector<int> threads;
  int n_decode = 32;
  int reps = 1;
  bool huge_pages = false;
};

// Benchmark feature: moves the GGUF tensor data into transparent huge pages (core/mapped_file.h)
// before measuring. Returns the bytes moved.
size_t weights_to_huge_pages(const Model& m) {
  if (!m.gguf_file) return 0;
  const uint8_t *lo = nullptr, *hi = nullptr;
  for (const TensorView& t : m.gguf_file->tensors()) {
    const auto* p = static_cast<const uint8_t*>(t.data);
    if (!lo || p < lo) lo = p;
    if (!hi || p + t.nbytes > hi) hi = p + t.nbytes;
  }
  return lo ? map_huge_pages(lo, static_cast<size_t>(hi - lo)) : 0;
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> d(3, n_vocab - 1);  // avoid special ids at the bottom
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

void run_bench(BenchOptions o) {
  // Lengths are token counts: refused outside 1..2^20 (prefill) / 0..2^20 (decode context)
  // before anything is loaded or allocated.
  require_ints("--prompt-lens", o.prompt_lens, 1, kMaxTokensOption);
  require_ints("--ctx-lens", o.ctx_lens, 0, kMaxTokensOption);
  require_int("--n-decode", o.n_decode, 1, 100000);
  require_int("--reps", o.reps, 1, 100);
  if (o.threads.empty()) o.threads.push_back(o.eng.threads);
  for (int& th : o.threads) th = capped_threads("--thread-list", th);
  // The press is checked (name, --keep, --opt, ...) before the model is loaded.
  const bool pressed = o.press.press != "full";
  const CompressionSpec spec = o.press.spec();
  if (!pressed && (!o.press.keep.empty() || o.press.budget > 0 || o.press.quality != 0))
    fail("--keep, --budget and --quality compress the decode contexts with a press: give --press too "
         "(e.g. --press snapkv; the default 'full' keeps everything)");
  auto model = Model::load(o.eng.model);
  const size_t huge = o.huge_pages ? weights_to_huge_pages(*model) : 0;
  fmt::print("model: {} — {}\nweights: {}; kv type {}; kernels {}, OpenBLAS {}; weights in huge pages: {}\n",
             model->name, model->hp.summary(), format_bytes(model->weight_bytes()), o.eng.kv_type,
             kernels::active_kernels().name, kernels::blas_core_name(), format_bytes(huge));
  if (pressed) {
    // What the press was built with: its allocator, the options given, the protected tokens.
    std::string opts;
    for (const std::string& kv : o.press.opts) opts += " " + kv;
    fmt::print("decode contexts compressed after prefill: press {}, keep {} (no eviction during the timed steps)\n"
               "press built: allocator {}, sinks {}, window {}, options:{}\n",
               spec.press.name, spec.request.describe(), spec.press.allocator ? spec.press.allocator->name() : "none",
               spec.request.sinks, spec.request.window, opts.empty() ? " (defaults)" : opts);
  }
  fmt::print("\n| threads | test | tokens/s | ms/token | kv held |{}\n|---:|---|---:|---:|---:|{}\n",
             pressed ? " kv kept |" : "", pressed ? "---:|" : "");
  const int V = model->hp.n_vocab;
  for (int th : o.threads) {
    EngineOptions eo = o.eng;
    eo.threads = th;  // already capped
    Engine engine(*model, eo.params());
    const int nth = engine.pool().size();
    // Warm-up: touches every weight page once.
    {
      auto c = engine.new_cache();
      auto toks = random_tokens(16, V, 7);
      engine.forward(*c, toks, Logits::Last);
    }
    for (int P : o.prompt_lens) {
      double best = 1e30;
      size_t held = 0;
      for (int r = 0; r < o.reps; ++r) {
        auto c = engine.new_cache();
        auto toks = random_tokens(P, V, 100 + r);
        Timer t;
        engine.forward(*c, toks, Logits::Last);
        best = std::min(best, t.seconds());
        held = c->bytes_held();
      }
      fmt::print("| {} | prefill pp{} | {:.1f} | {:.3f} | {} |{}\n", nth, P, P / best, 1e3 * best / P, format_bytes(held),
                 pressed ? " (not pressed) |" : "");
    }
    for (int C : o.ctx_lens) {
      double best = 1e30;
      size_t held = 0;
      double kept = 1.0;  // fraction of the context's KV slots kept by the press
      for (int r = 0; r < o.reps; ++r) {
        // Prefilled (and, with a press, compressed: the same path as `kvshrink compress`) context.
        std::unique_ptr<CompressedContext> ctx;
        std::unique_ptr<KvCache> plain;
        if (pressed && C > 0) {
          ctx = std::make_unique<CompressedContext>(engine, spec);
          ctx->prefill(random_tokens(C, V, 200 + r));
          kept = ctx->keep_measured();
        } else {
          plain = engine.new_cache();
          if (C > 0) engine.forward(*plain, random_tokens(C, V, 200 + r), Logits::None);
        }
        KvCache& c = ctx ? ctx->cache() : *plain;
        auto toks = random_tokens(o.n_decode, V, 300 + r);
        Timer t;
        for (int i = 0; i < o.n_decode; ++i) engine.forward(c, std::span<const int32_t>(&toks[i], 1), Logits::Last);
        best = std::min(best, t.seconds());
        held = c.bytes_held();
      }
      fmt::print("| {} | decode tg{} @ ctx {} | {:.1f} | {:.3f} | {} |{}\n", nth, o.n_decode, C, o.n_decode / best,
                 1e3 * best / o.n_decode, format_bytes(held), pressed ? fmt::format(" {:.3f} |", kept) : "");
    }
  }
}

}  // namespace

void register_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "measure prefill and decode speed");
  o->eng.add(cmd);
  add_press_options(cmd, o->press);  // --press, --keep, --opt, ... as for `kvshrink compress`
  cmd->add_option("-p,--prompt-lens", o->prompt_lens, "prefill lengths (1..1048576 tokens)")->delimiter(',')->capture_default_str();
  cmd->add_option("-d,--ctx-lens", o->ctx_lens, "context lengths for decode (0..1048576 tokens)")->delimiter(',')->capture_default_str();
  cmd->add_option("-n,--n-decode", o->n_decode, "decode steps per measurement")->capture_default_str()->check(CLI::Range(1, 100000));
  cmd->add_option("--thread-list", o->threads, "thread counts to test (default: -t; capped at 4 x the cores)")->delimiter(',');
  cmd->add_option("-r,--reps", o->reps, "repetitions (best is reported)")->capture_default_str()->check(CLI::Range(1, 100));
  cmd->add_flag("--huge-pages", o->huge_pages,
                "move the weights into transparent huge pages first (GGUF; Q4_0/Q8_0 weights repacked at load "
                "run from their own copy, so for them this only copies the file's bytes)");
  cmd->callback([o] { run_bench(*o); });
}

}  // namespace kvs::cli
