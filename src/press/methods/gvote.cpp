// GVote as press parts (overview in gvote.h; numerics and the paper-open choices they involve in
// press/math/gvote_math.h). Choices made here:
//
//  - Which hidden states, and the norm. The listing (gvote.txt Appendix A, gvote_get_mask) fits
//    μ, σ to `hidden_states`, the attention module's input — in HF Llama/Qwen the output of the
//    layer's input RMSNorm — and projects the samples with F.linear(h, q_proj_weight), no norm.
//    We do the same: the collector keeps the channel-wise moments of LayerView::attn_in
//    (attn_norm(x), StatsRequest::attn_input_moments) and the samples go through
//    ModelProbe::project_attn_input_queries (W_q, RoPE; no norm). The listing adds no bias; we add
//    q_proj's bias where the model has one (Qwen2), because that is the module's query (a no-op
//    for Llama).
//  - σ: unbiased (n - 1, the listing's torch.std) from shifted sums (math/channel_stats.h); n =
//    the queries the layer saw (the prefill, when GVote compresses once after it); σ = 0 for a
//    one-token context.
//  - The question of a query-aware prefill (PressEnv::keep_last) is kept whatever the votes: the
//    listing compresses a prompt without a question, and every other query-aware press keeps the
//    question (SnapKV and UNComp through their observation window), so GVote does too.
//  - The last real query: the last query the collector saw for the layer (window = 1): in the
//    query-agnostic pipeline the context's last token; with --query-aware the question's last.
//    A_0 is its softmax over the keys it could see (positions <= its own), per query head.
//  - n_f (no value in the paper): 512 by default, the n_future_positions default of NVIDIA's
//    "expected attention" (kvpress), the notebook GVote cites for the Gaussian hidden states.
//  - Samples are drawn per layer (the listing fits one Gaussian per call, i.e. per layer), seeded
//    from the request's seed and the layer index, so a compression is reproducible.
//  - The union over query heads and samples is per KV head (our cache keeps tokens per KV head),
//    as the listing's torch.any over the group and then over the samples.
//  - Protected tokens (sinks, window; none by default) are kept on top of the union.
#include "press/methods/gvote.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/ops.h"
#include "press/math/gvote_math.h"
#include "press/scorers/scorers.h"

namespace kvs {

std::vector<std::vector<uint8_t>> gvote_layer_votes(const KvCache& cache, int layer, const AttnShape& shape,
                                                    const float* q_last, int32_t q_pos, const float* q_syn,
                                                    int n_samples, double p_nuc, std::vector<int64_t>* b_step) {
  const int H = shape.n_head, Hkv = shape.n_head_kv, D = shape.head_dim, G = H / Hkv;
  std::vector<std::vector<uint8_t>> keep(static_cast<size_t>(Hkv));
  if (b_step) b_step->assign(static_cast<size_t>(H), 0);
  std::vector<float> K, logit, prob, q;  // K [n][D]; q [G][S][D]
  std::vector<int64_t> budgets(static_cast<size_t>(G));
  for (int kvh = 0; kvh < Hkv; ++kvh) {
    const HeadCache& h = cache.head(layer, kvh);
    const int32_t n = h.len();
    K.resize(static_cast<size_t>(n) * D);
    for (int32_t s = 0; s < n; ++s) cache.read_k(layer, kvh, s, K.data() + static_cast<size_t>(s) * D);
    // Lines 1-3: B_step of every query head of the group from the last real query's attention.
    logit.assign(static_cast<size_t>(n), 0.0f);
    prob.assign(static_cast<size_t>(n), 0.0f);
    for (int g = 0; g < G; ++g) {
      const int qh = kvh * G + g;
      const float* q0 = q_last + static_cast<size_t>(qh) * D;
      float mx = -INFINITY;
      for (int32_t s = 0; s < n; ++s) {
        const int32_t kp = h.pos[static_cast<size_t>(s)], w = shape.window(layer);
        const bool visible = kp <= q_pos && (w == 0 || kp > q_pos - w);
        logit[s] = visible ? shape.logit(shape.scale * kernels::dot_f32(q0, K.data() + static_cast<size_t>(s) * D, D))
                           : -INFINITY;
        mx = std::max(mx, logit[s]);
      }
      double z = 0;
      for (int32_t s = 0; s < n; ++s) z += (prob[s] = std::isinf(logit[s]) ? 0.0f : std::exp(logit[s] - mx));
      for (int32_t s = 0; s < n; ++s) prob[s] = z > 0 ? static_cast<float>(prob[s] / z) : 0.0f;
      budgets[static_cast<size_t>(g)] = math::gvote_top_p_size(prob, p_nuc);
      if (b_step) (*b_step)[static_cast<size_t>(qh)] = budgets[static_cast<size_t>(g)];
    }
    // Lines 8-10: every synthetic query of every query head of the group votes; the union.
    q.resize(static_cast<size_t>(G) * n_samples * D);
    for (int g = 0; g < G; ++g)
      for (int s = 0; s < n_samples; ++s)
        std::copy_n(q_syn + (static_cast<size_t>(s) * H + kvh * G + g) * D, D,
                    q.data() + (static_cast<size_t>(g) * n_samples + s) * D);
    keep[static_cast<size_t>(kvh)] = math::gvote_union_votes(q, G, n_samples, K, n, D, D, budgets);
  }
  return keep;
}

std::vector<float> gvote_project(ModelProbe& probe, int layer, const float* attn_in, int n, int32_t first, int n_future) {
  const ProbeDims d = probe.dims();
  const std::vector<float> rope = probe.rope_table_mean(layer, first, n_future);
  std::vector<float> q(static_cast<size_t>(n) * d.n_head * d.head_dim);
  probe.project_attn_input_queries(layer, attn_in, n, rope.data(), /*rope_shared=*/true, q.data());
  return q;
}

std::vector<float> gvote_sample_layer(const StatsCollector& stats, int layer, int n_samples, uint64_t seed) {
  const math::ChannelStats& st = stats.attn_input_stats(layer);
  if (st.dim() < 1 || st.count() < 1)
    fail("gvote: no attention-input statistics for layer {} (was the context prefilled?)", layer);
  const std::vector<float> mu = st.mean();
  const std::vector<float> sigma = st.count() > 1 ? st.stddev(/*unbiased=*/true) : std::vector<float>(mu.size(), 0.0f);
  SplitMix64 mix(seed ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(layer + 1)));
  return math::gvote_sample_hidden(mu, sigma, n_samples, mix.next());
}

Scores GVoteScorer::score(const PressEnv& env) const {
  if (!env.probe) fail("gvote: needs the model probe (query projection)");
  if (!env.stats || env.stats->request().window < 1 || !env.stats->request().attn_input_moments)
    fail("gvote: needs the last query and attention-input statistics");
  const KvCache& c = env.cache;
  const KvLayout& l = c.layout();
  const AttnShape& sh = env.shape;
  Scores sc = make_scores(c);
  for (int layer = 0; layer < l.n_layer; ++layer) {
    const StatsCollector::Window& w = env.stats->window(layer);
    if (w.size() < 1) fail("gvote: no query seen for layer {} (was the context prefilled?)", layer);
    const float* q_last = w.q.data() + static_cast<size_t>(w.size() - 1) * sh.n_head * sh.head_dim;
    const int32_t q_pos = w.pos.back();
    const std::vector<float> h = gvote_sample_layer(*env.stats, layer, p_.samples, env.request.seed);
    const std::vector<float> q = gvote_project(*env.probe, layer, h.data(), p_.samples, c.n_past(), p_.n_future);
    const auto keep = gvote_layer_votes(c, layer, sh, q_last, q_pos, q.data(), p_.samples, p_.p_nuc);
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      auto& out = sc.at(l, layer, kvh);
      const auto& k = keep[static_cast<size_t>(kvh)];
      const std::vector<int32_t>& pos = c.head(layer, kvh).pos;
      for (size_t s = 0; s < out.size(); ++s)
        out[s] = k[s] || pos[s] >= c.n_past() - env.keep_last ? 1.0f : 0.0f;  // the question is kept
    }
  }
  return sc;
}

Allocation GVoteAllocator::allocate(const Scores& scores, const PressEnv& env) const {
  const KvCache& c = env.cache;
  const KvLayout& l = c.layout();
  Allocation a;
  a.budgets.assign(static_cast<size_t>(l.n_heads_total()), 0);
  size_t kept = 0, held = 0;
  for (int i = 0; i < l.n_heads_total(); ++i) {
    const HeadCache& h = c.head(i / l.n_head_kv, i % l.n_head_kv);
    const auto prot = protected_slots(h, c.n_past(), env.request);
    const auto& s = scores.s[static_cast<size_t>(i)];
    int32_t b = 0;
    for (int32_t j = 0; j < h.len(); ++j) b += prot[static_cast<size_t>(j)] || s[static_cast<size_t>(j)] > 0;
    a.budgets[static_cast<size_t>(i)] = b;
    kept += static_cast<size_t>(b);
    held += static_cast<size_t>(h.len());
  }
  a.keep_chosen = held ? static_cast<double>(kept) / static_cast<double>(held) : 1.0;
  return a;
}

void add_gvote_allocators(std::vector<AllocatorInfo>& allocators) {
  allocators.push_back({"gvote",
                        "adaptive: each head keeps the slots its scorer voted for (score > 0: GVote's union of votes) "
                        "and its protected tokens (no keep ratio to set)",
                        {},
                        [](const Params&, const Scorer&) { return std::make_shared<GVoteAllocator>(); }});
}

void add_gvote_presses(std::vector<PressInfo>& presses) {
  using T = ParamSpec::Type;
  presses.push_back(
      {"gvote", "Tang et al. 2025, GVote (ICLR 2026 submission)",
       "adaptive, no budget: synthetic future queries sampled from the hidden states' Gaussian vote for their top-p "
       "keys; each head keeps the union",
       {{"p_nuc", T::Float, "0.95", "nucleus threshold: B_step = top-p set size of the last query's attention", 1e-6, 1},
        {"samples", T::Int, "8", "S synthetic hidden states per layer", 1, 1024},
        {"n_future", T::Int, "512", "n_f: future positions RoPE is averaged over", 1, 1'000'000}},
       0, 0, {}, "gvote", [](const Params& p) {
         GVoteParams g;
         g.p_nuc = p.get_float("p_nuc");
         g.samples = static_cast<int>(p.get_int("samples"));
         g.n_future = static_cast<int>(p.get_int("n_future"));
         Press press;
         press.name = "gvote";
         press.scorer = std::make_shared<GVoteScorer>(g);
         return press;
       }});
}

}  // namespace kvs
