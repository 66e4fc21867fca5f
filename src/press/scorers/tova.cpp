// TOVA (Oren et al. 2024, "Transformers are Multi-State RNNs", arXiv:2401.06104): keep the tokens
// the last query attends to most. The paper's policy averages the attention over all the heads
// of a layer, so every KV head of a layer evicts the same tokens (kvpress: attn[..., -1, :].mean
// over heads, repeated for each KV head). Heads of a layer hold the same positions under TOVA;
// the average is taken by position so that it stays defined when they do not (a head that does
// not hold a position contributes 0, as its attention to it is 0). per_head averages over the
// query heads of each KV head's group only. With Trigger::EveryN(1) it evicts the lowest-scored
// token at every decoding step, as in the paper.
#include <unordered_map>

#include "press/scorers/scorers.h"

namespace kvs {

Scores TovaScorer::score(const ScoreContext& ctx) const {
  Scores sc = make_scores(ctx.cache);
  const KvLayout& l = ctx.cache.layout();
  for (int layer = 0; layer < l.n_layer; ++layer) {
    auto att = window_attention(ctx, layer, 1);  // [kvh][slot], mean over the group's query heads
    if (per_head_) {
      for (int kvh = 0; kvh < l.n_head_kv; ++kvh) sc.at(l, layer, kvh) = std::move(att[kvh]);
      continue;
    }
    // Layer mean over all query heads = mean over KV heads of the group means (equal group sizes).
    std::unordered_map<int32_t, float> by_pos;
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      const HeadCache& h = ctx.cache.head(layer, kvh);
      for (int32_t s = 0; s < h.len(); ++s) by_pos[h.pos[static_cast<size_t>(s)]] += att[kvh][static_cast<size_t>(s)] / l.n_head_kv;
    }
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      const HeadCache& h = ctx.cache.head(layer, kvh);
      auto& out = sc.at(l, layer, kvh);
      for (int32_t s = 0; s < h.len(); ++s) out[static_cast<size_t>(s)] = by_pos[h.pos[static_cast<size_t>(s)]];
    }
  }
  return sc;
}

}  // namespace kvs
