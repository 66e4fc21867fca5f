#include "context_report.h"

#include <fmt/format.h>

#include "cli_common.h"

namespace kvs::cli {

void print_query_aware_memory(const CompressResult& r) {
  fmt::print(stderr, "   (memory: KV held {} full -> {} kept ({:.1f}%), {} of {} token slots of context + question (keep {:.3f}{}))\n",
             format_bytes(r.bytes_before), format_bytes(r.bytes_after),
             r.bytes_before ? 100.0 * r.bytes_after / r.bytes_before : 100.0, r.slots_after, r.slots_before,
             r.keep_measured(), r.keep_chosen ? fmt::format(", chosen {:.3f}", *r.keep_chosen) : "");
}

void print_context_report(const CompressedContext& ctx, Engine& engine, const PressOptions& po, bool per_layer,
                          bool query_aware) {
  const KvCache& c = ctx.cache();
  const KvLayout& l = c.layout();
  const auto& r = ctx.result();
  const double kept = ctx.keep_measured();
  const auto chosen = ctx.keep_chosen();
  fmt::print(stderr, "\npress {} (keep {}{}), {} context tokens, {}\n", ctx.spec().press.name,
             ctx.spec().request.describe(), chosen ? fmt::format(", chose keep {:.3f}", *chosen) : "",
             ctx.context_tokens(),
             query_aware ? "query-aware (compressed per question)" : "query-agnostic (compressed before the questions)");
  if (!query_aware) {
    fmt::print(stderr, "memory: KV held {} full -> {} kept ({:.1f}%), {} of {} token slots (keep {:.3f}{})\n",
               format_bytes(ctx.full_bytes()), format_bytes(c.bytes_held()),
               ctx.full_bytes() ? 100.0 * c.bytes_held() / ctx.full_bytes() : 100.0, c.total_slots(), ctx.full_slots(), kept,
               chosen ? fmt::format(", chosen {:.3f}", *chosen) : "");
    fmt::print(stderr, "time: context prefill {:.3f} s, scoring {:.3f} s, compaction {:.3f} s\n", ctx.prefill_seconds(),
               r.score_seconds, r.apply_seconds);
  }
  // Models with sliding-window layers: bytes per layer kind (a local layer keeps its window).
  const AttnShape shape = engine.attn_shape();
  if (shape.n_swa > 0) {
    size_t local = 0, global = 0;
    int n_local = 0;
    for (int layer = 0; layer < l.n_layer; ++layer) {
      const bool is_local = shape.window(layer) > 0;
      (is_local ? local : global) += c.bytes_held(layer);
      n_local += is_local;
    }
    fmt::print(stderr, "KV by layer kind: {} local layers (window {}) {}, {} global layers {}\n", n_local, shape.n_swa,
               format_bytes(local), l.n_layer - n_local, format_bytes(global));
  }
  fmt::print(stderr, "pool: {} in use, high-water {}\n", format_bytes(engine.page_pool().bytes_in_use()),
             format_bytes(engine.page_pool().high_water_bytes()));
  if (per_layer && !query_aware) {
    const double full_len = static_cast<double>(ctx.full_slots()) / l.n_heads_total();
    for (int layer = 0; layer < l.n_layer; ++layer) {
      std::string s = fmt::format("layer {:>3}: ", layer);
      int64_t sum = 0;
      for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
        s += fmt::format("{:.3f} ", c.len(layer, kvh) / full_len);
        sum += c.len(layer, kvh);
      }
      fmt::print(stderr, "{} (layer {:.3f}, {}{})\n", s, sum / (full_len * l.n_head_kv), format_bytes(c.bytes_held(layer)),
                 shape.window(layer) > 0 ? ", local" : "");
    }
  }
}

}  // namespace kvs::cli
