#include "eval/perplexity.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/timer.h"
#include "runtime/engine_probe.h"

namespace kvs::eval {

PerplexityResult streaming_perplexity(Engine& engine, const CompressionSpec& spec, std::span<const int32_t> tokens,
                                      const PerplexityOptions& opt) {
  if (tokens.size() < 2) fail("perplexity needs at least 2 tokens");
  if (opt.chunk < 1) fail("perplexity chunk must be >= 1");
  if (spec.press.adaptive()) fail("press '{}' chooses its own budget; streaming perplexity needs a fixed one", spec.press.name);
  PerplexityResult r;
  Sequence seq;
  seq.cache = engine.new_cache();
  seq.stats = engine.new_stats(spec.press.needs().stats);
  const bool evict = opt.budget > 0 && !spec.press.is_full();
  const size_t V = static_cast<size_t>(engine.hp().n_vocab);
  const size_t n = tokens.size();
  r.nll.reserve(n - 1);
  double sum = 0;
  for (size_t b = 0; b < n; b += static_cast<size_t>(opt.chunk)) {
    const size_t m = std::min<size_t>(static_cast<size_t>(opt.chunk), n - b);
    Timer tf;
    const auto logits = engine.forward(*seq.cache, tokens.subspan(b, m), Logits::All, seq.stats.get());
    r.forward_seconds += tf.seconds();
    for (size_t i = 0; i < m && b + i + 1 < n; ++i) {
      const double nll = token_nll({logits.data() + i * V, V}, tokens[b + i + 1]);
      r.nll.push_back(static_cast<float>(nll));
      sum += nll;
    }
    r.peak_bytes = std::max(r.peak_bytes, seq.cache->bytes_held());
    if (evict && seq.cache->max_len() > opt.budget) {
      Timer tc;
      EngineProbe probe(engine, tokens.first(b + m));  // the text read so far is the probe's context
      evict_to_budget(engine, seq, spec, opt.budget, &probe);
      r.compress_seconds += tc.seconds();
      ++r.evictions;
    }
  }
  r.mean_nll = sum / static_cast<double>(r.nll.size());
  const KvLayout& l = seq.cache->layout();
  const size_t pages_per_head = (n + static_cast<size_t>(l.page_tokens) - 1) / static_cast<size_t>(l.page_tokens);
  r.full_slots = n * static_cast<size_t>(l.n_heads_total());
  r.full_bytes = pages_per_head * static_cast<size_t>(l.n_heads_total()) * l.page_bytes();
  r.end_bytes = seq.cache->bytes_held();
  r.end_slots = seq.cache->total_slots();
  return r;
}

}  // namespace kvs::eval
