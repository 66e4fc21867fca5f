// `kvshrink calibrate --press uncomp`: UNComp's preparation stage (Xiong et al. 2025 §3.3.1,
// Algorithm 1, Eqs. 7-8; press/methods/uncomp.h). d windows of WikiText-2's validation split
// (d = --samples, 500 by default as the paper) are prefilled one by one; each window gives H_k of
// every query head (Eqs. 1, 5, 6: from the collector's streamed d x d covariance with cov=eq1, or
// from the window's queries kept per layer with cov=unitnorm), its KV heads' labels (M groups per
// layer by erank) and the layer values; the majority vote gives each KV head its group and the
// erank drop (Eq. 8) the layer groups. The same vote on the first and second halves of the windows
// (in text order; disjoint text) measures how stable the groups are ("stability" in the saved
// data). The windows are visited in a stride order spread over the text, so that an early stop
// (stop=stable) keeps windows from all of it.
//
// Choices: the text is ../shared/data/wikitext2/wikitext-2-v1.tokens.valid.txt, the only copy of
// the validation split here (the tokenized v1 release: words split by spaces, rare ones <unk>); the
// paper samples "500 data points from Wikitext2" without saying which split or how long; the
// official search runs its prompts as they come. Here a data point is a window of --tokens tokens
// (default min(512, the model's context, text / d) so that the windows do not overlap), evenly
// spaced over the tokenized text, BOS first. Queries after RoPE (the official code takes
// query_states after apply_rotary_pos_emb); --opt queries=pre for before.
//
// Options (--opt): preset (paper | official), groups (M, 8), k (auto = head_dim / 4, or a number),
// norm (trace | topk), cov (eq1 | unitnorm), layer_value (erank | entropy | official-erank), vote
// (balanced | per-head), eps (0.3, or 1 with official-erank), queries (post | pre), stop (stable |
// none: stop early once the voted groups no longer move, see kStableEvery).
// preset=paper: k auto, trace, eq1, erank, eps 0.3 (the paper: Lemma 4, Table 8, Eq. 1, Eq. 8, A.3).
// preset=official: k 32, trace, unitnorm, official-erank, eps 1 (menik1126/UNComp entropy_utils.py
// and stage_division.py). Options given explicitly override the preset.
// Cost: one prefill of a --tokens window per sample plus H eigen-decompositions of D x D per layer;
// 500 windows of 512 tokens on a 1B model (Llama-3.2-1B: 16 layers x 32 heads, D 64) is 256k
// tokens of prefill, about as long as a 256k-token prompt's prefill (see docs/methods/uncomp.md).
#include "eval/calibrate_uncomp.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <span>

#include "core/error.h"
#include "core/progress.h"
#include "core/timer.h"
#include "press/math/matrix_entropy.h"
#include "press/methods/uncomp.h"
#include "press/observer.h"

namespace kvs::eval {

namespace {

constexpr const char* kText = "wikitext2/wikitext-2-v1.tokens.valid.txt";
// stop=stable: from kStableMin samples on, every kStableEvery samples, the groups voted so far are
// compared with those of kStableEvery and 2 kStableEvery samples earlier; equal three times in a
// row: the remaining samples would not change them (the vote is a count), so the run stops.
constexpr int kStableEvery = 50, kStableMin = 150;

// cov=unitnorm: every query of the window, per layer ([layer][n][H * D], post- or pre-RoPE), then
// H_k of each query head's unit-norm token covariance (the official code's; it needs the mean
// before any token can be normalised, so the queries are kept: n x H x D floats per layer).
class QueryCapture : public LayerObserver {
 public:
  QueryCapture(int n_layer, int q_dim, bool post_rope) : q_(static_cast<size_t>(n_layer)), qdim_(q_dim), post_(post_rope) {}
  void on_layer(const LayerView& v) override {
    const float* q = post_ ? v.q : v.q_pre_rope;
    q_[static_cast<size_t>(v.layer)].insert(q_[static_cast<size_t>(v.layer)].end(), q, q + static_cast<size_t>(v.n_tok) * qdim_);
  }
  bool needs_pre_rope() const override { return !post_; }
  void clear() {
    for (auto& x : q_) x.clear();
  }
  // [n_layer][H] H_k.
  std::vector<double> entropy(int H, int D, int k, math::EntropyNorm norm) const {
    std::vector<double> out;
    for (const auto& q : q_) {
      const int64_t n = static_cast<int64_t>(q.size()) / qdim_;
      for (int h = 0; h < H; ++h)
        out.push_back(n < 2 ? 0.0
                            : math::truncated_entropy_of(
                                  math::unit_norm_covariance(std::span<const float>(q).subspan(static_cast<size_t>(h) * D),
                                                             n, D, qdim_),
                                  D, k, norm)
                                  .h);
    }
    return out;
  }

 private:
  std::vector<std::vector<float>> q_;
  int qdim_;
  bool post_;
};

nlohmann::json run_uncomp_calibration(const CalibrateArgs& a) {
  ParamMap opt = a.options;
  auto take = [&](const std::string& k, const std::string& def) {
    const auto it = opt.find(k);
    std::string v = it == opt.end() ? def : it->second;
    if (it != opt.end()) opt.erase(it);
    return v;
  };
  UncompCalibrateOptions o;
  const std::string preset = take("preset", "paper");
  if (preset != "paper" && preset != "official") fail("calibrate uncomp: preset must be paper or official, got '{}'", preset);
  const bool off = preset == "official";
  // k: the official code's 32 (entropy_utils.py cal_entropy_no_group_svd), the paper's D/4 (32 of
  // Llama-2's 128, Table 8) otherwise.
  const std::string groups_s = take("groups", "8"), k_s = take("k", off ? "32" : "auto"), norm_s = take("norm", "trace"),
                    cov_s = take("cov", off ? "unitnorm" : "eq1"),
                    lv_s = take("layer_value", off ? "official-erank" : "erank"), vote_s = take("vote", "balanced"),
                    q_s = take("queries", "post"), stop_s = take("stop", "stable");
  const std::string eps_s = take("eps", lv_s == "official-erank" ? "1" : "0.3");
  if (!opt.empty())
    fail("calibrate uncomp: unknown option '{}' (known: preset, groups, k, norm, cov, layer_value, vote, eps, queries, "
         "stop)",
         opt.begin()->first);
  if (stop_s != "stable" && stop_s != "none") fail("calibrate uncomp: stop must be stable or none, got '{}'", stop_s);
  const auto groups = parse_int64(groups_s);
  const auto k = k_s == "auto" ? std::optional<int64_t>(0) : parse_int64(k_s);
  const auto eps = parse_finite_double(eps_s);
  if (!groups || *groups < 1 || *groups > 1024) fail("calibrate uncomp: groups must be an integer in 1..1024, got '{}'", groups_s);
  if (!k || *k < 0 || *k > 65536 || (k_s != "auto" && *k == 0))
    fail("calibrate uncomp: k must be auto (head_dim / 4) or an integer in 1..65536, got '{}'", k_s);
  if (!eps || *eps < 0) fail("calibrate uncomp: eps must be a finite number >= 0, got '{}'", eps_s);
  if (norm_s != "topk" && norm_s != "trace") fail("calibrate uncomp: norm must be trace or topk, got '{}'", norm_s);
  if (cov_s != "eq1" && cov_s != "unitnorm") fail("calibrate uncomp: cov must be eq1 or unitnorm, got '{}'", cov_s);
  if (lv_s != "erank" && lv_s != "entropy" && lv_s != "official-erank")
    fail("calibrate uncomp: layer_value must be erank, entropy or official-erank, got '{}'", lv_s);
  if (vote_s != "balanced" && vote_s != "per-head") fail("calibrate uncomp: vote must be balanced or per-head, got '{}'", vote_s);
  if (q_s != "post" && q_s != "pre") fail("calibrate uncomp: queries must be post or pre (RoPE), got '{}'", q_s);
  o.groups = static_cast<int>(*groups);
  o.k = static_cast<int>(*k);
  o.eps = *eps;
  o.norm = norm_s == "topk" ? math::EntropyNorm::TopK : math::EntropyNorm::Trace;
  o.cov = cov_s == "eq1" ? UncompCov::Eq1 : UncompCov::UnitNorm;
  o.layer_value = lv_s == "erank"     ? UncompLayerValue::Erank
                  : lv_s == "entropy" ? UncompLayerValue::Entropy
                                      : UncompLayerValue::OfficialErank;
  if (stop_s == "stable") {
    o.check_every = kStableEvery;
    o.min_samples = kStableMin;
  }
  o.vote = vote_s == "balanced" ? math::VoteMode::Balanced : math::VoteMode::PerHead;

  const Model& m = a.model;
  const Tokenizer& tok = *m.tokenizer;
  Timer t_all;
  const std::vector<int32_t> all = tok.encode(a.data.text(kText), false, false);
  const int samples = a.samples > 0 ? a.samples : 500;
  const bool bos = tok.bos() >= 0;
  const int n_ctx = m.hp.n_ctx_train > 0 ? m.hp.n_ctx_train : 2048;
  const int64_t per_window = static_cast<int64_t>(all.size()) / samples + (bos ? 1 : 0);
  const int tokens = a.tokens > 0 ? a.tokens : static_cast<int>(std::max<int64_t>(64, std::min<int64_t>({512, n_ctx, per_window})));
  const int body = tokens - (bos ? 1 : 0);
  if (body < 2 || static_cast<int64_t>(all.size()) < body)
    fail("calibrate uncomp: {} has {} tokens, fewer than a window of {}", a.data.path(kText), all.size(), tokens);
  const int64_t span = static_cast<int64_t>(all.size()) - body;
  const bool overlap = static_cast<int64_t>(samples) * body > static_cast<int64_t>(all.size());

  const KvLayout& l = a.engine.kv_layout();
  const int L = l.n_layer, H = a.engine.attn_shape().n_head, Hkv = l.n_head_kv, D = l.head_dim;
  const int k_used = uncomp_resolve_k(o.k, D);
  StatsRequest req;
  if (o.cov == UncompCov::Eq1) req.query_gram = q_s == "post" ? QueryGram::PostRope : QueryGram::PreRope;
  QueryCapture capture(L, H * D, q_s == "post");
  // Windows are visited in a golden-ratio stride order (window (s P) mod d at step s, P ~ 0.618 d
  // coprime with d), so that the windows of an early stop are spread over the whole text; the
  // entropies are kept by window and handed to the vote in text order, whatever stopped the run.
  int stride = 1;
  if (samples > 2) {
    stride = std::max(1, static_cast<int>(std::lround(0.6180339887 * samples)));
    while (std::gcd(stride, samples) != 1) ++stride;
  }
  const size_t per_sample = static_cast<size_t>(L) * H;
  std::vector<std::vector<double>> by_window(static_cast<size_t>(samples));
  std::vector<double> erank;  // the windows seen so far, in text order
  auto collect = [&] {
    erank.clear();
    for (const auto& w : by_window) erank.insert(erank.end(), w.begin(), w.end());
    return static_cast<int>(erank.size() / per_sample);
  };
  double forward_s = 0, entropy_s = 0;
  Progress prog(static_cast<size_t>(samples), samples, a.progress);  // a bar (terminal) or lines (log)
  prog.set_label("uncomp calibration");
  // Groups (KV heads and layers) voted on the first n samples, for the early stop.
  auto groups_after = [&]() {
    const int n = collect();
    const nlohmann::json d = uncomp_calibration_data(erank, n, L, H, Hkv, D, o);
    return nlohmann::json{d["kv_head_groups"], d["layer_groups"]};
  };
  std::vector<nlohmann::json> checks;
  int used = samples;
  for (int step = 0; step < samples; ++step) {
    const int i = static_cast<int>(static_cast<int64_t>(step) * stride % samples);
    const int64_t start = samples > 1 ? span * i / (samples - 1) : 0;
    std::vector<int32_t> ids;
    if (bos) ids.push_back(tok.bos());
    ids.insert(ids.end(), all.begin() + start, all.begin() + start + body);
    Timer tf;
    auto cache = a.engine.new_cache();
    auto stats = a.engine.new_stats(req);
    if (o.cov == UncompCov::UnitNorm) capture.clear();
    a.engine.forward(*cache, ids, Logits::None,
                     o.cov == UncompCov::Eq1 ? static_cast<LayerObserver*>(stats.get()) : &capture);
    forward_s += tf.seconds();
    Timer te;
    const std::vector<double> e = o.cov == UncompCov::Eq1 ? uncomp_sample_entropy(*stats, L, k_used, o.norm)
                                                          : capture.entropy(H, D, k_used, o.norm);
    by_window[static_cast<size_t>(i)] = e;
    entropy_s += te.seconds();
    prog.advance(1);
    const int n = step + 1;
    if (o.check_every > 0 && n % o.check_every == 0 && n < samples) {
      checks.push_back(groups_after());
      const size_t c = checks.size();
      if (n >= o.min_samples && c >= 3 && checks[c - 1] == checks[c - 2] && checks[c - 2] == checks[c - 3]) {
        used = n;
        break;
      }
    }
  }
  Timer tv;
  const int n_used = collect();
  KVS_ASSERT(n_used == used);
  nlohmann::json j = uncomp_calibration_data(erank, used, L, H, Hkv, D, o);
  j["preset"] = preset;
  j["samples_requested"] = samples;
  j["stop"] = stop_s;  // stable: stopped once the groups no longer moved (samples < samples_requested)
  j["text"] = kText;
  j["tokens"] = tokens;
  j["windows_overlap"] = overlap;
  j["queries"] = q_s == "post" ? "post_rope" : "pre_rope";
  j["seconds"] = std::round(t_all.seconds() * 1000) / 1000;
  j["seconds_forward"] = std::round(forward_s * 1000) / 1000;
  j["seconds_entropy"] = std::round(entropy_s * 1000) / 1000;
  j["seconds_vote"] = std::round(tv.seconds() * 1e6) / 1e6;
  if (a.progress && j.contains("stability"))
    fmt::print(stderr, "uncomp calibration: {} of {} samples{}; layer groups {}; KV-head groups agree on {:.1f}% of heads between the two "
                       "halves (chance {:.1f}%)\n",
               used, samples, used < samples ? " (the groups were stable)" : "", j["layer_groups"].dump(),
               100 * j["stability"]["agreement"].get<double>(),
               100 * j["stability"]["chance_agreement"].get<double>());
  return j;
}

}  // namespace

CalibratorInfo uncomp_calibrator() {
  return {"uncomp",
          "UNComp head groups (erank_k of the queries, M groups per layer, majority vote) and layer groups (Eq. 8) on "
          "WikiText-2 valid (--samples windows, default 500, of --tokens tokens; --opt "
          "preset|groups|k|norm|cov|layer_value|vote|eps|queries|stop)",
          run_uncomp_calibration};
}

}  // namespace kvs::eval
