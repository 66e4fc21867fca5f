// UNComp's group-stage prefill on the real stories260K model (5 layers, 8/4 heads), with a
// calibration written for the test (layer groups {0, 0, 1, 1, 2}):
//  - the rows kept before layers 2 and 4 are the top rows by the previous layer's attention from
//    the last token (summed over heads), the last l = 8 rows always kept, in the Eq. 10 counts;
//  - pruned tokens have no K/V in the later layers;
//  - the last position's logits equal a scalar reference that runs layers 2-3 on the first kept
//    set and layer 4 on the second, each layer's cache holding those rows only;
//  - the prefill runs layer-major whatever -b: the kept rows and the logits are the same for a
//    one-chunk prefill and chunks of 16 and 7 (the ranking query is the context's last token);
//    a query-aware question is never pruned;
//  - through the pipeline: the compressed cache holds exactly the requested slots, keep 1 is the
//    uncompressed reference, compress_from prefills afresh (same cache as a fresh prefill).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kvcache/attention.h"
#include "press/methods/uncomp.h"
#include "press/registry.h"
#include "runtime/calibration_store.h"
#include "runtime/engine.h"
#include "runtime/engine_probe.h"
#include "runtime/session.h"
#include "reference_layers.h"
#include "test_util.h"

namespace kvs {
namespace {

bool contains(const std::vector<int32_t>& v, int32_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Calibration files go to a temporary folder ($KVSHRINK_CALIB_DIR) for the test's life.
struct CalibDir {
  test::TempDir dir{"uncomp_calib"};
  CalibDir() { ::setenv("KVSHRINK_CALIB_DIR", dir.str().c_str(), 1); }
  ~CalibDir() { ::unsetenv("KVSHRINK_CALIB_DIR"); }
};

void save_test_calibration(const Model& m) {
  nlohmann::json d;
  d["groups"] = 8;
  d["kv_head_groups"] = std::vector<std::vector<int>>(5, std::vector<int>{0, 1, 2, 3});
  d["layer_groups"] = {0, 0, 1, 1, 2};
  save_calibration(m, "uncomp", d);
}

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t{1};
  while (static_cast<int>(t.size()) < n) t.push_back(static_cast<int32_t>(3 + rng() % (vocab - 3)));
  return t;
}

// Every layer: the alive positions and the hidden states entering it; the last row's query.
class Capture : public LayerObserver {
 public:
  Capture(int L, int E, int Q, LayerObserver* next)
      : E_(E), Q_(Q), next_(next), pos(L), hidden(L), q_last(L), q_all(L) {}
  void on_layer(const LayerView& v) override {
    pos[v.layer].insert(pos[v.layer].end(), v.pos, v.pos + v.n_tok);
    hidden[v.layer].insert(hidden[v.layer].end(), v.hidden, v.hidden + static_cast<size_t>(v.n_tok) * E_);
    q_last[v.layer].assign(v.q + static_cast<size_t>(v.n_tok - 1) * Q_, v.q + static_cast<size_t>(v.n_tok) * Q_);
    q_all[v.layer].insert(q_all[v.layer].end(), v.q, v.q + static_cast<size_t>(v.n_tok) * Q_);
    if (next_) next_->on_layer(v);
  }

 private:
  int E_, Q_;
  LayerObserver* next_;

 public:
  std::vector<std::vector<int32_t>> pos;
  std::vector<std::vector<float>> hidden, q_last, q_all;  // q_all: [rows seen][n_head * head_dim]
};

// Attention of one query [H][D] (the last row, or the row at position max_pos: causal, keys at
// positions <= max_pos) over the slots of `layer`, summed over the heads, by position.
std::map<int32_t, double> last_row_attention(const KvCache& c, int layer, const AttnShape& s, const std::vector<float>& q,
                                             int32_t max_pos = INT32_MAX) {
  std::map<int32_t, double> out;
  const int G = s.n_head / s.n_head_kv;
  std::vector<float> k(static_cast<size_t>(s.head_dim));
  for (int qh = 0; qh < s.n_head; ++qh) {
    const HeadCache& h = c.head(layer, qh / G);
    std::vector<double> logit(static_cast<size_t>(h.len()));
    double mx = -1e300, z = 0;
    for (int32_t j = 0; j < h.len(); ++j) {
      if (h.pos[static_cast<size_t>(j)] > max_pos) {
        logit[j] = -1e300;
        continue;
      }
      c.read_k(layer, qh / G, j, k.data());
      double d = 0;
      for (int i = 0; i < s.head_dim; ++i) d += static_cast<double>(q[static_cast<size_t>(qh) * s.head_dim + i]) * k[i];
      logit[j] = d * s.scale;
      mx = std::max(mx, logit[j]);
    }
    for (double& l : logit) z += (l = std::exp(l - mx));
    for (int32_t j = 0; j < h.len(); ++j)
      if (h.pos[static_cast<size_t>(j)] <= max_pos) out[h.pos[static_cast<size_t>(j)]] += logit[j] / z;
  }
  return out;
}

// `kept` (positions) is a top set of `score` among the positions not in [protect_from, ...):
// every kept unprotected position scores at least as high as every dropped one (up to tol).
void expect_top_set(const std::map<int32_t, double>& score, const std::vector<int32_t>& kept, int32_t protect_from,
                    double tol) {
  const std::set<int32_t> k(kept.begin(), kept.end());
  double min_kept = 1e300, max_dropped = -1e300;
  for (const auto& [p, s] : score) {
    if (p >= protect_from) {
      EXPECT_TRUE(k.count(p)) << "protected position " << p << " was pruned";
      continue;
    }
    if (k.count(p))
      min_kept = std::min(min_kept, s);
    else
      max_dropped = std::max(max_dropped, s);
  }
  EXPECT_GE(min_kept, max_dropped - tol);
}

TEST(UncompModel, PrunedPrefillMatchesAReferenceOnTheKeptRows) {
  CalibDir calib;
  auto model = Model::load(test::stories_gguf());
  save_test_calibration(*model);
  const HParams& hp = model->hp;
  const int n = 60, E = hp.n_embd, Q = hp.n_head * hp.head_dim, V = hp.n_vocab;
  const auto tokens = random_tokens(n, V, 7);
  const Press press = make_press("uncomp", {{"variant", "group-stage"}, {"stage_min", "0.5"}});
  CompressRequest req;
  req.keep = 0.5;
  std::vector<std::vector<int32_t>> kept_first;  // the one-chunk run's kept rows per layer
  std::vector<float> logits_first;
  for (int batch : {n, 16, 7}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    EngineParams ep;
    ep.kv_dtype = DType::F32;  // the scalar reference keeps F32 K/V; F16 storage would differ by its rounding
    ep.n_threads = 2;
    ep.n_batch = batch;
    Engine e(*model, ep);
    const AttnShape shape = e.attn_shape();
    // Unpruned: hidden states entering layer 2 (layers 0-1 are the same in both runs).
    Capture full(hp.n_layer, E, Q, nullptr);
    auto c0 = e.new_cache();
    e.forward(*c0, tokens, Logits::None, &full);
    // Pruned.
    auto stats = e.new_stats(press.needs().stats);
    Capture seen(hp.n_layer, E, Q, stats.get());
    EngineProbe probe(e);
    PrefillRows pr;
    pr.n_tokens = n;
    pr.n_batch = batch;
    pr.stats = stats.get();
    pr.shape = &shape;
    pr.pool = &e.pool();
    pr.request = &req;
    pr.probe = &probe;
    auto sel = press.prefill_rows(pr);
    ASSERT_NE(sel, nullptr);
    ForwardHooks hooks;
    hooks.observer = &seen;
    hooks.rows = sel.get();
    auto c = e.new_cache();
    const std::vector<float> logits = e.forward(*c, tokens, Logits::Last, hooks);
    // Eq. 10 counts: 60 rows, last group 30 (0.5), step 15: layers 2-3 keep 45, layer 4 30,
    // for every chunk size (layer-major prefill).
    const std::vector<int> want{60, 60, 45, 45, 30};
    for (int l = 0; l < hp.n_layer; ++l) {
      EXPECT_EQ(static_cast<int>(seen.pos[l].size()), want[l]) << "layer " << l;
      for (int kvh = 0; kvh < hp.n_head_kv; ++kvh) EXPECT_EQ(c->head(l, kvh).pos, seen.pos[l]) << "layer " << l;
    }
    if (batch == n) {
      kept_first = seen.pos;
      logits_first = logits;
    } else {
      EXPECT_EQ(seen.pos, kept_first);  // the same rows whatever -b
      for (int i = 0; i < V; ++i) EXPECT_NEAR(logits[i], logits_first[i], 1e-4) << i;
    }
    EXPECT_EQ(seen.pos[2], seen.pos[3]);
    for (int32_t p = n - 8; p < n; ++p) EXPECT_TRUE(contains(seen.pos[4], p)) << p;
    // Reference: layers 2-3 on the first kept set (from the unpruned hidden states), layer 4 on the
    // second, each layer's cache holding those rows only.
    const std::vector<int32_t>& set1 = seen.pos[2];
    const std::vector<int32_t>& set2 = seen.pos[4];
    std::vector<float> x;
    for (int32_t p : set1) x.insert(x.end(), &full.hidden[2][static_cast<size_t>(p) * E], &full.hidden[2][static_cast<size_t>(p + 1) * E]);
    KvLayout rl{hp.n_layer, hp.n_head_kv, hp.head_dim, DType::F32, 16};
    PagePool rpool(rl.page_bytes());
    KvCache rc(rpool, rl);
    std::vector<float> q3;
    test::ref_layers(*model, rc, 2, 4, x, set1, q3);
    // The kept sets are top sets of the last token's attention in the previous layer (for every
    // chunk size: the whole context is ranked by its last token).
    expect_top_set(last_row_attention(*c0, 1, shape, full.q_last[1]), set1, n - 8, 1e-5);
    expect_top_set(last_row_attention(rc, 3, shape, q3), set2, n - 8, 1e-5);
    std::vector<float> x2;
    for (int32_t p : set2) {
      const size_t i = static_cast<size_t>(std::lower_bound(set1.begin(), set1.end(), p) - set1.begin());
      ASSERT_LT(i, set1.size());
      x2.insert(x2.end(), &x[i * E], &x[(i + 1) * E]);
    }
    test::ref_layers(*model, rc, 4, 5, x2, set2, q3);
    std::vector<float> xn(static_cast<size_t>(E)), ref(static_cast<size_t>(V));
    kernels::rmsnorm(&x2[x2.size() - E], model->output_norm.f32(), xn.data(), E, hp.rms_eps);
    kernels::matmul_ref(model->output, xn.data(), 1, ref.data());
    double max_err = 0, diff = 0;
    auto c1 = e.new_cache();
    const auto unpruned = e.forward(*c1, tokens, Logits::Last);
    for (int i = 0; i < V; ++i) {
      max_err = std::max(max_err, static_cast<double>(std::fabs(ref[i] - logits[i])));
      diff = std::max(diff, static_cast<double>(std::fabs(unpruned[i] - logits[i])));
    }
    EXPECT_LT(max_err, 2e-3);
    EXPECT_GT(diff, 1e-3);  // the pruning changed the result
  }
}

// stage_queries=8 (preset=official): the rows kept before layer 2 are a top set of the previous
// layer's attention from the last 8 queries summed over them and every head (the official
// llama_attn_forward_Uncomp: attn.sum(heads)[-8:].sum(0)), written out here with causal masks.
TEST(UncompModel, OfficialRanksRowsByTheLastEightQueries) {
  CalibDir calib;
  auto model = Model::load(test::stories_gguf());
  save_test_calibration(*model);
  const HParams& hp = model->hp;
  const int n = 60, E = hp.n_embd, Q = hp.n_head * hp.head_dim;
  const auto tokens = random_tokens(n, hp.n_vocab, 11);
  const Press press = make_press("uncomp", {{"variant", "group-stage"}, {"stage_min", "0.5"}, {"stage_queries", "8"}});
  CompressRequest req;
  req.keep = 0.5;
  EngineParams ep;
  ep.kv_dtype = DType::F32;
  ep.n_threads = 2;
  Engine e(*model, ep);
  const AttnShape shape = e.attn_shape();
  Capture full(hp.n_layer, E, Q, nullptr);
  auto c0 = e.new_cache();
  e.forward(*c0, tokens, Logits::None, &full);
  auto stats = e.new_stats(press.needs().stats);
  Capture seen(hp.n_layer, E, Q, stats.get());
  EngineProbe probe(e);
  PrefillRows pr;
  pr.n_tokens = n;
  pr.n_batch = n;
  pr.stats = stats.get();
  pr.shape = &shape;
  pr.pool = &e.pool();
  pr.request = &req;
  pr.probe = &probe;
  auto sel = press.prefill_rows(pr);
  ASSERT_NE(sel, nullptr);
  ForwardHooks hooks;
  hooks.observer = &seen;
  hooks.rows = sel.get();
  auto c = e.new_cache();
  e.forward(*c, tokens, Logits::None, hooks);
  ASSERT_EQ(seen.pos[2].size(), 45u);
  std::map<int32_t, double> score;
  for (int t = n - 8; t < n; ++t) {
    const std::vector<float> q(full.q_all[1].begin() + static_cast<std::ptrdiff_t>(t) * Q,
                               full.q_all[1].begin() + static_cast<std::ptrdiff_t>(t + 1) * Q);
    for (const auto& [p, a] : last_row_attention(*c0, 1, shape, q, t)) score[p] += a;
  }
  expect_top_set(score, seen.pos[2], n - 8, 1e-5);
  // The last token alone ranks differently on this prompt (the option matters).
  const auto last = last_row_attention(*c0, 1, shape, full.q_last[1]);
  std::vector<std::pair<double, int32_t>> a, b;
  for (const auto& [p, v] : score) if (p < n - 8) a.push_back({-v, p});
  for (const auto& [p, v] : last) if (p < n - 8) b.push_back({-v, p});
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::set<int32_t> ta, tb;
  for (int i = 0; i < 37; ++i) ta.insert(a[i].second), tb.insert(b[i].second);
  EXPECT_NE(ta, tb);
}

TEST(UncompModel, QueryAwareQuestionIsNeverPruned) {
  CalibDir calib;
  auto model = Model::load(test::stories_gguf());
  save_test_calibration(*model);
  const HParams& hp = model->hp;
  const int n = 80;
  const auto tokens = random_tokens(n, hp.n_vocab, 3);
  EngineParams ep;
  ep.n_batch = n;
  Engine e(*model, ep);
  const AttnShape shape = e.attn_shape();
  const Press press = make_press("uncomp", {{"variant", "group-stage"}, {"stage_min", "0.2"}});
  CompressRequest req;
  req.keep = 0.25;
  req.sinks = 4;
  auto stats = e.new_stats(press.needs().stats);
  Capture seen(hp.n_layer, hp.n_embd, hp.n_head * hp.head_dim, stats.get());
  EngineProbe probe(e);
  PrefillRows pr;
  pr.n_tokens = n;
  pr.keep_last = 20;  // the question
  pr.n_batch = n;
  pr.stats = stats.get();
  pr.shape = &shape;
  pr.pool = &e.pool();
  pr.request = &req;
  pr.probe = &probe;
  auto sel = press.prefill_rows(pr);
  ForwardHooks hooks;
  hooks.observer = &seen;
  hooks.rows = sel.get();
  auto c = e.new_cache();
  e.forward(*c, tokens, Logits::Last, hooks);
  // Last group: at least max(0.2 x 80, 20 + 4 + 1) = 25 rows; the integer step (80 - 25) / 2 = 27
  // leaves 80 - 2 x 27 = 26: the 20 question rows, the 4 sinks and two more.
  EXPECT_EQ(seen.pos[4].size(), 26u);
  for (int32_t p = 0; p < 4; ++p) EXPECT_TRUE(contains(seen.pos[4], p));
  for (int32_t p = n - 20; p < n; ++p) EXPECT_TRUE(contains(seen.pos[4], p));
}

TEST(UncompModel, PipelineCompressesToTheRequestAndKeepOneIsExact) {
  CalibDir calib;
  auto model = Model::load(test::stories_gguf());
  save_test_calibration(*model);
  const HParams& hp = model->hp;
  const int n = 96;
  const auto tokens = random_tokens(n, hp.n_vocab, 11);
  const std::vector<int32_t> question = random_tokens(6, hp.n_vocab, 12);
  EngineParams ep;
  ep.n_batch = 128;
  Engine e(*model, ep);
  const int heads = hp.n_layer * hp.n_head_kv;
  AnswerOptions ao;
  ao.max_new_tokens = 6;
  ao.stop_at_eog = false;
  CompressionSpec full_spec;
  full_spec.press = make_press("full");
  CompressedContext full(e, full_spec);
  full.prefill(tokens, make_press("uncomp", {{"variant", "group-stage"}}).needs());
  const Answer ref = full.ask(question, ao);
  for (const std::string variant : {"group", "group-stage"}) {
    SCOPED_TRACE(variant);
    CompressionSpec spec;
    spec.press = make_press("uncomp", {{"variant", variant}});
    spec.trigger = spec.press.trigger;
    spec.request.keep = 0.25;
    CompressedContext ctx(e, spec);
    ctx.prefill(tokens);
    EXPECT_EQ(ctx.cache().total_slots(), static_cast<size_t>(std::lround(0.25 * n * heads)));
    for (int l = 0; l < hp.n_layer; ++l)
      for (int kvh = 0; kvh < hp.n_head_kv; ++kvh)
        for (int32_t p = n - 8; p < n; ++p) EXPECT_TRUE(contains(ctx.cache().head(l, kvh).pos, p));
    // Group 0 (KV head 0) keeps more than group 3 (KV head 3) in the unpruned first layer.
    EXPECT_GT(ctx.cache().len(0, 0), ctx.cache().len(0, 3));
    const Answer a = ctx.ask(question, ao);
    EXPECT_EQ(a.tokens.size(), 6u);
    // Derived from a shared prefill: the same cache as its own prefill (group-stage re-prefills).
    CompressedContext derived(e, spec);
    derived.compress_from(full);
    for (int l = 0; l < hp.n_layer; ++l)
      for (int kvh = 0; kvh < hp.n_head_kv; ++kvh) EXPECT_EQ(derived.cache().head(l, kvh).pos, ctx.cache().head(l, kvh).pos);
    // keep 1: nothing pruned or evicted, the same answer as the full cache.
    spec.request.keep = 1.0;
    CompressedContext one(e, spec);
    one.prefill(tokens);
    EXPECT_EQ(one.cache().total_slots(), static_cast<size_t>(n * heads));
    EXPECT_EQ(one.ask(question, ao).tokens, ref.tokens);
  }
}

}  // namespace
}  // namespace kvs
