#include "scoring.h"

#include <limits>

#include "core/error.h"
#include "runtime/engine_probe.h"

namespace kvshrink::detail {

bool base_covers(const kvs::CompressedContext& base, const kvs::CompressionSpec& spec) {
  const kvs::Needs need = spec.press.needs();
  const kvs::StatsRequest have = base.stats() ? base.stats()->request() : kvs::StatsRequest{};
  return have.covers(need.stats) && !(need.context_nll && base.context_nll().empty());
}

std::vector<std::vector<float>> score_context(kvs::Engine& engine, const kvs::CompressedContext& base,
                                              std::span<const int32_t> context, const kvs::CompressionSpec& spec) {
  const kvs::Press& press = spec.press;
  if (press.is_full()) kvs::fail("keep_scores: press 'full' keeps every token and gives no scores");
  if (spec.trigger.kind == kvs::Trigger::Kind::MemoryCap || press.prunes_prefill(spec.request))
    kvs::fail("keep_scores: press '{}' with trigger '{}' compresses while the context is prefilled; scores are "
              "recorded only for presses that compress once after the prefill",
              press.name, spec.trigger.describe());
  kvs::check_request(press, spec.request);
  if (!base_covers(base, spec)) kvs::fail("keep_scores: the prefill did not collect what press '{}' needs", press.name);
  const kvs::KvCache& cache = base.cache();
  const kvs::KvLayout& l = cache.layout();
  // The same environment compress() builds; the press state is a copy (scoring must not change it).
  kvs::EngineProbe probe(engine, context, base.context_nll());
  kvs::PressState state = base.press_state();
  const kvs::AttnShape shape = engine.attn_shape();
  kvs::PressEnv env{cache, shape, base.stats(), engine.pool(), spec.request, &probe, &state};
  const kvs::Scores s = press.scorer->score(env);
  const int32_t n = cache.n_past();
  std::vector<std::vector<float>> out(static_cast<size_t>(l.n_heads_total()),
                                      std::vector<float>(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN()));
  for (int layer = 0; layer < l.n_layer; ++layer)
    for (int h = 0; h < l.n_head_kv; ++h) {
      const auto& pos = cache.head(layer, h).pos;   // [len] position of each slot
      const auto& sc = s.at(l, layer, h);           // [len] score of each slot
      KVS_ASSERT(sc.size() == pos.size());
      auto& row = out[static_cast<size_t>(layer * l.n_head_kv + h)];
      for (size_t i = 0; i < pos.size(); ++i) row[static_cast<size_t>(pos[i])] = sc[i];
    }
  return out;
}

}  // namespace kvshrink::detail
