// What the forward offers compression methods, on the real stories260K model: dropping rows
// between layers (checked against a scalar reference that runs the remaining layers on the kept
// rows alone), the query projection of the model probe (equal to the engine's own queries), probe
// forwards that leave the cache untouched, and the context's per-token NLL.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "press/press.h"
#include "press/registry.h"
#include "runtime/engine.h"
#include "runtime/engine_probe.h"
#include "runtime/session.h"
#include "reference_layers.h"
#include "test_util.h"

namespace kvs {
namespace {

const char* kText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she "
    "saw a big, red ball. She wanted to play with it, but it was too high.";

// Keeps even positions and the last row of every chunk, from layer `from` on.
class EvenRows : public RowSelector {
 public:
  explicit EvenRows(int from) : from_(from) {}
  bool select_rows(const RowView& v, std::vector<int32_t>& keep) override {
    if (v.layer != from_) return false;
    for (int t = 0; t < v.n_tok; ++t)
      if (v.pos[t] % 2 == 0 || t == v.n_tok - 1) keep.push_back(t);
    return true;
  }

 private:
  int from_;
};

// Captures what one layer shows: hidden states in, queries after RoPE, positions.
class Capture : public LayerObserver {
 public:
  explicit Capture(int layer, int E, int Q) : layer_(layer), E_(E), Q_(Q) {}
  void on_layer(const LayerView& v) override {
    if (v.layer != layer_) return;
    hidden.insert(hidden.end(), v.hidden, v.hidden + static_cast<size_t>(v.n_tok) * E_);
    attn_in.insert(attn_in.end(), v.attn_in, v.attn_in + static_cast<size_t>(v.n_tok) * E_);
    q.insert(q.end(), v.q, v.q + static_cast<size_t>(v.n_tok) * Q_);
    pos.insert(pos.end(), v.pos, v.pos + v.n_tok);
    cache_len.push_back(v.cache->len(v.layer, 0));
  }
  std::vector<float> hidden, attn_in, q;
  std::vector<int32_t> pos, cache_len;

 private:
  int layer_, E_, Q_;
};

// The remaining layers [from, L) and the output on rows x [n][E] at positions pos, each layer's
// cache holding these rows only: scalar matmuls (double accumulation), scalar attention.
std::vector<float> reference_tail(const Model& m, int from, std::vector<float> x, const std::vector<int32_t>& pos) {
  const HParams& hp = m.hp;
  const int n = static_cast<int>(pos.size()), E = hp.n_embd;
  KvLayout l{hp.n_layer, hp.n_head_kv, hp.head_dim, DType::F32, 16};
  PagePool pool(l.page_bytes());
  KvCache cache(pool, l);
  std::vector<float> q_last;
  test::ref_layers(m, cache, from, hp.n_layer, x, pos, q_last);
  std::vector<float> xn(static_cast<size_t>(n) * E);
  for (int t = 0; t < n; ++t) kernels::rmsnorm(&x[static_cast<size_t>(t) * E], m.output_norm.f32(), &xn[static_cast<size_t>(t) * E], E, hp.rms_eps);
  std::vector<float> logits(static_cast<size_t>(n) * hp.n_vocab);
  kernels::matmul_ref(m.output, xn.data(), n, logits.data());
  return logits;
}

// Half the rows dropped before layer k: the kept rows' logits equal a reference that runs layers
// k.. on those rows alone (from the hidden states an unpruned forward gives them at layer k);
// layers < k hold every token, layers >= k only the kept ones; positions are unchanged. In one
// chunk and in several: with a row selector the forward runs layer-major, so the selector sees
// the whole prefill and the kept rows (and logits) do not depend on the chunk size.
TEST(ForwardHooks, RowSelectionMatchesARunOfTheRemainingLayersOnTheKeptRows) {
  auto model = Model::load(test::stories_gguf());
  const HParams& hp = model->hp;
  const auto tokens = model->tokenizer->encode(kText, true, false);
  const int n = static_cast<int>(tokens.size()), E = hp.n_embd, Q = hp.n_head * hp.head_dim, k_layer = 2;
  for (int batch : {n, 16}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    EngineParams ep;
    ep.kv_dtype = DType::F32;  // the scalar reference keeps F32 K/V; F16 storage would differ by its rounding
    ep.n_threads = 2;
    ep.n_batch = batch;
    Engine e(*model, ep);
    // Hidden states entering layer k, unpruned.
    Capture full(k_layer, E, Q);
    auto c0 = e.new_cache();
    e.forward(*c0, tokens, Logits::None, &full);
    ASSERT_EQ(static_cast<int>(full.pos.size()), n);
    // Pruned forward.
    EvenRows sel(k_layer);
    Capture seen(k_layer, E, Q);
    std::vector<int32_t> rows;
    ForwardHooks hooks;
    hooks.rows = &sel;
    hooks.observer = &seen;
    hooks.logits_rows = &rows;
    auto c = e.new_cache();
    const auto logits = e.forward(*c, tokens, Logits::All, hooks);
    // Which rows survive: even positions and the prefill's last row, whatever the chunk size.
    std::vector<int32_t> want_rows;
    for (int i = 0; i < n; ++i)
      if (i % 2 == 0 || i == n - 1) want_rows.push_back(i);
    ASSERT_EQ(rows, want_rows);
    ASSERT_EQ(logits.size(), want_rows.size() * static_cast<size_t>(hp.n_vocab));
    EXPECT_EQ(seen.pos, want_rows);  // positions of the kept rows are their own
    for (int layer = 0; layer < hp.n_layer; ++layer)
      for (int kvh = 0; kvh < hp.n_head_kv; ++kvh) {
        const auto& p = c->head(layer, kvh).pos;
        if (layer < k_layer) {
          EXPECT_EQ(static_cast<int>(p.size()), n);
        } else {
          EXPECT_EQ(p, want_rows);
        }
      }
    EXPECT_EQ(c->n_past(), n);
    // Reference on the kept rows.
    std::vector<float> x;
    for (int32_t r : want_rows) x.insert(x.end(), &full.hidden[static_cast<size_t>(r) * E], &full.hidden[static_cast<size_t>(r + 1) * E]);
    const auto ref = reference_tail(*model, k_layer, x, want_rows);
    double max_err = 0;
    for (size_t i = 0; i < ref.size(); ++i) max_err = std::max(max_err, static_cast<double>(std::fabs(ref[i] - logits[i])));
    EXPECT_LT(max_err, 2e-3);
    // And the pruning changed something (the dropped rows mattered to the unpruned logits).
    auto c1 = e.new_cache();
    const auto unpruned = e.forward(*c1, tokens, Logits::Last);
    double diff = 0;
    for (int v = 0; v < hp.n_vocab; ++v)
      diff = std::max(diff, static_cast<double>(std::fabs(unpruned[v] - logits[logits.size() - hp.n_vocab + v])));
    EXPECT_GT(diff, 1e-2);
  }
}

// The probe's query projection of a real hidden state equals the query the engine computed.
TEST(ForwardHooks, ProbeProjectsTheEnginesOwnQueries) {
  auto model = Model::load(test::stories_gguf());
  const HParams& hp = model->hp;
  Engine e(*model, {});
  const auto tokens = model->tokenizer->encode(kText, true, false);
  const int E = hp.n_embd, Q = hp.n_head * hp.head_dim;
  for (int layer : {0, 3}) {
    Capture cap(layer, E, Q);
    auto c = e.new_cache();
    e.forward(*c, tokens, Logits::None, &cap);
    EngineProbe probe(e);
    const int n = static_cast<int>(cap.pos.size());
    std::vector<float> out(static_cast<size_t>(n) * Q);
    probe.project_queries(layer, cap.hidden.data(), n, probe.rope_table(layer, cap.pos).data(), false, out.data());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], cap.q[i], 1e-5) << "layer " << layer << " i " << i;
    // The observers' attention input is attn_norm of the residual stream (computed here in double
    // from the layer's weights), and projecting it without a norm gives the same queries.
    const float* w = model->layers[static_cast<size_t>(layer)].attn_norm.f32();
    for (int t = 0; t < n; ++t) {
      const float* x = cap.hidden.data() + static_cast<size_t>(t) * E;
      double ss = 0;
      for (int i = 0; i < E; ++i) ss += static_cast<double>(x[i]) * x[i];
      const double r = 1.0 / std::sqrt(ss / E + hp.rms_eps);
      for (int i = 0; i < E; ++i)
        ASSERT_NEAR(cap.attn_in[static_cast<size_t>(t) * E + i], x[i] * r * w[i], 1e-5) << "t " << t << " i " << i;
    }
    std::vector<float> out2(out.size());
    probe.project_attn_input_queries(layer, cap.attn_in.data(), n, probe.rope_table(layer, cap.pos).data(), false, out2.data());
    for (size_t i = 0; i < out2.size(); ++i) ASSERT_NEAR(out2[i], cap.q[i], 1e-5) << "layer " << layer << " i " << i;
    // The averaged RoPE table is the mean of the per-position tables.
    const auto mean = probe.rope_table_mean(layer, 10, 4);
    const std::vector<int32_t> ps{10, 11, 12, 13};
    const auto rows = probe.rope_table(layer, ps);
    for (int i = 0; i < hp.rope_dim; ++i) {
      double s = 0;
      for (int r = 0; r < 4; ++r) s += rows[static_cast<size_t>(r) * hp.rope_dim + i];
      EXPECT_NEAR(mean[static_cast<size_t>(i)], s / 4, 1e-6);
    }
    // RoPE is linear in (cos, sin): a query rotated with the averaged table is the average of the
    // query rotated at each position (GVote's "average cos/sin" line), in the model's RoPE style.
    std::vector<float> one(static_cast<size_t>(Q));
    probe.project_attn_input_queries(layer, cap.attn_in.data(), 1, mean.data(), true, one.data());
    std::vector<double> avg(static_cast<size_t>(Q), 0.0);
    for (int r = 0; r < 4; ++r) {
      std::vector<float> qr(static_cast<size_t>(Q));
      probe.project_attn_input_queries(layer, cap.attn_in.data(), 1, rows.data() + static_cast<size_t>(r) * hp.rope_dim, true,
                                       qr.data());
      for (int i = 0; i < Q; ++i) avg[static_cast<size_t>(i)] += qr[static_cast<size_t>(i)] / 4.0;
    }
    for (int i = 0; i < Q; ++i) EXPECT_NEAR(one[static_cast<size_t>(i)], avg[static_cast<size_t>(i)], 1e-5);
  }
}

class CountLayers : public LayerObserver {
 public:
  void on_layer(const LayerView& v) override {
    ++calls;
    tokens += v.n_tok;
    last_len = v.cache->len(v.layer, 0);
  }
  int calls = 0, tokens = 0, last_len = 0;
};

// A probe forward sees every layer, runs after the cache's content, and leaves the cache and the
// page pool as they were; a continued probe session sees its earlier chunks.
TEST(ForwardHooks, ProbeForwardsLeaveTheCacheUntouched) {
  auto model = Model::load(test::stories_gguf());
  Engine e(*model, {});
  const auto tokens = model->tokenizer->encode(kText, true, false);
  auto c = e.new_cache();
  e.forward(*c, tokens, Logits::None);
  const size_t in_use = e.page_pool().pages_in_use();
  const auto pos0 = c->head(0, 0).pos;
  EngineProbe probe(e, tokens);
  const std::vector<int32_t> extra{5, 6, 7, 8, 9};
  CountLayers obs;
  probe.probe_forward(*c, extra, obs);
  EXPECT_EQ(obs.calls, model->hp.n_layer);
  EXPECT_EQ(obs.last_len, static_cast<int>(tokens.size()) + 5);
  EXPECT_EQ(e.page_pool().pages_in_use(), in_use);
  EXPECT_EQ(c->head(0, 0).pos, pos0);
  EXPECT_EQ(c->n_past(), static_cast<int32_t>(tokens.size()));
  CountLayers a, b;
  probe.probe_forward_continue(*c, extra, a);
  probe.probe_forward_continue(*c, extra, b);
  EXPECT_EQ(b.last_len, static_cast<int>(tokens.size()) + 10);
  probe.end_probe_session();
  EXPECT_EQ(e.page_pool().pages_in_use(), in_use);
  EXPECT_EQ(probe.context_tokens().size(), tokens.size());
}

// A scorer that asks for the context's NLL (Compactor's calibration does) gets it from the prefill
// logits, chunk boundaries included.
class NllScorer : public Scorer {
 public:
  std::string name() const override { return "nll_test"; }
  Needs needs() const override { return {.context_nll = true}; }
  Scores score(const PressEnv& env) const override {
    seen = std::vector<float>(env.probe->context_nll().begin(), env.probe->context_nll().end());
    Scores s;
    s.s.resize(static_cast<size_t>(env.cache.layout().n_heads_total()));
    for (int i = 0; i < env.cache.layout().n_heads_total(); ++i)
      s.s[static_cast<size_t>(i)].assign(static_cast<size_t>(env.cache.len(i / env.cache.layout().n_head_kv, i % env.cache.layout().n_head_kv)), 0.0f);
    return s;
  }
  mutable std::vector<float> seen;
};

TEST(ForwardHooks, ContextNllComesFromThePrefillLogits) {
  auto model = Model::load(test::stories_gguf());
  EngineParams ep;
  ep.n_batch = 7;
  Engine e(*model, ep);
  const auto tokens = model->tokenizer->encode(kText, true, false);
  auto scorer = std::make_shared<NllScorer>();
  CompressionSpec spec;
  spec.press = compose("nll", scorer, allocator_info("uniform").make(Params("nll", {}, {}), *scorer));
  spec.request.keep = 0.5;
  CompressedContext ctx(e, spec);
  ctx.prefill(tokens);
  auto c = e.new_cache();
  const auto logits = e.forward(*c, tokens, Logits::All);
  const size_t V = static_cast<size_t>(model->hp.n_vocab);
  ASSERT_EQ(scorer->seen.size(), tokens.size() - 1);
  for (size_t i = 0; i + 1 < tokens.size(); ++i)
    EXPECT_NEAR(scorer->seen[i], token_nll({logits.data() + i * V, V}, tokens[i + 1]), 1e-4) << i;
  EXPECT_EQ(ctx.context_nll(), scorer->seen);
}

}  // namespace
}  // namespace kvs
