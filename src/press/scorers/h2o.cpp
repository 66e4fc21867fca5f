// H2O (Zhang et al. 2023, "H2O: Heavy-Hitter Oracle for Efficient Generative Inference of Large
// Language Models", arXiv:2306.14048). Score = attention accumulated by each key over every
// query so far (summed over the query heads of the GQA group). The paper splits the cache evenly
// between heavy hitters and recent tokens: the h2o press does it with TopKSelector's recent share
// (recent_fraction of each head's budget). Used with Trigger::EveryN it evicts during decoding,
// as in the paper.
#include "core/error.h"
#include "press/scorers/scorers.h"

namespace kvs {

Scores H2oScorer::score(const ScoreContext& ctx) const {
  if (!ctx.stats || !ctx.stats->request().col_sum) fail("h2o needs accumulated attention statistics");
  Scores sc = make_scores(ctx.cache);
  const KvLayout& l = ctx.cache.layout();
  for (int i = 0; i < l.n_heads_total(); ++i) {
    const int layer = i / l.n_head_kv, kvh = i % l.n_head_kv;
    const auto& cs = ctx.stats->col_sum(layer, kvh);
    auto& out = sc.s[static_cast<size_t>(i)];
    for (size_t s = 0; s < out.size(); ++s) out[s] = s < cs.size() ? cs[s] : 0.0f;
  }
  return sc;
}

}  // namespace kvs
