// `kvshrink calibrate --press uncomp`: UNComp's preparation stage (Xiong et al. 2025 §3.3.1,
// Algorithm 1, Eqs. 7-8; press/methods/uncomp.h). d windows of WikiText-2's validation split
// (d = --samples, 500 by default as the paper) are prefilled one by one with the query Gram
// statistics; each window gives erank_k of every query head (Eqs. 1, 5, 6, from the d x d
// covariance, never the queries), its KV heads' labels (M groups per layer by erank) and the layer
// values; the majority vote gives each KV head its group and the entropy drop (Eq. 8) the layer
// groups. The same vote on the first and second halves of the windows (disjoint text) measures
// how stable the groups are ("stability" in the saved data).
//
// Choices: the text is ../shared/data/wikitext2/wikitext-2-v1.tokens.valid.txt, the only copy of
// the validation split here (the tokenized v1 release: words split by spaces, rare ones <unk>); the
// paper samples "500 data points from Wikitext2" without saying which split or how long; the
// official search runs its prompts as they come. Here a data point is a window of --tokens tokens
// (default min(512, the model's context, text / d) so that the windows do not overlap), evenly
// spaced over the tokenized text, BOS first. Queries after RoPE (the official code takes
// query_states after apply_rotary_pos_emb); --opt queries=pre for before.
//
// Options (--opt): groups (M, 8), k (32), norm (topk | trace), vote (balanced | per-head), eps (1.0),
// queries (post | pre).
#include "eval/calibrate_uncomp.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/progress.h"
#include "core/timer.h"
#include "press/methods/uncomp.h"

namespace kvs::eval {

namespace {

constexpr const char* kText = "wikitext2/wikitext-2-v1.tokens.valid.txt";

nlohmann::json run_uncomp_calibration(const CalibrateArgs& a) {
  ParamMap opt = a.options;
  auto take = [&](const std::string& k, const std::string& def) {
    const auto it = opt.find(k);
    std::string v = it == opt.end() ? def : it->second;
    if (it != opt.end()) opt.erase(it);
    return v;
  };
  UncompCalibrateOptions o;
  const std::string groups_s = take("groups", "8"), k_s = take("k", "32"), norm_s = take("norm", "topk"),
                    vote_s = take("vote", "balanced"), eps_s = take("eps", "1"), q_s = take("queries", "post");
  if (!opt.empty())
    fail("calibrate uncomp: unknown option '{}' (known: groups, k, norm, vote, eps, queries)", opt.begin()->first);
  const auto groups = parse_int64(groups_s), k = parse_int64(k_s);
  const auto eps = parse_finite_double(eps_s);
  if (!groups || *groups < 1 || *groups > 1024) fail("calibrate uncomp: groups must be an integer in 1..1024, got '{}'", groups_s);
  if (!k || *k < 1 || *k > 65536) fail("calibrate uncomp: k must be an integer in 1..65536, got '{}'", k_s);
  if (!eps || *eps < 0) fail("calibrate uncomp: eps must be a finite number >= 0, got '{}'", eps_s);
  if (norm_s != "topk" && norm_s != "trace") fail("calibrate uncomp: norm must be topk or trace, got '{}'", norm_s);
  if (vote_s != "balanced" && vote_s != "per-head") fail("calibrate uncomp: vote must be balanced or per-head, got '{}'", vote_s);
  if (q_s != "post" && q_s != "pre") fail("calibrate uncomp: queries must be post or pre (RoPE), got '{}'", q_s);
  o.groups = static_cast<int>(*groups);
  o.k = static_cast<int>(*k);
  o.eps = *eps;
  o.norm = norm_s == "topk" ? math::EntropyNorm::TopK : math::EntropyNorm::Trace;
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
  const int L = l.n_layer, H = a.engine.attn_shape().n_head, Hkv = l.n_head_kv;
  StatsRequest req;
  req.query_gram = q_s == "post" ? QueryGram::PostRope : QueryGram::PreRope;
  std::vector<double> erank;
  erank.reserve(static_cast<size_t>(samples) * L * H);
  double forward_s = 0, entropy_s = 0;
  Progress prog(static_cast<size_t>(samples), samples, a.progress);  // a bar (terminal) or lines (log)
  prog.set_label("uncomp calibration");
  for (int i = 0; i < samples; ++i) {
    const int64_t start = samples > 1 ? span * i / (samples - 1) : 0;
    std::vector<int32_t> ids;
    if (bos) ids.push_back(tok.bos());
    ids.insert(ids.end(), all.begin() + start, all.begin() + start + body);
    Timer tf;
    auto cache = a.engine.new_cache();
    auto stats = a.engine.new_stats(req);
    a.engine.forward(*cache, ids, Logits::None, stats.get());
    forward_s += tf.seconds();
    Timer te;
    const std::vector<double> e = uncomp_sample_erank(*stats, L, o.k, o.norm);
    erank.insert(erank.end(), e.begin(), e.end());
    entropy_s += te.seconds();
    prog.advance(1);
  }
  Timer tv;
  nlohmann::json j = uncomp_calibration_data(erank, samples, L, H, Hkv, o);
  j["text"] = kText;
  j["tokens"] = tokens;
  j["windows_overlap"] = overlap;
  j["queries"] = q_s == "post" ? "post_rope" : "pre_rope";
  j["seconds"] = std::round(t_all.seconds() * 1000) / 1000;
  j["seconds_forward"] = std::round(forward_s * 1000) / 1000;
  j["seconds_entropy"] = std::round(entropy_s * 1000) / 1000;
  j["seconds_vote"] = std::round(tv.seconds() * 1e6) / 1e6;
  if (a.progress && j.contains("stability"))
    fmt::print(stderr, "uncomp calibration: layer groups {}; KV-head groups agree on {:.1f}% of heads between the two "
                       "halves (chance {:.1f}%)\n",
               j["layer_groups"].dump(), 100 * j["stability"]["agreement"].get<double>(),
               100 * j["stability"]["chance_agreement"].get<double>());
  return j;
}

}  // namespace

CalibratorInfo uncomp_calibrator() {
  return {"uncomp",
          "UNComp head groups (erank_k of the queries, M groups per layer, majority vote) and layer groups (Eq. 8) on "
          "WikiText-2 valid (--samples windows, default 500, of --tokens tokens; --opt groups|k|norm|vote|eps|queries)",
          run_uncomp_calibration};
}

}  // namespace kvs::eval
