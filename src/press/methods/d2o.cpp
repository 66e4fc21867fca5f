// D2O as press parts (see d2o.h for the overview; the numerics and the paper-vs-official choices
// they involve are in press/math/d2o_math.h). Choices made here, where the paper is open:
//
//  - Eq. 4 with GQA: our statistics sum each KV head's column over the query heads of its group;
//    dividing by the group size gives the group-mean column sums, the same scale as one query
//    head's (exact for MHA). The paper and the official code (Llama-2, MHA; Llama-3 after
//    repeat_kv) compute one variance per query head and average them; with GQA the variance of the
//    group mean is at most the mean of the heads' variances.
//  - Eq. 4 is computed once, at the sequence's first compression (the prompt's attention: every
//    query observed so far), and kept in the sequence's PressState; later compressions (decode-time
//    eviction, streaming perplexity) reuse it. Every compression then splits the request's total
//    by softmax(-F) (Eq. 5) with each head capped only at what it holds: with a fixed budget the
//    layer sizes are the paper's fixed S_l = α_l S ("maintain the compressed cache size S_l for
//    each layer", §4.2.1) once reached; a layer whose S_l exceeds what it holds (streaming: every
//    layer starts at the budget) keeps every token and grows to S_l while the others shrink to
//    theirs. A budget that grows (a longer question) scales every S_l with it. The allocator
//    writes that state through env.state directly (compress() hands the merger, not the
//    allocator, the transactional copy): if the edit is then refused, the state keeps F, which is
//    what a retry would compute from the same prompt statistics.
//  - Density: the head variances min-max normalised per layer (density=minmax, the default, the
//    official code's normalisation), because with the raw ones (density=raw, Eq. 5 read
//    literally) F spans a few units (v7s1: 0.96 to 3.36) and softmax(-F) starves sharp layers
//    (per-head targets 706, 64, 336, 622 for a uniform 432 at keep 0.25 of 1,728 tokens; v8s1's
//    induction layer kept its 4 sinks), far from the paper's results (docs/methods/d2o.md).
//  - Budgets are tokens per KV head: every head of layer l weighs softmax(-F)_l, so the heads of a
//    layer get equal budgets (up to one token of rounding), the paper's S_l. Protected tokens
//    (sinks, the request's window) always fit, as in every fixed allocator here.
//  - Token level (Eqs. 7-8): S = T + N + M, N:M = 3:1. The official code forces the first 4 tokens
//    into the heavy hitters (T = 4, our default sinks) and splits the rest by hh_ratio:recent_ratio.
//  - The official code never compresses layers 0, 1 and the last layer (a special case not in the
//    paper); we compress every layer unless layers=official (preset=official).
//  - Known departures of preset=official from the official code: the recent share is taken of
//    the budget beyond the sinks (the official takes it of the whole and forces the 4 sinks into
//    the heavy set); the first compression follows the request's trigger (the official
//    compresses first at the first decode step); the cache keeps KV heads (the official repeats
//    them per query head; its density and its one-per-layer threshold are followed:
//    density=minmax-query, threshold=layer).
//  - Similarity uses the cached (post-RoPE) keys, as the official code.
//  - Merged rows carry mass = the tokens they represent; with merge_mass Eq. 12 weighs a row by it
//    (d2o_math.h says why one might). Off by default: the paper's Eq. 12 weighs every kept row as
//    one member and the official code keeps no counts, and on the testbed the masses did not help
//    (streamed PG-19/WikiText-2 NLL +0.003 to +0.046 against without, within 1-2 standard errors;
//    docs/results/issue22-fidelity). Attention uses the weighted-average row, as Eq. 11 defines it.
#include "press/methods/d2o.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/warn.h"
#include "kernels/ops.h"
#include "press/math/apportion.h"
#include "press/scorers/scorers.h"
#include "press/select/topk.h"

namespace kvs {

std::vector<double> d2o_layer_F(const StatsCollector& stats, math::D2oDensity density) {
  if (!stats.request().col_sum) fail("d2o: layer budgets need accumulated attention (col_sum) statistics");
  const KvLayout& l = stats.layout();
  const AttnShape& sh = stats.shape();
  const int group = sh.n_head / sh.n_head_kv;
  std::vector<float> cs;
  if (density == math::D2oDensity::OfficialMinMaxQueryHeads) {
    // The official code: attn_sum.var(-1) per query head (its own column sums; repeat_kv makes a
    // KV head's slots every query head's), min-max over the layer's query heads, then the mean.
    if (!stats.request().col_sum_query_heads)
      fail("d2o: density=minmax-query needs per-query-head column sums (col_sum_query_heads statistics)");
    std::vector<double> qh_var(static_cast<size_t>(l.n_layer) * sh.n_head);
    for (int layer = 0; layer < l.n_layer; ++layer)
      for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
        const auto& src = stats.col_sum_query_heads(layer, kvh);  // [len][group]
        const size_t len = src.size() / static_cast<size_t>(group);
        for (int g = 0; g < group; ++g) {
          cs.resize(len);
          for (size_t s = 0; s < len; ++s) cs[s] = src[s * static_cast<size_t>(group) + static_cast<size_t>(g)];
          qh_var[static_cast<size_t>(layer) * sh.n_head + static_cast<size_t>(kvh * group + g)] =
              math::d2o_column_sum_variance(cs, /*unbiased=*/true);
        }
      }
    return math::d2o_layer_density(qh_var, l.n_layer, sh.n_head, density);
  }
  if (density == math::D2oDensity::OfficialMinMax && l.n_head_kv <= 2)
    warn_once("d2o.minmax_kv_heads",
              fmt::format("d2o: density=minmax normalises over the {} KV head(s) of each layer, which gives every layer the "
                          "same F ({}): uniform budgets; density=minmax-query normalises over the query heads as the "
                          "official code",
                          l.n_head_kv, l.n_head_kv == 1 ? "0" : "0.5"));
  std::vector<double> head_var(static_cast<size_t>(l.n_heads_total()));
  for (int layer = 0; layer < l.n_layer; ++layer)
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      const auto& src = stats.col_sum(layer, kvh);
      cs.resize(src.size());
      for (size_t s = 0; s < src.size(); ++s) cs[s] = src[s] / static_cast<float>(group);
      head_var[static_cast<size_t>(layer * l.n_head_kv + kvh)] = math::d2o_column_sum_variance(cs, /*unbiased=*/true);
    }
  return math::d2o_layer_density(head_var, l.n_layer, l.n_head_kv, density);
}

namespace {

// Eq. 5's α over the layers a press may compress: a sliding-window layer beside global ones
// (AttnShape::press_skips: Gemma 2's even layers) holds its window, collects no attention
// statistics and takes no share — α 0 — and softmax(-F) and its factor L run over the other layers
// (the paper and the official code have only global layers; this is our reading for mixed models).
std::vector<double> layer_alpha(const std::vector<double>& F, double rho, const AttnShape& shape) {
  std::vector<double> Fg;
  std::vector<size_t> idx;
  for (size_t layer = 0; layer < F.size(); ++layer)
    if (!shape.press_skips(static_cast<int>(layer))) Fg.push_back(F[layer]), idx.push_back(layer);
  const std::vector<double> ag = math::d2o_alpha(Fg, rho);
  std::vector<double> a(F.size(), 0.0);
  for (size_t i = 0; i < idx.size(); ++i) a[idx[i]] = ag[i];
  return a;
}

// layers=official (D2oLayers::Official): the official code's fixed per-layer token counts.
// The request's total (tokens over every head) and a warning when `a` holds more than a tenth
// above it (layers=official leaves layers 0, 1 and L-1 whole: keep 0.25 holds ~0.53 on v8s1).
void warn_if_over_request(const KvCache& c, const CompressRequest& req, const Allocation& a) {
  const KvLayout& l = c.layout();
  int64_t held = 0, kept = 0;
  for (int i = 0; i < l.n_heads_total(); ++i) held += c.len(i / l.n_head_kv, i % l.n_head_kv);
  for (int32_t b : a.budgets) kept += b;
  const int64_t total = std::min<int64_t>(held, req.max_tokens > 0 ? static_cast<int64_t>(req.max_tokens) * l.n_heads_total()
                                                          : std::llround(*req.keep * static_cast<double>(held)));
  if (held == 0 || static_cast<double>(kept) <= 1.1 * static_cast<double>(total)) return;
  warn_once("d2o.over_request",
            fmt::format("d2o: this compression holds {:.3f} of the cache ({} of {} slots) where the request asks {:.3f}: "
                        "layers=official (preset=official) never compresses layers 0, 1 and {} (the official code's "
                        "behaviour); layers=paper holds the request",
                        static_cast<double>(kept) / held, kept, held, static_cast<double>(total) / held, l.n_layer - 1));
}

Allocation allocate_official(const KvCache& c, const CompressRequest& req, const std::vector<double>& F, PressState* state,
                             const AttnShape& shape) {
  const KvLayout& l = c.layout();
  const int L = l.n_layer, H = l.n_head_kv, n = l.n_heads_total();
  std::vector<double> fixed;
  if (state) {
    const auto it = state->values.find(kD2oLayerFixed);
    if (it != state->values.end() && it->second.size() == static_cast<size_t>(L)) fixed = it->second;
  }
  if (fixed.empty()) {
    // modeling_llama3_new.py: ratio_l = softmax(-F)_l * L * (hh_ratio + recent_ratio), clamped to
    // [0.01, 1]; modeling_llama3_7b_13b_d2o.py, first decode step: hh_size = int((P+1) r_l hh/ρ),
    // recent_size = int((P+1) r_l recent/ρ) (1:1 in every official run), layers 0, 1 and L-1 pass
    // through, and a layer with cache_size >= P - 1 is returned uncompressed (and then never
    // satisfies the compression test again). ρ here: the request's total over what is held.
    int64_t held = 0;
    for (int i = 0; i < n; ++i) held += c.len(i / H, i % H);
    const int64_t total = req.max_tokens > 0 ? static_cast<int64_t>(req.max_tokens) * n
                                             : std::llround(*req.keep * static_cast<double>(held));
    const double rho = held > 0 ? std::min(1.0, static_cast<double>(total) / static_cast<double>(held)) : 1.0;
    const std::vector<double> alpha = layer_alpha(F, rho, shape);  // softmax(-F) L ρ
    fixed.assign(static_cast<size_t>(L), -1.0);
    for (int layer = 0; layer < L; ++layer) {
      if (layer == 0 || layer == 1 || layer == L - 1) continue;
      int64_t s0 = 0;  // the layer's longest head (the official cache has one length per layer)
      for (int h = 0; h < H; ++h) s0 = std::max<int64_t>(s0, c.len(layer, h));
      const double r = std::clamp(alpha[static_cast<size_t>(layer)], 0.01, 1.0);
      const int64_t half = static_cast<int64_t>(static_cast<double>(s0) * r / 2.0);
      if (2 * half >= s0 - 1) continue;
      // A ratio of 0.01 on a short prompt gives 0 tokens, where the official cache would hold
      // none: we keep one, so every head can be attended.
      fixed[static_cast<size_t>(layer)] = static_cast<double>(std::max<int64_t>(1, 2 * half));
    }
    if (state) state->values[kD2oLayerFixed] = fixed;
  }
  Allocation a;
  a.budgets.assign(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    const HeadCache& h = c.head(i / H, i % H);
    const double f = fixed[static_cast<size_t>(i / H)];
    const int32_t b = f < 0 ? h.len() : static_cast<int32_t>(std::min<double>(h.len(), f));
    a.budgets[static_cast<size_t>(i)] = std::max(b, std::min(h.len(), count_protected(h, c.n_past(), req)));
  }
  warn_if_over_request(c, req, a);
  return a;
}

}  // namespace

Allocation D2oAllocator::allocate(const Scores&, const PressEnv& env) const {
  const KvCache& c = env.cache;
  const KvLayout& l = c.layout();
  const CompressRequest& req = env.request;
  KVS_ASSERT(req.has_budget());
  const int L = l.n_layer, H = l.n_head_kv;
  const int n = l.n_heads_total();
  // F (Eq. 4) is fixed at the sequence's first compression (the prompt's attention; see the file
  // comment); later compressions reuse it from the state.
  std::vector<double> F;
  if (env.state) {
    const auto f = env.state->values.find(kD2oLayerF);
    if (f != env.state->values.end() && f->second.size() == static_cast<size_t>(L)) F = f->second;
  }
  if (F.empty()) {
    if (!env.stats) fail("d2o allocator: needs accumulated attention statistics (col_sum)");
    F = d2o_layer_F(*env.stats, density_);
    if (env.state) env.state->values[kD2oLayerF] = F;
  }
  if (layers_ == D2oLayers::Official) return allocate_official(c, req, F, env.state, env.shape);
  // Eq. 5: S_l = α_l S per head, α_l ∝ softmax(-F)_l (d2o_alpha with ρ = 1 is softmax x L; the
  // total below carries ρ). Apportioned per head (every head of layer l weighs softmax(-F)_l), so
  // the heads of a layer get equal budgets up to one token. Each head is capped only at what it
  // holds: a layer below its share keeps everything (and grows toward it with the next tokens),
  // what it cannot take yet goes to the others in proportion to their α, so the total is always
  // the request's and, once every layer has reached its share, the sizes are Eq. 5's.
  const std::vector<double> alpha = layer_alpha(F, 1.0, env.shape);
  std::vector<double> w(static_cast<size_t>(n));
  std::vector<int64_t> cap(static_cast<size_t>(n));
  int64_t held = 0;
  for (int i = 0; i < n; ++i) {
    const int32_t len = c.len(i / H, i % H);
    w[static_cast<size_t>(i)] = alpha[static_cast<size_t>(i / H)];
    cap[static_cast<size_t>(i)] = len;
    held += len;
  }
  int64_t total = req.max_tokens > 0 ? static_cast<int64_t>(req.max_tokens) * n
                                     : std::llround(*req.keep * static_cast<double>(held));
  total = std::min(total, held);
  const std::vector<int64_t> per_head = math::apportion(w, total, cap);
  if (env.state) {  // Eq. 5's targets (no caps), per KV head, for inspection
    const std::vector<int64_t> target = math::apportion(w, total);
    std::vector<double> lt(static_cast<size_t>(L), 0.0);
    for (int i = 0; i < n; ++i) lt[static_cast<size_t>(i / H)] += static_cast<double>(target[static_cast<size_t>(i)]) / H;
    env.state->values[kD2oLayerTarget] = lt;
  }
  Allocation a;
  a.budgets.assign(static_cast<size_t>(n), 0);
  for (int i = 0; i < n; ++i) {
    const HeadCache& h = c.head(i / H, i % H);
    const int32_t b = static_cast<int32_t>(per_head[static_cast<size_t>(i)]);
    a.budgets[static_cast<size_t>(i)] = std::max(b, std::min(h.len(), count_protected(h, c.n_past(), req)));
  }
  return a;
}

CacheEdit D2oSelector::select(const Scores& scores, const Budgets& budgets, const PressEnv& env) const {
  const KvCache& c = env.cache;
  const KvLayout& l = c.layout();
  CacheEdit edit(l);
  for (int i = 0; i < l.n_heads_total(); ++i) {
    const HeadCache& h = c.head(i / l.n_head_kv, i % l.n_head_kv);
    const int32_t b = budgets[static_cast<size_t>(i)];
    if (b >= h.len()) continue;
    HeadEdit& e = edit.heads[static_cast<size_t>(i)];
    e.active = true;
    std::vector<bool> taken = protected_slots(h, c.n_past(), env.request);
    int32_t n_prot = 0;
    for (bool t : taken) n_prot += t;
    // M newest unprotected slots, then the N best scores (Eq. 8), within the budget.
    const int32_t room = std::max(0, b - n_prot);
    const int32_t M = static_cast<int32_t>(std::lround(recent_share_ * room));
    int32_t n_taken = n_prot;
    for (int32_t s = h.len() - 1, m = 0; s >= 0 && m < M && n_taken < b; --s)
      if (!taken[s]) taken[s] = true, ++m, ++n_taken;
    for (int32_t s = 0; s < h.len(); ++s)
      if (taken[s]) e.keep.push_back(s);
    const int32_t rest = b - static_cast<int32_t>(e.keep.size());
    if (rest > 0) {
      auto top = top_k_slots(scores.s[static_cast<size_t>(i)], rest, taken);
      e.keep.insert(e.keep.end(), top.begin(), top.end());
    }
    std::sort(e.keep.begin(), e.keep.end());
  }
  return edit;
}

math::D2oNearest d2o_nearest_in_cache(const KvCache& c, int layer, int kvh, std::span<const int32_t> kept,
                                      std::span<const float> evicted, int64_t n_evicted) {
  const int D = c.layout().head_dim;
  KVS_ASSERT(evicted.size() == static_cast<size_t>(n_evicted) * D);
  math::D2oNearest out;
  out.index.assign(static_cast<size_t>(n_evicted), 0);
  out.sim.assign(static_cast<size_t>(n_evicted), -INFINITY);
  if (n_evicted == 0) return out;
  if (kept.empty()) fail("d2o: {} evicted pairs but no kept pair to match", n_evicted);
  std::vector<float> inv_e(static_cast<size_t>(n_evicted));  // 1 / |k_e| (0 for a zero key)
  for (int64_t i = 0; i < n_evicted; ++i) {
    const float* e = evicted.data() + i * D;
    const double n2 = kernels::dot_f32(e, e, D);
    inv_e[static_cast<size_t>(i)] = n2 > 0 ? static_cast<float>(1.0 / std::sqrt(n2)) : 0.0f;
  }
  std::vector<float> row(static_cast<size_t>(D));
  for (size_t j = 0; j < kept.size(); ++j) {
    c.read_k(layer, kvh, kept[j], row.data());  // any cache type (F16, Q8_0, ... dequantised)
    const float* k = row.data();
    const double n2 = kernels::dot_f32(k, k, D);
    const float inv_k = n2 > 0 ? static_cast<float>(1.0 / std::sqrt(n2)) : 0.0f;
    for (int64_t i = 0; i < n_evicted; ++i) {
      const float u = kernels::dot_f32(evicted.data() + i * D, k, D) * inv_e[static_cast<size_t>(i)] * inv_k;
      if (u > out.sim[static_cast<size_t>(i)]) {  // strict: ties keep the lowest kept index
        out.sim[static_cast<size_t>(i)] = u;
        out.index[static_cast<size_t>(i)] = static_cast<int32_t>(j);
      }
    }
  }
  return out;
}

namespace {

// Below this many evicted pairs per head (a decode step evicts one) the nearest kept pair is found
// reading the kept keys in place (one pass, no copies); above it, by blocked sgemm on copies.
constexpr int64_t kFewEvicted = 16;

// One head's evicted pairs and their nearest kept pairs (Eq. 9).
struct HeadNearest {
  std::vector<int32_t> evicted;  // slots, ascending
  std::vector<float> ev_k;       // [n_evicted][D]
  math::D2oNearest near;
};

HeadNearest nearest_of_head(const KvCache& c, int layer, int kvh, const HeadEdit& e) {
  HeadNearest hn;
  const int D = c.layout().head_dim;
  const int32_t len = c.head(layer, kvh).len();
  const int64_t n_kept = static_cast<int64_t>(e.keep.size());
  if (!e.active || n_kept == 0 || n_kept == len) return hn;
  hn.evicted.reserve(static_cast<size_t>(len - n_kept));
  for (int32_t s = 0, j = 0; s < len; ++s) {
    if (j < n_kept && e.keep[static_cast<size_t>(j)] == s) {
      ++j;
      continue;
    }
    hn.evicted.push_back(s);
  }
  const int64_t n_ev = static_cast<int64_t>(hn.evicted.size());
  hn.ev_k.resize(static_cast<size_t>(n_ev) * D);  // [n_ev][D]
  for (int64_t i = 0; i < n_ev; ++i) c.read_k(layer, kvh, hn.evicted[static_cast<size_t>(i)], hn.ev_k.data() + i * D);
  if (n_ev <= kFewEvicted) {
    hn.near = d2o_nearest_in_cache(c, layer, kvh, e.keep, hn.ev_k, n_ev);
  } else {
    std::vector<float> kept_k(static_cast<size_t>(n_kept) * D);  // [n_kept][D]
    for (int64_t j = 0; j < n_kept; ++j) c.read_k(layer, kvh, e.keep[static_cast<size_t>(j)], kept_k.data() + j * D);
    hn.near = math::d2o_nearest(kept_k, n_kept, hn.ev_k, n_ev, D);
  }
  return hn;
}

// One head: Eqs. 11-12 on the evicted pairs of `hn` with merge[i] set (the others dropped).
void merge_head(const KvCache& c, int layer, int kvh, HeadEdit& e, const HeadNearest& hn, const std::vector<bool>& merge,
                math::D2oMerge mode, bool use_mass) {
  const HeadCache& h = c.head(layer, kvh);
  const int D = c.layout().head_dim;
  const int64_t n_kept = static_cast<int64_t>(e.keep.size());
  const int64_t n_ev = static_cast<int64_t>(hn.evicted.size());
  const std::vector<int32_t>& evicted = hn.evicted;
  const std::vector<float>& ev_k = hn.ev_k;
  const math::D2oNearest& near = hn.near;
  // Eqs. 11-12 on the kept pairs that receive something (the others keep weight 1): the merge is
  // run on that subset with the merged evicted pairs only (same weights: S_j sums over the pairs
  // merged into j).
  std::vector<int32_t> sub_of(static_cast<size_t>(n_kept), -1);  // kept index -> target index
  std::vector<int32_t> targets, m_near;                            // kept indices; nearest per merged pair
  std::vector<int64_t> merged;                                     // evicted indices merged
  std::vector<float> m_sim;
  for (int64_t i = 0; i < n_ev; ++i) {
    if (!merge[static_cast<size_t>(i)]) continue;  // under τ: dropped for good
    const int32_t j = near.index[static_cast<size_t>(i)];
    if (sub_of[static_cast<size_t>(j)] < 0) {
      sub_of[static_cast<size_t>(j)] = static_cast<int32_t>(targets.size());
      targets.push_back(j);
    }
    merged.push_back(i);
    m_near.push_back(sub_of[static_cast<size_t>(j)]);
    m_sim.push_back(near.sim[static_cast<size_t>(i)]);
  }
  if (merged.empty()) return;
  const int64_t nt = static_cast<int64_t>(targets.size()), nm = static_cast<int64_t>(merged.size());
  std::vector<float> tk(static_cast<size_t>(nt) * D), tv(tk.size());  // [nt][D] target rows
  std::vector<float> mk(static_cast<size_t>(nm) * D), mv(mk.size());  // [nm][D] merged evicted rows
  for (int64_t r = 0; r < nt; ++r) {
    const int32_t slot = e.keep[static_cast<size_t>(targets[static_cast<size_t>(r)])];
    c.read_k(layer, kvh, slot, tk.data() + r * D);
    c.read_v(layer, kvh, slot, tv.data() + r * D);
  }
  for (int64_t r = 0; r < nm; ++r) {
    const int64_t i = merged[static_cast<size_t>(r)];
    std::copy_n(ev_k.data() + static_cast<size_t>(i) * D, D, mk.data() + r * D);
    c.read_v(layer, kvh, evicted[static_cast<size_t>(i)], mv.data() + r * D);
  }
  // Mass: the tokens each row stands for (its own and those folded into it earlier).
  auto mass_of = [&](int32_t slot) { return h.mass.empty() ? 1.0f : h.mass[static_cast<size_t>(slot)]; };
  std::vector<float> t_mass(static_cast<size_t>(nt)), m_mass(static_cast<size_t>(nm));
  for (int64_t r = 0; r < nt; ++r) t_mass[static_cast<size_t>(r)] = mass_of(e.keep[static_cast<size_t>(targets[r])]);
  for (int64_t r = 0; r < nm; ++r) m_mass[static_cast<size_t>(r)] = mass_of(evicted[static_cast<size_t>(merged[r])]);
  const bool weigh = use_mass && mode == math::D2oMerge::PaperEq12;
  math::d2o_merge(tk, tv, nt, D, D, mk, mv, m_near, m_sim, -INFINITY, mode, weigh ? std::span<const float>(t_mass) : std::span<const float>{},
                  weigh ? std::span<const float>(m_mass) : std::span<const float>{});
  std::vector<float> mass = t_mass;
  for (int64_t r = 0; r < nm; ++r) mass[static_cast<size_t>(m_near[static_cast<size_t>(r)])] += m_mass[static_cast<size_t>(r)];
  for (int64_t r = 0; r < nt; ++r) {
    RowWrite wr;
    wr.slot = e.keep[static_cast<size_t>(targets[static_cast<size_t>(r)])];
    wr.k.assign(tk.begin() + r * D, tk.begin() + (r + 1) * D);
    wr.v.assign(tv.begin() + r * D, tv.begin() + (r + 1) * D);
    wr.mass = mass[static_cast<size_t>(r)];
    e.writes.push_back(std::move(wr));
  }
}

}  // namespace

void D2oMerger::merge(const Scores&, const PressEnv& env, CacheEdit& edit) const {
  if (!env.state) fail("d2o: merging needs the sequence's press state (its EMA thresholds)");
  const KvLayout& l = env.cache.layout();
  const int H = l.n_head_kv;
  const size_t n = static_cast<size_t>(l.n_heads_total());
  const size_t n_thr = per_layer_ ? static_cast<size_t>(l.n_layer) : n;
  auto& tau = env.state->values[per_layer_ ? kD2oLayerTau : kD2oTau];
  auto& set = env.state->values[per_layer_ ? kD2oLayerTauSet : kD2oTauSet];
  if (tau.size() != n_thr || set.size() != n_thr) {  // first use (or a state from another shape): start afresh
    tau.assign(n_thr, 0.0);
    set.assign(n_thr, 0.0);
  }
  std::vector<HeadNearest> hn(n);
  env.pool.parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      hn[static_cast<size_t>(i)] =
          nearest_of_head(env.cache, static_cast<int>(i / H), static_cast<int>(i % H), edit.heads[static_cast<size_t>(i)]);
  });
  // Eq. 10 and the merge decisions.
  std::vector<std::vector<bool>> merge(n);
  if (!per_layer_) {
    for (size_t i = 0; i < n; ++i) {
      if (hn[i].evicted.empty()) continue;
      math::D2oThreshold thr = set[i] != 0 ? math::D2oThreshold(beta_, tau[i]) : math::D2oThreshold(beta_);
      const double t = thr.update(hn[i].near.sim);
      tau[i] = t;
      set[i] = 1;
      merge[i].resize(hn[i].evicted.size());
      for (size_t k = 0; k < hn[i].evicted.size(); ++k) merge[i][k] = hn[i].near.sim[k] >= t;
    }
  } else {
    // The official code (D2O_LayerKVCache.__call__): one threshold per layer, the EMA of the mean
    // over heads and evicted pairs of the max similarities; the k-th evicted pair of every head
    // (ascending positions, as its mask order) is merged iff the mean over the heads of their
    // k-th max similarity reaches it (max_values.mean(1) >= threshold).
    for (int layer = 0; layer < l.n_layer; ++layer) {
      std::vector<float> all;
      size_t cols = 0;
      for (int kvh = 0; kvh < H; ++kvh) {
        const auto& sim = hn[static_cast<size_t>(layer * H + kvh)].near.sim;
        all.insert(all.end(), sim.begin(), sim.end());
        cols = std::max(cols, sim.size());
      }
      if (all.empty()) continue;
      const size_t li = static_cast<size_t>(layer);
      math::D2oThreshold thr = set[li] != 0 ? math::D2oThreshold(beta_, tau[li]) : math::D2oThreshold(beta_);
      const double t = thr.update(all);
      tau[li] = t;
      set[li] = 1;
      std::vector<double> col_sum(cols, 0.0);
      std::vector<int> col_n(cols, 0);
      for (int kvh = 0; kvh < H; ++kvh) {
        const auto& sim = hn[static_cast<size_t>(layer * H + kvh)].near.sim;
        for (size_t k = 0; k < sim.size(); ++k) col_sum[k] += sim[k], ++col_n[k];
      }
      for (int kvh = 0; kvh < H; ++kvh) {
        const size_t i = static_cast<size_t>(layer * H + kvh);
        merge[i].resize(hn[i].evicted.size());
        for (size_t k = 0; k < hn[i].evicted.size(); ++k) merge[i][k] = col_sum[k] / col_n[k] >= t;
      }
    }
  }
  env.pool.parallel_for(static_cast<int64_t>(n), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const size_t u = static_cast<size_t>(i);
      if (hn[u].evicted.empty()) continue;
      merge_head(env.cache, static_cast<int>(i / H), static_cast<int>(i % H), edit.heads[u], hn[u], merge[u], mode_,
                 use_mass_);
    }
  });
}

namespace {

using T = ParamSpec::Type;

// paper (the default): §5.1 "β = 0.7 achieves optimal performance", N:M = 3:1 (Table 9), Eq. 4's
// variances min-max normalised per layer (the official code's; the raw ones starve sharp layers,
// docs/methods/d2o.md), Eq. 5 budgets maintained per layer, Eq. 12 weights, every layer
// compressed; T (sinks) is not given a value: 4, as the official code. official: the README's
// LongBench run of AIoT-MLSys-Lab/D2O (hh_ratio 0.1, recent_ratio 0.1 -> 1:1; alpha = belta = 0.5
// -> β 0.5; min-max density over query heads; one threshold per layer; scatter-mean merge without
// counts; layers=official).
std::vector<PressPreset> d2o_presets() {
  return {{"paper", "the paper's settings (§4-5, Table 9; Eq. 4 min-max normalised, as the official code)",
           {{"recent_share", "0.25"}, {"ema_beta", "0.7"}, {"merge_weights", "paper"}, {"merge_mass", "false"},
            {"threshold", "head"}, {"density", "minmax"}, {"layers", "paper"}}},
          {"official", "AIoT-MLSys-Lab/D2O's LongBench run (README)",
           {{"recent_share", "0.5"}, {"ema_beta", "0.5"}, {"merge_weights", "official"}, {"merge_mass", "false"},
            {"threshold", "layer"}, {"density", "minmax-query"}, {"layers", "official"}}}};
}

math::D2oDensity parse_density(const std::string& s) {
  if (s == "raw" || s == "paper") return math::D2oDensity::Paper;
  if (s == "minmax") return math::D2oDensity::OfficialMinMax;
  if (s == "minmax-query") return math::D2oDensity::OfficialMinMaxQueryHeads;
  fail("d2o allocator: density must be minmax, minmax-query or raw (paper), got '{}'", s);
}

}  // namespace

void add_d2o_allocators(std::vector<AllocatorInfo>& allocators) {
  allocators.push_back(
      {"d2o",
       "D2O: layer budgets softmax(-F) with F the variance of the prompt's attention column sums (Wan et al. 2024, Eqs. 4-5)",
       {{"density", T::String, "minmax",
         "minmax: the head variances min-max normalised per layer (the official code's, over KV heads); minmax-query: "
         "the same over query heads, each with its own column sums (the official code exactly); raw (or paper): Eq. 4's "
         "variances as printed (starves sharp layers)"},
        {"layers", T::String, "paper",
         "paper: Eq. 5 shares of the budget at every compression (layers grow to theirs); official: sizes fixed at the "
         "first compression, ratios clamped to [0.01, 1], layers 0, 1, L-1 never compressed"}},
       [](const Params& p, const Scorer&) {
         const std::string& lay = p.get_str("layers");
         if (lay != "paper" && lay != "official") fail("d2o allocator: layers must be paper or official, got '{}'", lay);
         return std::make_shared<D2oAllocator>(parse_density(p.get_str("density")),
                                               lay == "paper" ? D2oLayers::Paper : D2oLayers::Official);
       }});
}

void add_d2o_presses(std::vector<PressInfo>& presses) {
  presses.push_back(
      {"d2o", "Wan et al. 2024, arXiv:2406.13035",
       "layer budgets from attention variance; sinks + recent + heavy hitters at every decode step; evicted pairs merged "
       "into their nearest kept pair above an EMA similarity threshold",
       {{"recent_share", T::Float, "0.25", "M / (N + M): share of the budget beyond the sinks kept for the most recent tokens (3:1 = 0.25)", 0, 1},
        {"merge", T::Bool, "true", "merge evicted pairs into kept ones (false: the ablation without merging)"},
        {"ema_beta", T::Float, "0.7", "beta of the EMA similarity threshold (Eq. 10)", 0, 1},
        {"merge_weights", T::String, "paper", "paper: Eq. 12's weights; official: the official code's similarity-weighted scatter-mean"},
        {"merge_mass", T::Bool, "false", "Eq. 12 counts a row that already stands for m merged tokens as m members (false: every row weighs 1, Eq. 12 as printed)"},
        {"threshold", T::String, "head", "head: one EMA threshold (Eq. 10) per (layer, KV head); layer: one per layer on the heads' mean similarity (the official code)"},
        {"decode_every", T::Int, "1", "evict back to the budget every N decode steps (0 = only after prefill)", 0, kMaxTriggerEvery},
        preset_param(d2o_presets())},
       4, 0, {Trigger::Kind::EveryN, 1, 0}, "d2o", [](const Params& p) {
         const std::string& mw = p.get_str("merge_weights");
         if (mw != "paper" && mw != "official") fail("d2o: merge_weights must be paper or official, got '{}'", mw);
         const std::string& th = p.get_str("threshold");
         if (th != "head" && th != "layer") fail("d2o: threshold must be head or layer, got '{}'", th);
         Press press;
         press.name = "d2o";
         press.scorer = std::make_shared<H2oScorer>();  // Eq. 6: attention accumulated over every query
         press.selector = std::make_shared<D2oSelector>(p.get_float("recent_share"));
         if (p.get_bool("merge"))
           press.merger = std::make_shared<D2oMerger>(
               p.get_float("ema_beta"), mw == "paper" ? math::D2oMerge::PaperEq12 : math::D2oMerge::OfficialScatterMean,
               p.get_bool("merge_mass"), th == "layer");
         const int64_t n = p.get_int("decode_every");
         press.trigger = n > 0 ? Trigger{Trigger::Kind::EveryN, static_cast<int>(n), 0} : Trigger{};
         return press;
       },
       d2o_presets()});
}

}  // namespace kvs
