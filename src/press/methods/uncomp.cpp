// UNComp as press parts (overview in uncomp.h). Choices where the paper is open, after reading the
// official code (menik1126/UNComp: uncomp/uncomp_utils.py UncompCluster.update_kv /
// update_kv_generate / head_type_search_8, uncomp/llama_model.py llama_decoder_layer_forward and
// llama_attn_forward_Uncomp, uncomp/stage_division.py, uncomp/utils/entropy_utils.py):
//
//  - Heads are KV heads. The paper groups the query heads of MHA models (Llama-2); our cache keeps
//    tokens per KV head, so a KV head's erank_k is the mean of its query heads' (the paper notes
//    that GQA groups share one compression pattern, Fig. 5) and the M groups are cut among the
//    layer's KV heads. With fewer KV heads than M, the heads' ranks spread over the whole
//    ladder (uncomp_group_sizes: 4 KV heads in groups 0, 2, 5, 7), so the budgets still span
//    N_1 ... N_M.
//  - Layer values for Eq. 8 (layer_value=erank, the default): Σ over the layer's query heads of
//    erank_k = exp(H_k) (mean over the samples), Eq. 8's difference of eranks as printed, with
//    the paper's ε 0.3 (A.3: 0.3 Llama2-7B / Qwen2.5-7B, 0.4 Llama3-8B, 0.5 Llama2-13B); it gives
//    v7s1 the groups [0,1,1,2] and v8s1 five. The earlier reading in entropy units
//    (layer_value=entropy: Σ H_k / ln D) moves by less than ε between layers of every testbed
//    model (one group, nothing pruned) and is kept as an option. The official code's stored
//    stage_division.py values (~2.2 per head) and threshold -1 fit Σ_h exp(H_k / ln D)
//    (layer_value=official-erank, eps 1; our reading: the repository does not say). The
//    covariance of the whole layer's queries ((H·D)², 2048² for Llama-3.2-1B) is not formed.
//  - Scores (Dynamic KV Cache Eviction, §3.3.3): the attention of the last l = 8 queries summed
//    per key, averaged over the query heads of the KV group, smoothed by 1-D pooling (avg 5, or
//    the official LongBench runs' max 7) over the keys before the window; the l window tokens are
//    always kept. The paper says "summing the attention scores of the last l tokens"; pooling,
//    pooling the prefix only and keeping the window are the official code's (update_kv:
//    attn[..., -window:, :-window].sum(-2), avg_pool1d / max_pool1d, window appended).
//  - Budgets: the paper's absolute sizes (N_1 = 640, Δn = 74, 8 groups: mean 381 ≈ the 384 of its
//    baselines) become weights, scaled to the requested keep ratio or token budget so that the
//    presses compare at matched KV memory (exact integer split, press/math/apportion.h).
//    Protected tokens (sinks, the request's window) come first in every head.
//  - Decoding: the paper keeps every head at its group's size as tokens are generated (official
//    update_kv_generate re-scores with the last l queries and keeps cache_size per head). With
//    the runtime's decode-time eviction (trigger every:1, budget = the mean head length once the
//    question is in), every head drops the same number of tokens (uncomp_head_budgets), so each
//    keeps its own size.
//  - Stage pruning (Hidden State Eviction, §3.3.2): the rows entering the first layer of each
//    layer group after the first are cut to that group's count by the previous layer's attention
//    from the last token (the paper's words; `stage_queries` = 8 gives the official code's last 8
//    queries, llama_attn_forward_Uncomp: attn.sum(heads)[-8:].sum(0)), summed over all heads.
//    Counts (Eq. 10): the official code steps linearly from the prompt length down to min_len =
//    1536 of max_token = 4096; here down to stage_min (0.375 = 1536/4096) of the context, with
//    the integer step (n - n_min) / (C - 1). The official code re-runs top-k before every layer
//    with its group's count, which only cuts at the first layer of a group (the count is
//    constant within it): the same. Rows never pruned (the paper: "the question/last tokens"):
//    the last max(l, --window) rows, whose queries score the KV cache afterwards, the sinks and a
//    query-aware question.
//  - Chunked prefill: the paper (and the official code) prefills the prompt in one pass, so the
//    ranking query is the context's last token at every layer. With a row selector the forward
//    runs layer-major (runtime/arch/forward.h forward_layer_major: every n_batch chunk through
//    layer l before any goes through layer l + 1), so the selector sees the whole prefill and
//    its last token before each layer, whatever -b is: the kept rows are the same for every -b.
#include "press/methods/uncomp.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/warn.h"
#include "press/math/apportion.h"
#include "press/scorers/scorers.h"

namespace kvs {

namespace {

constexpr const char* kHowToCalibrate = "run `kvshrink calibrate --press uncomp -m MODEL` for this model first";

const nlohmann::json& field(const nlohmann::json& d, const char* name) {
  const auto it = d.find(name);
  if (it == d.end()) fail("uncomp calibration: field '{}' is missing; {}", name, kHowToCalibrate);
  return *it;
}

int int_in(const nlohmann::json& x, int lo, int hi, const std::string& what) {
  if (!x.is_number_integer() || x.get<int64_t>() < lo || x.get<int64_t>() > hi)
    fail("uncomp calibration: {} must be an integer in {}..{}, got {}; {}", what, lo, hi, x.dump(), kHowToCalibrate);
  return x.get<int>();
}

double round6(double x) { return std::round(x * 1e6) / 1e6; }

}  // namespace

void warn_unless_official_calibration(const nlohmann::json* data) {
  if (!data || !data->is_object()) return;  // no calibration: uncomp_calibration refuses with its own message
  const auto it = data->find("preset");
  const std::string p = it != data->end() && it->is_string() ? it->get<std::string>() : "unknown";
  if (p == "official") return;
  warn_once("uncomp.calibration_preset",
            fmt::format("uncomp: preset=official runs on a calibration made with preset={} (its k, covariance and layer "
                        "values are not the official code's); run `kvshrink calibrate --press uncomp -m MODEL --opt "
                        "preset=official` for the official head and layer groups",
                        p));
}

// ---- calibration ------------------------------------------------------------------------------

UncompCalibration uncomp_calibration(const nlohmann::json* d, int n_layer, int n_head_kv) {
  if (!d) fail("uncomp needs the model's head and layer groups: {}", kHowToCalibrate);
  if (!d->is_object()) fail("uncomp calibration: expected an object; {}", kHowToCalibrate);
  UncompCalibration c;
  c.groups = int_in(field(*d, "groups"), 1, 1 << 16, "'groups'");
  const nlohmann::json& hg = field(*d, "kv_head_groups");
  if (!hg.is_array() || hg.size() != static_cast<size_t>(n_layer))
    fail("uncomp calibration: 'kv_head_groups' must hold {} layers (this model's), got {}; {}", n_layer,
         hg.is_array() ? std::to_string(hg.size()) : hg.type_name(), kHowToCalibrate);
  for (int l = 0; l < n_layer; ++l) {
    const nlohmann::json& row = hg[static_cast<size_t>(l)];
    if (!row.is_array() || row.size() != static_cast<size_t>(n_head_kv))
      fail("uncomp calibration: 'kv_head_groups'[{}] must hold {} KV heads; {}", l, n_head_kv, kHowToCalibrate);
    std::vector<int> r;
    for (int h = 0; h < n_head_kv; ++h)
      r.push_back(int_in(row[static_cast<size_t>(h)], 0, c.groups - 1, fmt::format("'kv_head_groups'[{}][{}]", l, h)));
    c.kv_head_groups.push_back(std::move(r));
  }
  const nlohmann::json& lg = field(*d, "layer_groups");
  if (!lg.is_array() || lg.size() != static_cast<size_t>(n_layer))
    fail("uncomp calibration: 'layer_groups' must hold {} layers; {}", n_layer, kHowToCalibrate);
  for (int l = 0; l < n_layer; ++l) {
    const int g = int_in(lg[static_cast<size_t>(l)], 0, n_layer - 1, fmt::format("'layer_groups'[{}]", l));
    const int prev = l == 0 ? 0 : c.layer_groups.back();
    if (l == 0 ? g != 0 : (g != prev && g != prev + 1))
      fail("uncomp calibration: 'layer_groups' must start at 0 and grow by 0 or 1 per layer, got {} after {} at layer {}; {}",
           g, prev, l, kHowToCalibrate);
    c.layer_groups.push_back(g);
  }
  return c;
}

int uncomp_resolve_k(int k, int head_dim) {
  if (k < 0) fail("uncomp: k = {} (expected >= 1, or 0 for head_dim / 4)", k);
  return k > 0 ? k : std::max(1, head_dim / 4);
}

std::vector<double> uncomp_sample_entropy(const StatsCollector& stats, int n_layer, int k, math::EntropyNorm norm) {
  if (stats.request().query_gram == QueryGram::Off) fail("uncomp_sample_entropy: the statistics hold no query Gram matrices");
  const int H = stats.shape().n_head, D = stats.shape().head_dim;
  std::vector<double> out(static_cast<size_t>(n_layer) * H);
  for (int l = 0; l < n_layer; ++l)
    for (int qh = 0; qh < H; ++qh) {
      const StatsCollector::Gram& g = stats.query_gram(l, qh);
      out[static_cast<size_t>(l) * H + qh] = g.count < 2 ? 0.0 : math::truncated_entropy_of(g.covariance(), D, k, norm).h;
    }
  return out;
}

namespace {

struct Aggregate {
  std::vector<std::vector<double>> head_erank, kv_erank;  // [L][H], [L][Hkv]
  std::vector<double> layer_erank;                        // [L] Σ over heads of erank_k (reported)
  std::vector<double> layer_value;                        // [L] the Eq. 8 values (UncompLayerValue)
  std::vector<std::vector<int>> kv_groups;                // [L][Hkv]
  std::vector<int> layer_groups;                          // [L]
};

// Samples [s0, s1) of entropy[s][l][qh] (H_k, natural log).
Aggregate aggregate(const std::vector<double>& e, int s0, int s1, int L, int H, int Hkv, int D,
                    const UncompCalibrateOptions& o) {
  const int G = H / Hkv, ns = s1 - s0;
  const double log_d = std::log(static_cast<double>(std::max(D, 2)));
  Aggregate a;
  a.head_erank.assign(static_cast<size_t>(L), std::vector<double>(static_cast<size_t>(H), 0.0));
  a.kv_erank.assign(static_cast<size_t>(L), std::vector<double>(static_cast<size_t>(Hkv), 0.0));
  a.layer_erank.assign(static_cast<size_t>(L), 0.0);
  a.layer_value.assign(static_cast<size_t>(L), 0.0);
  for (int l = 0; l < L; ++l) {
    std::vector<int> labels(static_cast<size_t>(ns) * Hkv);  // [sample][kvh]
    std::vector<double> kv(static_cast<size_t>(Hkv));
    for (int s = s0; s < s1; ++s) {
      const double* row = e.data() + (static_cast<size_t>(s) * L + l) * H;
      for (int kvh = 0; kvh < Hkv; ++kvh) {
        double m = 0;
        for (int g = 0; g < G; ++g) m += std::exp(row[kvh * G + g]);
        kv[kvh] = m / G;  // a KV head's erank_k: the mean of its query heads'
        a.kv_erank[l][kvh] += kv[kvh] / ns;
      }
      for (int qh = 0; qh < H; ++qh) {
        a.head_erank[l][qh] += std::exp(row[qh]) / ns;
        a.layer_erank[l] += std::exp(row[qh]) / ns;  // Σ over heads, mean over samples
        const double v = o.layer_value == UncompLayerValue::Erank     ? std::exp(row[qh])
                         : o.layer_value == UncompLayerValue::Entropy ? row[qh] / log_d
                                                                      : std::exp(row[qh] / log_d);
        a.layer_value[l] += v / ns;
      }
      const std::vector<int> lab = math::uncomp_assign_head_groups(kv, o.groups);  // one sample (Algorithm 1 line 6)
      std::copy(lab.begin(), lab.end(), labels.begin() + static_cast<std::ptrdiff_t>(s - s0) * Hkv);
    }
    a.kv_groups.push_back(math::uncomp_majority_vote(labels, ns, Hkv, o.groups, o.vote));  // line 12
  }
  a.layer_groups = math::uncomp_layer_groups(a.layer_value, o.eps);  // Eq. 8
  return a;
}

nlohmann::json rounded(const std::vector<double>& v) {
  nlohmann::json j = nlohmann::json::array();
  for (double x : v) j.push_back(round6(x));
  return j;
}

nlohmann::json rounded(const std::vector<std::vector<double>>& v) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : v) j.push_back(rounded(r));
  return j;
}

}  // namespace

nlohmann::json uncomp_calibration_data(const std::vector<double>& erank, int n_samples, int n_layer, int n_head,
                                       int n_head_kv, int head_dim, const UncompCalibrateOptions& o) {
  if (n_samples < 1 || n_layer < 1 || n_head < 1 || n_head_kv < 1 || n_head % n_head_kv != 0 || head_dim < 1)
    fail("uncomp_calibration_data: {} samples, {} layers, {} heads, {} KV heads, head dim {}", n_samples, n_layer, n_head,
         n_head_kv, head_dim);
  if (erank.size() != static_cast<size_t>(n_samples) * n_layer * n_head)
    fail("uncomp_calibration_data: {} entropies for {} x {} x {}", erank.size(), n_samples, n_layer, n_head);
  const Aggregate all = aggregate(erank, 0, n_samples, n_layer, n_head, n_head_kv, head_dim, o);
  nlohmann::json j;
  j["groups"] = o.groups;
  j["k"] = uncomp_resolve_k(o.k, head_dim);
  j["head_dim"] = head_dim;
  j["norm"] = o.norm == math::EntropyNorm::TopK ? "topk" : "trace";
  j["cov"] = o.cov == UncompCov::Eq1 ? "eq1" : "unitnorm";
  j["vote"] = o.vote == math::VoteMode::Balanced ? "balanced" : "per-head";
  j["layer_value"] = o.layer_value == UncompLayerValue::Erank     ? "erank"
                     : o.layer_value == UncompLayerValue::Entropy ? "entropy"
                                                                  : "official-erank";
  j["eps"] = o.eps;
  j["samples"] = n_samples;
  j["kv_head_groups"] = all.kv_groups;
  j["layer_groups"] = all.layer_groups;
  j["layer_values"] = rounded(all.layer_value);
  j["layer_erank"] = rounded(all.layer_erank);
  j["kv_head_erank"] = rounded(all.kv_erank);
  j["head_erank"] = rounded(all.head_erank);
  // Stability: the vote of the first half of the samples against that of the second half.
  if (n_samples >= 2) {
    const int half = n_samples / 2;
    const Aggregate a = aggregate(erank, 0, half, n_layer, n_head, n_head_kv, head_dim, o);
    const Aggregate b = aggregate(erank, half, n_samples, n_layer, n_head, n_head_kv, head_dim, o);
    int same = 0, near = 0;
    for (int l = 0; l < n_layer; ++l)
      for (int h = 0; h < n_head_kv; ++h) {
        const int d = std::abs(a.kv_groups[l][h] - b.kv_groups[l][h]);
        same += d == 0;
        near += d <= 1;
      }
    // What two independent balanced assignments would share: sum over groups of (size / Hkv)^2.
    double chance = 0;
    for (int s : math::uncomp_group_sizes(n_head_kv, o.groups)) chance += (double(s) / n_head_kv) * (double(s) / n_head_kv);
    const double n = static_cast<double>(n_layer) * n_head_kv;
    nlohmann::json st;
    st["halves"] = {half, n_samples - half};
    st["agreement"] = round6(same / n);
    st["agreement_within_one_group"] = round6(near / n);
    st["chance_agreement"] = round6(chance);
    st["kv_head_groups_first_half"] = a.kv_groups;
    st["kv_head_groups_second_half"] = b.kv_groups;
    st["layer_groups_first_half"] = a.layer_groups;
    st["layer_groups_second_half"] = b.layer_groups;
    j["stability"] = st;
  }
  return j;
}

// ---- budgets and stages -----------------------------------------------------------------------

std::vector<int64_t> uncomp_stage_rows(const std::vector<int>& layer_groups, int64_t n, double stage_min,
                                       int64_t min_keep, int64_t stage_min_tokens, int64_t stage_from) {
  if (layer_groups.empty()) return {};
  if (stage_from < 0) fail("uncomp: stage_from must be >= 0, got {}", stage_from);
  if (!(stage_min > 0 && stage_min <= 1)) fail("uncomp: stage_min must be in (0, 1], got {}", stage_min);
  const int C = layer_groups.back() + 1;
  if (stage_min_tokens < 0) fail("uncomp: stage_min_tokens must be >= 0, got {}", stage_min_tokens);
  const int64_t floor_rows = stage_min_tokens > 0 ? stage_min_tokens
                                                  : static_cast<int64_t>(std::ceil(stage_min * static_cast<double>(n)));
  const int64_t n_min = std::min(n, std::max(min_keep, floor_rows));
  const int64_t top = std::max(n, stage_from);
  const int64_t step = C > 1 ? (top - n_min) / (C - 1) : 0;
  const std::vector<int64_t> per_group = math::uncomp_stage_tokens(C, top, step, n_min);
  std::vector<int64_t> rows;
  for (int g : layer_groups) rows.push_back(std::min(n, per_group[static_cast<size_t>(g)]));
  return rows;
}

std::vector<int32_t> uncomp_head_budgets(const KvCache& cache, const CompressRequest& req, const UncompCalibration& cal,
                                         double n1, double dn, bool base_longest, int obs_window) {
  return uncomp_head_budgets(cache, req, cal, math::uncomp_stepped_sizes(cal.groups, n1, dn), base_longest,
                             obs_window);  // Eq. 11
}

std::vector<double> uncomp_official_ladder(int groups) {
  // uncomp_utils.py (group8, max_capacity_prompts 512): [20, 128, 256, 384, 384, 512, 640, 748] by
  // label ascending (label 0 = the lowest entropy); ours: group 0 = the largest erank first.
  if (groups != 8)
    fail("uncomp: ladder=official has the official code's 8 group sizes; the calibration has {} groups (use "
         "ladder=paper, or calibrate with --opt groups=8)",
         groups);
  return {748, 640, 512, 384, 384, 256, 128, 20};
}

std::vector<int32_t> uncomp_head_budgets(const KvCache& cache, const CompressRequest& req, const UncompCalibration& cal,
                                         const std::vector<double>& sizes, bool base_longest, int obs_window) {
  if (!req.has_budget()) fail("uncomp: needs a keep ratio or a token budget");
  if (obs_window < 0) fail("uncomp: observation window {} is negative", obs_window);
  // The floors: sinks, the request's window and the scorer's l window queries (the official code
  // appends its window to every head's selection, so even its smallest size, 20, holds 12 + 8).
  CompressRequest floor_req = req;
  floor_req.window = std::max(req.window, obs_window);
  const KvLayout& l = cache.layout();
  const int n = l.n_heads_total();
  if (static_cast<int>(sizes.size()) != cal.groups)
    fail("uncomp: {} group sizes for a calibration of {} groups", sizes.size(), cal.groups);
  std::vector<int64_t> caps(static_cast<size_t>(n)), floors(static_cast<size_t>(n));
  std::vector<double> w(static_cast<size_t>(n));
  int64_t held = 0, longest = 0, floor_sum = 0;
  bool equal = true;
  for (int i = 0; i < n; ++i) {
    const HeadCache& h = cache.head(i / l.n_head_kv, i % l.n_head_kv);
    caps[i] = h.len();
    floors[i] = std::min<int64_t>(h.len(), count_protected(h, cache.n_past(), floor_req));
    held += caps[i];
    longest = std::max(longest, caps[i]);
    floor_sum += floors[i];
    equal = equal && caps[i] == caps[0];
    w[i] = sizes[static_cast<size_t>(cal.kv_head_groups[static_cast<size_t>(i / l.n_head_kv)][static_cast<size_t>(i % l.n_head_kv)])];
  }
  int64_t total = 0;
  if (req.max_tokens > 0) {
    total = static_cast<int64_t>(req.max_tokens) * n;
    if (!equal) {
      // Decode-time eviction after an UNComp compression: every head drops the same number of
      // tokens (the mean excess), so each keeps its group's size.
      const double shift = static_cast<double>(held) / n - req.max_tokens;
      for (int i = 0; i < n; ++i) w[i] = std::max(0.0, static_cast<double>(caps[i] - floors[i]) - shift);
    }
  } else {
    const int64_t base = base_longest ? longest * n : held;
    total = std::llround(*req.keep * static_cast<double>(base));
  }
  total = std::min(total, held);
  std::vector<int64_t> free_caps(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) free_caps[i] = caps[i] - floors[i];
  const std::vector<int64_t> extra = math::apportion(w, std::max<int64_t>(0, total - floor_sum), free_caps);
  std::vector<int32_t> b(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) b[i] = static_cast<int32_t>(floors[i] + extra[i]);
  return b;
}

// ---- press parts ------------------------------------------------------------------------------

std::vector<int> uncomp_parse_layer_groups(const std::string& s) {
  if (s == "calibrated") return {};
  std::vector<int> g;
  size_t i = 0;
  while (i <= s.size()) {
    const size_t j = std::min(s.find_first_of(",/", i), s.size());
    const auto v = parse_int64(s.substr(i, j - i));
    const bool ok = v && (g.empty() ? *v == 0 : (*v == g.back() || *v == g.back() + 1));
    if (!ok)
      fail("uncomp: layer_groups must be 'calibrated' or one group id per layer, starting at 0 and growing by 0 or 1 "
           "(e.g. 0,0,1,2 or 0/0/1/2), got '{}'", s);
    g.push_back(static_cast<int>(*v));
    i = j + 1;
  }
  return g;
}

UncompScorer::UncompScorer(UncompOptions o) : o_(o) {
  if (o_.window < 1) fail("uncomp: window must be >= 1, got {}", o_.window);
  if (o_.stage_queries < 1 || o_.stage_queries > o_.window)
    fail("uncomp: stage_queries must be in 1..window ({}), got {}", o_.window, o_.stage_queries);
}

Scores UncompScorer::score(const PressEnv& env) const {
  // The official update_kv: attn[..., -window:, :-window].sum(-2) pooled (avg_pool1d / max_pool1d,
  // padding kernel // 2), the window appended: the window's keys take no part in the pooling.
  // Zeroing their attention before pooling is the same (zero padding, counted by avg_pool1d; the
  // probabilities are >= 0 for max pooling).
  if (!env.stats) fail("uncomp: no statistics were collected");
  Scores sc = make_scores(env.cache);
  const KvLayout& l = env.cache.layout();
  const int r = o_.kernel / 2;
  for (int layer = 0; layer < l.n_layer; ++layer) {
    const auto att = window_attention(env, layer, o_.window);
    const auto& w = env.stats->window(layer);
    const int32_t first = w.size() > 0 ? w.pos[static_cast<size_t>(std::max(0, w.size() - o_.window))] : INT32_MAX;
    for (int kvh = 0; kvh < l.n_head_kv; ++kvh) {
      const HeadCache& h = env.cache.head(layer, kvh);
      std::vector<float> x(att[static_cast<size_t>(kvh)]);
      for (int32_t s = 0; s < h.len(); ++s)
        if (h.pos[static_cast<size_t>(s)] >= first) x[static_cast<size_t>(s)] = 0.0f;
      auto& out = sc.at(l, layer, kvh);
      const int32_t n = h.len();
      for (int32_t s = 0; s < n; ++s) {
        if (h.pos[static_cast<size_t>(s)] >= first) {
          out[s] = std::numeric_limits<float>::infinity();
          continue;
        }
        float acc = 0.0f;
        for (int32_t j = s - r; j <= s + r; ++j) {
          const float v = j >= 0 && j < n ? x[static_cast<size_t>(j)] : 0.0f;
          acc = o_.max_pool ? std::max(acc, v) : acc + v;
        }
        out[s] = o_.max_pool ? acc : acc / static_cast<float>(2 * r + 1);
      }
    }
  }
  return sc;
}

bool UncompScorer::prunes_prefill(const CompressRequest& req) const { return o_.stage && !req.keeps_everything(); }

std::unique_ptr<RowSelector> UncompScorer::prefill_rows(const PrefillRows& p) const {
  if (!o_.stage || !p.request || !prunes_prefill(*p.request)) return nullptr;
  if (!p.probe || !p.stats || !p.shape || !p.pool) fail("uncomp: the prefill gave no model probe or statistics");
  if (p.stats->request().window < o_.stage_queries)
    fail("uncomp: the prefill keeps {} window queries, the pruning needs {}", p.stats->request().window, o_.stage_queries);
  const ProbeDims d = p.probe->dims();
  std::vector<int> groups = o_.layer_groups;
  const nlohmann::json* cal = p.probe->calibration("uncomp");
  if (o_.official) warn_unless_official_calibration(cal);
  if (groups.empty()) groups = uncomp_calibration(cal, d.n_layer, d.n_head_kv).layer_groups;
  if (static_cast<int>(groups.size()) != d.n_layer)
    fail("uncomp: layer_groups has {} entries, the model has {} layers", groups.size(), d.n_layer);
  const int64_t protect = std::max<int64_t>({o_.window, p.request->window, p.keep_last});
  const int64_t min_keep = protect + p.request->sinks + 1;
  const int64_t from = o_.stage_max_tokens >= 0 ? o_.stage_max_tokens : d.n_ctx_train;
  auto rows = uncomp_stage_rows(groups, p.n_tokens, o_.stage_min, min_keep, o_.stage_min_tokens, from);
  return std::make_unique<UncompRowSelector>(p, std::move(rows), static_cast<int>(protect), o_.stage_queries);
}

Allocation UncompAllocator::allocate(const Scores&, const PressEnv& env) const {
  const KvLayout& l = env.cache.layout();
  const nlohmann::json* data = env.probe ? env.probe->calibration("uncomp") : nullptr;
  if (official_ladder_) warn_unless_official_calibration(data);
  const UncompCalibration cal = uncomp_calibration(data, l.n_layer, l.n_head_kv);
  Allocation a;
  a.budgets = official_ladder_ ? uncomp_head_budgets(env.cache, env.request, cal, uncomp_official_ladder(cal.groups),
                                                     base_longest_, obs_window_)
                               : uncomp_head_budgets(env.cache, env.request, cal, n1_, dn_, base_longest_, obs_window_);
  return a;
}

UncompRowSelector::UncompRowSelector(const PrefillRows& p, std::vector<int64_t> stage_rows, int protect_last,
                                     int stage_queries)
    : stage_rows_(std::move(stage_rows)),
      n_tokens_(p.n_tokens),
      end_pos_(p.n_past + p.n_tokens),
      protect_last_(protect_last),
      stage_queries_(stage_queries),
      stats_(p.stats),
      shape_(*p.shape),
      pool_(p.pool),
      request_(*p.request),
      kept_at_(stage_rows_.size(), -1) {}

bool UncompRowSelector::select_rows(const RowView& v, std::vector<int32_t>& keep) {
  const int T = v.n_tok, il = v.layer;
  if (il <= 0 || il >= static_cast<int>(stage_rows_.size()) || stage_rows_[il] >= stage_rows_[il - 1]) return false;
  // The forward shows the whole prefill (layer-major, runtime/arch/forward.h forward_layer_major),
  // so the row with the largest position is the prefill's last token.
  if (v.pos[T - 1] != end_pos_ - 1)
    fail("uncomp: internal: the row selector was shown a chunk (last position {}, prefill ends at {}), not the whole "
         "prefill",
         v.pos[T - 1], end_pos_ - 1);
  const int64_t target = std::max<int64_t>(stage_rows_[il], 1);
  if (target >= T) return false;

  // Protected rows: sinks, the last protect_last positions of the prefill (its last row among them).
  std::vector<bool> taken(static_cast<size_t>(T), false);
  int64_t n_taken = 0;
  for (int t = 0; t < T; ++t) {
    const int64_t pos = v.pos[t];
    if (pos < request_.sinks || pos >= end_pos_ - protect_last_ || t == T - 1) taken[t] = true, ++n_taken;
  }
  // Scores: the previous layer's attention from the prefill's last `stage_queries` rows (the
  // collector's window), summed over every head, per row (matched by position).
  const StatsCollector::Window& w = stats_->window(il - 1);
  if (w.size() == 0 || w.pos.back() != v.pos[T - 1])
    fail("uncomp: internal: layer {} window queries do not end at the prefill's last row", il - 1);
  const PressEnv env{*v.cache, shape_, stats_, *pool_, request_, nullptr, nullptr};
  const std::vector<std::vector<float>> att = window_attention(env, il - 1, stage_queries_);
  std::vector<float> score(static_cast<size_t>(T), 0.0f);
  for (int kvh = 0; kvh < shape_.n_head_kv; ++kvh) {
    const HeadCache& h = v.cache->head(il - 1, kvh);
    for (int32_t s = 0; s < h.len(); ++s) {
      const int32_t p = h.pos[static_cast<size_t>(s)];
      const int32_t* it = std::lower_bound(v.pos, v.pos + T, p);
      if (it != v.pos + T && *it == p) score[static_cast<size_t>(it - v.pos)] += att[kvh][static_cast<size_t>(s)];
    }
  }
  keep.clear();
  for (int t = 0; t < T; ++t)
    if (taken[t]) keep.push_back(t);
  if (target > n_taken) {
    const std::vector<int32_t> top = top_k_slots(score, static_cast<int32_t>(target - n_taken), taken);
    keep.insert(keep.end(), top.begin(), top.end());
  }
  std::sort(keep.begin(), keep.end());
  kept_at_[static_cast<size_t>(il)] = static_cast<int64_t>(keep.size());
  return true;
}

// ---- registration -----------------------------------------------------------------------------

namespace {

// paper: l = 8 (§3.3.3, A.3), SnapKV's pooling (the paper cites SnapKV's scorer; avg, 5), the last
// token ranks the pruned rows (§3.3.2 "the attention scores of the last token"), Eq. 11's ladder
// 640 - 74 g. official: menik1126/UNComp's LongBench runs (run_longbench.py: max pooling, kernel
// 7), the last 8 queries rank the rows (llama_model.py: attn.sum(heads)[-8:]), the last stage keeps
// 1,536 rows (llama_model.py: 1536 + ((max_token - 1536) // 4) (4 - stage), max_token = the
// model's context, each count capped at the prompt's length), its 8 fixed sizes.
std::vector<PressPreset> uncomp_presets() {
  return {{"paper", "the paper's settings (§3.3, A.3)",
           {{"window", "8"}, {"kernel", "5"}, {"pooling", "avg"}, {"stage_queries", "1"}, {"ladder", "paper"}}},
          {"official", "menik1126/UNComp's LongBench runs",
           {{"window", "8"}, {"kernel", "7"}, {"pooling", "max"}, {"stage_queries", "8"}, {"stage_min_tokens", "1536"},
            {"stage_max_tokens", "-1"}, {"ladder", "official"}}}};
}

}  // namespace

void add_uncomp_presses(std::vector<PressInfo>& presses) {
  using T = ParamSpec::Type;
  Trigger every1;
  every1.kind = Trigger::Kind::EveryN;
  every1.every_n = 1;
  presses.push_back(
      {"uncomp", "Xiong et al. 2025, UNComp, arXiv:2410.03090",
       "matrix-entropy head groups with stepped budgets; group-stage also prunes hidden states in prefill. Needs "
       "`kvshrink calibrate --press uncomp -m MODEL` once per model (head and layer groups, saved next to it)",
       {{"variant", T::String, "group",
         "group: stepped head-group budgets; group-stage: + prefill pruning by layer group (run with -b >= the "
         "context's tokens for the paper's one-pass pruning)"},
        {"window", T::Int, "8", "l: last queries whose cumulative attention scores the tokens (kept themselves)", 1, 4096},
        {"kernel", T::Int, "5", "pooling width of the scores (SnapKV's 5; the official LongBench runs: 7)", 1, 255},
        {"pooling", T::String, "avg", "avg or max pooling of the scores (the official LongBench runs: max)"},
        {"stage_min", T::Float, "0.375", "group-stage: rows the last layer group keeps, fraction of the context "
                                         "(official 1536/4096)", 0.001, 1},
        {"stage_min_tokens", T::Int, "0", "group-stage: > 0: rows the last layer group keeps, in tokens, instead of "
                                          "stage_min (the official code's 1536)", 0, 1 << 30},
        {"stage_max_tokens", T::Int, "0", "group-stage: the stage steps start from this many tokens, each count capped "
                                          "at the prompt's (0: the prompt's length; -1: the model's training context, "
                                          "the official code's max_token)", -1, 1 << 30},
        {"stage_queries", T::Int, "1", "group-stage: last queries ranking the rows (paper: 1, the last token; "
                                       "official code: 8); <= window", 1, 4096},
        {"layer_groups", T::String, "calibrated",
         "group-stage: the layer groups (Eq. 8) from the calibration, or one group id per layer (0,0,1,2; 0/0/1/2 "
         "inside eval --presses)"},
        {"decode_every", T::Int, "1", "while decoding, every head back to its size every N steps (0 = only after "
                                      "prefill)", 0, kMaxTriggerEvery},
        preset_param(uncomp_presets())},
       0, 0, every1, "uncomp", [](const Params& p) {
         const std::string& v = p.get_str("variant");
         if (v != "group" && v != "group-stage") fail("uncomp: variant must be group or group-stage, got '{}'", v);
         UncompOptions o;
         o.stage = v == "group-stage";
         o.window = static_cast<int>(p.get_int("window"));
         o.kernel = static_cast<int>(p.get_int("kernel"));
         const std::string& pool = p.get_str("pooling");
         if (pool != "avg" && pool != "max") fail("uncomp: pooling must be avg or max, got '{}'", pool);
         o.max_pool = pool == "max";
         o.stage_min = p.get_float("stage_min");
         o.stage_min_tokens = p.get_int("stage_min_tokens");
         o.stage_max_tokens = p.get_int("stage_max_tokens");
         o.official = p.get_str("preset") == "official";
         o.stage_queries = static_cast<int>(p.get_int("stage_queries"));
         o.layer_groups = uncomp_parse_layer_groups(p.get_str("layer_groups"));
         Press press;
         press.name = "uncomp";
         if (const int64_t n = p.get_int("decode_every"); n > 0) press.trigger = {Trigger::Kind::EveryN, static_cast<int>(n), 0};
         press.scorer = std::make_shared<UncompScorer>(o);
         return press;
       },
       uncomp_presets()});
}

void add_uncomp_allocators(std::vector<AllocatorInfo>& allocators) {
  using T = ParamSpec::Type;
  allocators.push_back(
      {"uncomp",
       "UNComp's stepped head-group budgets (Eq. 11) from the model's calibration (kvshrink calibrate --press "
       "uncomp), scaled to the request",
       {{"n1", T::Float, "640", "N_1: the largest group's size (a weight: budgets are scaled to the request)", 1e-6, 1e9},
        {"dn", T::Float, "74", "Δn: step between consecutive groups' sizes", 0, 1e9},
        {"ladder", T::String, "paper",
         "paper: N_g = n1 - g dn (Eq. 11); official: the official code's 8 sizes 748 ... 20 (as weights)"}},
       [](const Params& p, const Scorer& s) {
         const auto* u = dynamic_cast<const UncompScorer*>(&s);
         const std::string& lad = p.get_str("ladder");
         if (lad != "paper" && lad != "official") fail("uncomp allocator: ladder must be paper or official, got '{}'", lad);
         return std::make_shared<UncompAllocator>(p.get_float("n1"), p.get_float("dn"), u && u->options().stage,
                                                  lad == "official", s.observation_window());
       }});
}

}  // namespace kvs
