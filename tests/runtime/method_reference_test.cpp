// Whole-method references at a real head size: KVzip and Compactor run end to end (prefill,
// scoring, allocation, selection) through CompressedContext on the v8 testbed model (head_dim 64,
// 6 query / 3 KV heads, 8 layers), and the slots they keep are compared with references written
// here from the papers and the official code: a scalar forward of the model (double-accumulating
// matmuls, scalar attention) and each method's scores computed in double from its queries and
// keys, then the paper's selection. No press, statistics or selection code is called by the
// references. The forward's numerics (f32 tiles against double) may swap pairs whose scores tie
// at the budget's boundary: every disagreement must lie there, and there must be few.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "core/rng.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kvcache/attention.h"
#include "kvcache/kv_cache.h"
#include "model/model.h"
#include "runtime/compression_spec.h"
#include "runtime/engine.h"
#include "runtime/session.h"

namespace kvs {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::string v8s1_dir() { return std::string(KVS_SOURCE_DIR) + "/testbed/models/v8s1"; }

// A context of a few hundred tokens with something to retrieve in it.
std::string context_text() {
  std::string s;
  const char* names[] = {"Mira", "Tobias", "Ana", "Felix", "Jun", "Lena", "Omar", "Greta"};
  const char* things[] = {"lamp", "boat", "garden", "letter", "violin", "bridge", "kite", "clock"};
  for (int i = 0; i < 12; ++i)
    s += fmt::format("{} looked at the {} for a long time, and then said that the number {} was the one. ",
                     names[i % 8], things[(i * 3) % 8], 1000 + 37 * i);
  return s;
}

// One layer's rows as the reference forward computed them.
struct LayerRows {
  std::vector<float> q;      // [n][H][D] queries after RoPE
  std::vector<float> k_pre;  // [n][Hkv][D] keys before RoPE
  std::vector<float> attn_in;  // [n][E] the attention's input (attn_norm of the residual stream)
};

// Scalar forward of `tokens` at positions pos0.. after what `cache` holds, appending their K/V.
std::vector<LayerRows> ref_forward(const Model& m, KvCache& cache, const std::vector<int32_t>& tokens, int32_t pos0) {
  const HParams& hp = m.hp;
  const int n = static_cast<int>(tokens.size()), E = hp.n_embd, H = hp.n_head, Hkv = hp.n_head_kv, D = hp.head_dim;
  const int F = hp.n_ff, R = hp.rope_dim;
  const AttnShape shape{H, Hkv, D, 1.0f / std::sqrt(static_cast<float>(D))};
  std::vector<float> x(static_cast<size_t>(n) * E);
  for (int t = 0; t < n; ++t)
    kernels::dequantize_row(m.tok_embd.type, m.tok_embd.row(tokens[static_cast<size_t>(t)]), &x[static_cast<size_t>(t) * E], E);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int t = 0; t < n; ++t) pos[static_cast<size_t>(t)] = pos0 + t;
  std::vector<float> xn(x.size()), q(static_cast<size_t>(n) * H * D), k(static_cast<size_t>(n) * Hkv * D), v(k.size()),
      att(q.size()), proj(x.size()), g(static_cast<size_t>(n) * F), u(g.size()), cs(static_cast<size_t>(R));
  std::vector<LayerRows> out(static_cast<size_t>(hp.n_layer));
  for (int il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& L = m.layers[static_cast<size_t>(il)];
    for (int t = 0; t < n; ++t)
      kernels::rmsnorm(&x[static_cast<size_t>(t) * E], L.attn_norm.f32(), &xn[static_cast<size_t>(t) * E], E, hp.rms_eps);
    out[static_cast<size_t>(il)].attn_in = xn;
    kernels::matmul_ref(L.wq, xn.data(), n, q.data());
    kernels::matmul_ref(L.wk, xn.data(), n, k.data());
    kernels::matmul_ref(L.wv, xn.data(), n, v.data());
    out[static_cast<size_t>(il)].k_pre = k;
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < R / 2; ++i) {
        const double a = static_cast<double>(pos[static_cast<size_t>(t)]) * m.rope_inv_freq[static_cast<size_t>(i)];
        cs[2 * static_cast<size_t>(i)] = static_cast<float>(std::cos(a));
        cs[2 * static_cast<size_t>(i) + 1] = static_cast<float>(std::sin(a));
      }
      kernels::rope(&q[static_cast<size_t>(t) * H * D], H, D, R, cs.data(), hp.rope_style);
      kernels::rope(&k[static_cast<size_t>(t) * Hkv * D], Hkv, D, R, cs.data(), hp.rope_style);
    }
    out[static_cast<size_t>(il)].q = q;
    EXPECT_TRUE(cache.append(il, n, k.data(), v.data(), pos.data()));
    attention_ref(cache, il, shape, q.data(), pos.data(), n, att.data(), nullptr);
    kernels::matmul_ref(L.wo, att.data(), n, proj.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
    for (int t = 0; t < n; ++t)
      kernels::rmsnorm(&x[static_cast<size_t>(t) * E], L.ffn_norm.f32(), &xn[static_cast<size_t>(t) * E], E, hp.rms_eps);
    kernels::matmul_ref(L.ffn_gate, xn.data(), n, g.data());
    kernels::matmul_ref(L.ffn_up, xn.data(), n, u.data());
    for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    kernels::matmul_ref(L.ffn_down, g.data(), n, proj.data());
    for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  }
  return out;
}

// Per (layer * Hkv + kvh) the kept positions: the top `budget` of `scores` within each group of
// heads (one group: the whole model; or per layer), ties to the earlier head and later position.
std::vector<std::vector<int32_t>> top_kept(const std::vector<std::vector<double>>& scores, int n_layer, int hkv,
                                           bool per_layer, int64_t per_head_budget, double* threshold_out) {
  std::vector<std::vector<int32_t>> kept(scores.size());
  const int groups = per_layer ? n_layer : 1, heads_per_group = per_layer ? hkv : n_layer * hkv;
  double worst_threshold = 0;
  for (int gidx = 0; gidx < groups; ++gidx) {
    std::vector<std::tuple<double, int, int32_t>> all;  // (score, head, position)
    for (int hh = 0; hh < heads_per_group; ++hh) {
      const int head = gidx * heads_per_group + hh;
      for (size_t p = 0; p < scores[static_cast<size_t>(head)].size(); ++p)
        all.emplace_back(scores[static_cast<size_t>(head)][p], head, static_cast<int32_t>(p));
    }
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
      if (std::get<0>(a) != std::get<0>(b)) return std::get<0>(a) > std::get<0>(b);
      if (std::get<1>(a) != std::get<1>(b)) return std::get<1>(a) < std::get<1>(b);
      return std::get<2>(a) > std::get<2>(b);
    });
    const size_t total = static_cast<size_t>(per_head_budget) * static_cast<size_t>(heads_per_group);
    for (size_t i = 0; i < total && i < all.size(); ++i)
      kept[static_cast<size_t>(std::get<1>(all[i]))].push_back(std::get<2>(all[i]));
    if (total > 0 && total <= all.size()) worst_threshold = std::get<0>(all[total - 1]);
    if (gidx == 0 && threshold_out) *threshold_out = worst_threshold;
  }
  for (auto& k : kept) std::sort(k.begin(), k.end());
  return kept;
}

// Compares the kept positions of `c` with the reference's; every disagreement must be a pair whose
// reference score lies within max(rel x |threshold|, abs) of its group's threshold score. Returns
// the share of the reference's kept slots that `c` keeps too.
double compare_kept(const KvCache& c, const std::vector<std::vector<int32_t>>& ref,
                    const std::vector<std::vector<double>>& scores, const std::vector<double>& thresholds, double rel,
                    double abs, int hkv) {
  size_t agree = 0, total = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const auto& got = c.head(static_cast<int>(i) / hkv, static_cast<int>(i) % hkv).pos;
    std::vector<int32_t> g(got.begin(), got.end()), both, diff;
    std::set_intersection(g.begin(), g.end(), ref[i].begin(), ref[i].end(), std::back_inserter(both));
    std::set_symmetric_difference(g.begin(), g.end(), ref[i].begin(), ref[i].end(), std::back_inserter(diff));
    agree += both.size();
    total += ref[i].size();
    const double thr = thresholds[i];
    for (int32_t p : diff) {
      const double s = scores[i][static_cast<size_t>(p)];
      EXPECT_LE(std::fabs(s - thr), std::max(rel * std::fabs(thr), abs))
          << "head " << i << " position " << p << ": reference score " << s << " far from the threshold " << thr;
    }
  }
  return total ? static_cast<double>(agree) / static_cast<double>(total) : 1.0;
}

// Ids of `text` as it continues a longer string (token-level concatenation after the context).
std::vector<int32_t> continuation(const Tokenizer& tok, const std::string& text) {
  const auto a = tok.encode("a", false, false), b = tok.encode("a" + text, false, false);
  EXPECT_TRUE(b.size() > a.size() && std::equal(a.begin(), a.end(), b.begin()));
  return {b.begin() + static_cast<std::ptrdiff_t>(a.size()), b.end()};
}

// The model, the engine and the reference prefill of the context, shared by the tests (the scalar
// forward is the slow part).
class MethodReference : public ::testing::Test {
 protected:
  struct Shared {
    std::unique_ptr<Model> model;
    std::unique_ptr<Engine> engine;
    std::vector<int32_t> ctx;
    std::unique_ptr<KvCache> rc;  // the reference's prefilled cache (f32 K/V)
    std::vector<LayerRows> rows;  // its queries, pre-RoPE keys and attention inputs
  };
  static inline Shared* shared_ = nullptr;
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(v8s1_dir() + "/config.json")) return;
    shared_ = new Shared;
    shared_->model = Model::load(v8s1_dir());
    EngineParams ep;
    ep.kv_dtype = DType::F32;  // the reference's cache holds f32 K/V too
    ep.n_threads = 2;
    shared_->engine = std::make_unique<Engine>(*shared_->model, ep);
    shared_->ctx = shared_->model->tokenizer->encode(context_text(), true, false);
    shared_->rc = shared_->engine->new_cache();
    shared_->rows = ref_forward(*shared_->model, *shared_->rc, shared_->ctx, 0);
  }
  static void TearDownTestSuite() {
    delete shared_;
    shared_ = nullptr;
  }
  void SetUp() override {
    if (!shared_) GTEST_SKIP() << "no testbed/models/v8s1";
    model_ = shared_->model.get();
    engine_ = shared_->engine.get();
    ctx_ = shared_->ctx;
    ref_cache_ = shared_->rc.get();
  }
  const Model* model_ = nullptr;
  Engine* engine_ = nullptr;
  std::vector<int32_t> ctx_;
  const KvCache* ref_cache_ = nullptr;  // the reference prefill's cache
  const std::vector<LayerRows>& ref_rows() const { return shared_->rows; }
};

// KVzip (Kim et al. 2025, Eq. 2 and §3.4; official snu-mllab/KVzip, kvpress kvzip_press.py): the
// context prefilled; each chunk of m tokens after the sinks repeated after the repeat prompt (the
// first chunk "\n\nRepeat the previous context exactly.", later ones "...starting with " + the
// previous chunk's last 8 tokens) as one forward after the cache; a pair's score is the max over
// the group's query heads and the chunk's queries of its probability in a softmax over the sinks,
// the chunk's slots and the repeat input's own keys (causal); sinks +inf; one ranking over every
// head and layer keeps round(keep x n) per head on average. Three chunks of 110 here.
TEST_F(MethodReference, KvzipKeepsWhatItsRepeatPassReferenceKeeps) {
  const Model& m = *model_;
  const int L = m.hp.n_layer, H = m.hp.n_head, Hkv = m.hp.n_head_kv, D = m.hp.head_dim, G = H / Hkv;
  ASSERT_GE(D, 64);
  ASSERT_GE(Hkv, 2);
  const int32_t n = static_cast<int32_t>(ctx_.size()), sinks = 4, chunk = 110;
  ASSERT_GT(n, sinks + 2 * chunk);  // three chunks
  const double keep = 0.3;

  SpecArgs a;
  a.press = "kvzip";
  a.options = {{"chunk", std::to_string(chunk)}, {"precision", "f32"}, {"chat", "no"}};
  a.keep = keep;
  CompressedContext c(*engine_, make_compression_spec(a));
  c.prefill(ctx_);

  std::vector<std::vector<double>> score(static_cast<size_t>(L * Hkv), std::vector<double>(static_cast<size_t>(n), 0.0));
  for (auto& s : score) std::fill(s.begin(), s.begin() + sinks, kInf);
  const std::vector<int32_t> first = continuation(*m.tokenizer, "\n\nRepeat the previous context exactly.");
  const std::vector<int32_t> part =
      continuation(*m.tokenizer, "\n\nRepeat the part of the previous context exactly, starting with ");
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  for (int32_t p0 = sinks; p0 < n; p0 += chunk) {
    const int32_t p1 = std::min(n, p0 + chunk);
    std::vector<int32_t> ids = p0 == sinks ? first : part;
    if (p0 != sinks) ids.insert(ids.end(), ctx_.begin() + (p0 - 8), ctx_.begin() + p0);
    ids.insert(ids.end(), ctx_.begin() + p0, ctx_.begin() + p1);
    auto fork = ref_cache_->fork();
    const auto rows = ref_forward(m, *fork, ids, n);
    const int T = static_cast<int>(ids.size());
    for (int layer = 0; layer < L; ++layer)
      for (int kvh = 0; kvh < Hkv; ++kvh) {
        const int32_t len = fork->len(layer, kvh);
        std::vector<float> K(static_cast<size_t>(len) * D);
        fork->gather(layer, kvh, 0, len, K.data(), nullptr);
        const auto& pos = fork->head(layer, kvh).pos;
        std::vector<int32_t> keys;  // slots: sinks, the chunk, the repeat input
        for (int32_t s = 0; s < len; ++s) {
          const int32_t p = pos[static_cast<size_t>(s)];
          if (p < sinks || (p >= p0 && p < p1) || p >= n) keys.push_back(s);
        }
        std::vector<double> logit(keys.size());
        auto& out = score[static_cast<size_t>(layer * Hkv + kvh)];
        for (int g = 0; g < G; ++g)
          for (int t = 0; t < T; ++t) {
            const float* qv = &rows[static_cast<size_t>(layer)].q[(static_cast<size_t>(t) * H + kvh * G + g) * D];
            double mx = -kInf;
            for (size_t j = 0; j < keys.size(); ++j) {
              const int32_t p = pos[static_cast<size_t>(keys[j])];
              if (p > n + t) {  // a later repeat token: masked
                logit[j] = -kInf;
                continue;
              }
              double dot = 0;
              for (int d = 0; d < D; ++d) dot += static_cast<double>(qv[d]) * K[static_cast<size_t>(keys[j]) * D + d];
              logit[j] = dot * scale;
              mx = std::max(mx, logit[j]);
            }
            double z = 0;
            for (double x : logit) z += std::exp(x - mx);
            for (size_t j = 0; j < keys.size(); ++j) {
              const int32_t p = pos[static_cast<size_t>(keys[j])];
              if (p >= p0 && p < p1) out[static_cast<size_t>(p)] = std::max(out[static_cast<size_t>(p)], std::exp(logit[j] - mx) / z);
            }
          }
      }
  }
  const int64_t per_head = std::llround(keep * n);
  double thr = 0;
  const auto ref = top_kept(score, L, Hkv, false, per_head, &thr);
  EXPECT_EQ(c.cache().total_slots(), static_cast<size_t>(per_head) * L * Hkv);
  const double agree = compare_kept(c.cache(), ref, score, std::vector<double>(score.size(), thr), 1e-3, 0.0, Hkv);
  EXPECT_GE(agree, 0.997) << "kept slots agreeing with the reference";
  std::printf("kvzip: %.4f of %lld kept slots agree with the reference (%d tokens, 3 chunks)\n", agree,
              static_cast<long long>(per_head * L * Hkv), n);
}

// Exact leverage scores (Eq. 1) of the rows of K [n][D]: o_i = k_i^T (K^T K)^-1 k_i, in double.
std::vector<double> exact_leverage_ref(const std::vector<float>& K, int n, int D) {
  std::vector<double> A(static_cast<size_t>(D) * D, 0.0), Inv(static_cast<size_t>(D) * D, 0.0);
  for (int i = 0; i < n; ++i)
    for (int a = 0; a < D; ++a)
      for (int b = 0; b < D; ++b) A[static_cast<size_t>(a) * D + b] += static_cast<double>(K[static_cast<size_t>(i) * D + a]) * K[static_cast<size_t>(i) * D + b];
  for (int a = 0; a < D; ++a) Inv[static_cast<size_t>(a) * D + a] = 1.0;
  for (int col = 0; col < D; ++col) {  // Gauss-Jordan, partial pivoting
    int piv = col;
    for (int r = col + 1; r < D; ++r)
      if (std::fabs(A[static_cast<size_t>(r) * D + col]) > std::fabs(A[static_cast<size_t>(piv) * D + col])) piv = r;
    for (int b = 0; b < D; ++b) {
      std::swap(A[static_cast<size_t>(col) * D + b], A[static_cast<size_t>(piv) * D + b]);
      std::swap(Inv[static_cast<size_t>(col) * D + b], Inv[static_cast<size_t>(piv) * D + b]);
    }
    const double d = A[static_cast<size_t>(col) * D + col];
    EXPECT_NE(d, 0.0);
    for (int b = 0; b < D; ++b) {
      A[static_cast<size_t>(col) * D + b] /= d;
      Inv[static_cast<size_t>(col) * D + b] /= d;
    }
    for (int r = 0; r < D; ++r) {
      if (r == col) continue;
      const double f = A[static_cast<size_t>(r) * D + col];
      for (int b = 0; b < D; ++b) {
        A[static_cast<size_t>(r) * D + b] -= f * A[static_cast<size_t>(col) * D + b];
        Inv[static_cast<size_t>(r) * D + b] -= f * Inv[static_cast<size_t>(col) * D + b];
      }
    }
  }
  std::vector<double> o(static_cast<size_t>(n), 0.0);
  for (int i = 0; i < n; ++i) {
    const float* k = &K[static_cast<size_t>(i) * D];
    double s = 0;
    for (int a = 0; a < D; ++a) {
      double t = 0;
      for (int b = 0; b < D; ++b) t += Inv[static_cast<size_t>(a) * D + b] * k[b];
      s += k[a] * t;
    }
    o[static_cast<size_t>(i)] = s;
  }
  return o;
}

// z-score over every value of `v` jointly (population std).
void zscore_all(std::vector<std::vector<double>*> v) {
  double s = 0, s2 = 0, cnt = 0;
  for (auto* x : v)
    for (double y : *x) {
      s += y;
      cnt += 1;
    }
  const double mean = s / cnt;
  for (auto* x : v)
    for (double y : *x) s2 += (y - mean) * (y - mean);
  const double sd = std::sqrt(s2 / cnt);
  for (auto* x : v)
    for (double& y : *x) y = sd > 0 ? (y - mean) / sd : 0.0;
}

// Compactor (Chari & Van Durme 2025, §3 and §4; preset=paper with exact leverage): s = z(a) + λ z(o)
// with λ = 0.3, o the exact leverage of each KV head's pre-RoPE keys (Eq. 1, uncentred), a the
// column sums of the non-causal, unscaled attention inside chunks of C = 256 tokens (Eq. 5; post-
// RoPE queries and keys; the last, shorter chunk on its own), averaged over the group's query
// heads and mean-pooled with kernel 3 (zero padding counted, as torch's avg_pool1d); z-scores
// over every head and token of a layer (both official codes); per layer the top round(keep x n)
// x n_head_kv over its heads (head-adaptive selection), nothing protected.
TEST_F(MethodReference, CompactorKeepsWhatItsPaperReferenceKeeps) {
  const Model& m = *model_;
  const int L = m.hp.n_layer, H = m.hp.n_head, Hkv = m.hp.n_head_kv, D = m.hp.head_dim, G = H / Hkv;
  ASSERT_GE(D, 64);
  ASSERT_GE(Hkv, 2);
  const int n = static_cast<int>(ctx_.size()), C = 256;
  ASSERT_GT(n, C);  // a full chunk and a shorter last one
  const double keep = 0.3, lambda = 0.3;

  SpecArgs a;
  a.press = "compactor";
  a.options = {{"exact", "true"}};
  a.keep = keep;
  CompressedContext c(*engine_, make_compression_spec(a));
  c.prefill(ctx_);

  const auto& rows = ref_rows();
  std::vector<std::vector<double>> score(static_cast<size_t>(L * Hkv));
  for (int layer = 0; layer < L; ++layer) {
    std::vector<std::vector<double>> av(static_cast<size_t>(Hkv)), ov(static_cast<size_t>(Hkv));
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      std::vector<float> K(static_cast<size_t>(n) * D), Kpre(static_cast<size_t>(n) * D);
      ref_cache_->gather(layer, kvh, 0, n, K.data(), nullptr);
      for (int t = 0; t < n; ++t)
        std::copy_n(&rows[static_cast<size_t>(layer)].k_pre[(static_cast<size_t>(t) * Hkv + kvh) * D], D, &Kpre[static_cast<size_t>(t) * D]);
      ov[static_cast<size_t>(kvh)] = exact_leverage_ref(Kpre, n, D);
      std::vector<double> col(static_cast<size_t>(n), 0.0);
      for (int c0 = 0; c0 < n; c0 += C) {
        const int c1 = std::min(n, c0 + C);
        std::vector<double> lg(static_cast<size_t>(c1 - c0));
        for (int g = 0; g < G; ++g)
          for (int t = c0; t < c1; ++t) {
            const float* qv = &rows[static_cast<size_t>(layer)].q[(static_cast<size_t>(t) * H + kvh * G + g) * D];
            double mx = -kInf;
            for (int j = c0; j < c1; ++j) {
              double dot = 0;
              for (int d = 0; d < D; ++d) dot += static_cast<double>(qv[d]) * K[static_cast<size_t>(j) * D + d];
              lg[static_cast<size_t>(j - c0)] = dot;
              mx = std::max(mx, dot);
            }
            double z = 0;
            for (double x : lg) z += std::exp(x - mx);
            for (int j = c0; j < c1; ++j) col[static_cast<size_t>(j)] += std::exp(lg[static_cast<size_t>(j - c0)] - mx) / z / G;
          }
      }
      std::vector<double>& ah = av[static_cast<size_t>(kvh)];
      ah.assign(static_cast<size_t>(n), 0.0);
      for (int i = 0; i < n; ++i) {
        double s = 0;
        for (int j = std::max(0, i - 1); j <= std::min(n - 1, i + 1); ++j) s += col[static_cast<size_t>(j)];
        ah[static_cast<size_t>(i)] = s / 3.0;
      }
    }
    std::vector<std::vector<double>*> pa, po;
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      pa.push_back(&av[static_cast<size_t>(kvh)]);
      po.push_back(&ov[static_cast<size_t>(kvh)]);
    }
    zscore_all(pa);
    zscore_all(po);
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      auto& s = score[static_cast<size_t>(layer * Hkv + kvh)];
      s.resize(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) s[static_cast<size_t>(i)] = av[static_cast<size_t>(kvh)][static_cast<size_t>(i)] + lambda * ov[static_cast<size_t>(kvh)][static_cast<size_t>(i)];
    }
  }
  const int64_t per_head = std::llround(keep * n);
  const auto ref = top_kept(score, L, Hkv, true, per_head, nullptr);
  // Each layer's threshold: the lowest kept reference score of the layer.
  std::vector<double> thr(score.size());
  for (int layer = 0; layer < L; ++layer) {
    double t = kInf;
    for (int kvh = 0; kvh < Hkv; ++kvh)
      for (int32_t p : ref[static_cast<size_t>(layer * Hkv + kvh)]) t = std::min(t, score[static_cast<size_t>(layer * Hkv + kvh)][static_cast<size_t>(p)]);
    for (int kvh = 0; kvh < Hkv; ++kvh) thr[static_cast<size_t>(layer * Hkv + kvh)] = t;
  }
  EXPECT_EQ(c.cache().total_slots(), static_cast<size_t>(per_head) * L * Hkv);
  // z-scored sums are O(1): an absolute tolerance of 1e-3 around the threshold.
  const double agree = compare_kept(c.cache(), ref, score, thr, 0.0, 1e-3, Hkv);
  EXPECT_GE(agree, 0.997) << "kept slots agreeing with the reference";
  std::printf("compactor: %.4f of %lld kept slots agree with the reference (%d tokens)\n", agree,
              static_cast<long long>(per_head * L * Hkv), n);
}

// GVote (Tang et al., §3.3, Algorithm 1 and the Appendix A listing): per layer, S = 8 hidden states
// drawn from N(μ, σ²) fitted channel-wise to the attention's input over the prefill (σ unbiased),
// projected by W_q and rotated with cos and sin each averaged over the next n_f = 512 positions;
// per query head B = the smallest m whose top-m share of the last real query's attention reaches
// p = 0.95; every synthetic query votes for its top-B keys by dot product; a KV head keeps the
// union over its group's query heads and the samples. The normal deviates are core/rng.h's
// NormalRng seeded per layer as the press documents (gvote.cpp: the request's seed mixed with the
// layer index through SplitMix64), drawn row-major (sample, channel): the reference uses the same
// random numbers, everything else is computed here.
TEST_F(MethodReference, GvoteKeepsWhatItsListingReferenceKeeps) {
  const Model& m = *model_;
  const int L = m.hp.n_layer, H = m.hp.n_head, Hkv = m.hp.n_head_kv, D = m.hp.head_dim, G = H / Hkv, E = m.hp.n_embd;
  const int R = m.hp.rope_dim;
  ASSERT_GE(D, 64);
  ASSERT_GE(Hkv, 2);
  const int n = static_cast<int>(ctx_.size()), S = 8, n_future = 512;
  const double p_nuc = 0.95;
  const uint64_t seed = 0;

  SpecArgs a;
  a.press = "gvote";
  a.seed = seed;
  CompressedContext c(*engine_, make_compression_spec(a));
  c.prefill(ctx_);

  const auto& rows = ref_rows();
  std::vector<float> cs(static_cast<size_t>(R));
  for (int i = 0; i < R / 2; ++i) {
    double sc = 0, ss = 0;
    for (int p = n; p < n + n_future; ++p) {
      const double ang = static_cast<double>(p) * m.rope_inv_freq[static_cast<size_t>(i)];
      sc += std::cos(ang);
      ss += std::sin(ang);
    }
    cs[2 * static_cast<size_t>(i)] = static_cast<float>(sc / n_future);
    cs[2 * static_cast<size_t>(i) + 1] = static_cast<float>(ss / n_future);
  }
  size_t ref_kept = 0, agree = 0, got_kept = 0;
  for (int layer = 0; layer < L; ++layer) {
    const std::vector<float>& x = rows[static_cast<size_t>(layer)].attn_in;
    std::vector<double> mu(static_cast<size_t>(E), 0.0), sd(static_cast<size_t>(E), 0.0);
    for (int t = 0; t < n; ++t)
      for (int e = 0; e < E; ++e) mu[static_cast<size_t>(e)] += x[static_cast<size_t>(t) * E + e];
    for (auto& v : mu) v /= n;
    for (int t = 0; t < n; ++t)
      for (int e = 0; e < E; ++e) {
        const double dlt = x[static_cast<size_t>(t) * E + e] - mu[static_cast<size_t>(e)];
        sd[static_cast<size_t>(e)] += dlt * dlt;
      }
    for (auto& v : sd) v = std::sqrt(v / (n - 1));
    SplitMix64 mix(seed ^ (0x9E3779B97F4A7C15ULL * static_cast<uint64_t>(layer + 1)));
    NormalRng z(mix.next());
    std::vector<float> hs(static_cast<size_t>(S) * E), qs(static_cast<size_t>(S) * H * D);
    for (int s2 = 0; s2 < S; ++s2)
      for (int e = 0; e < E; ++e)
        hs[static_cast<size_t>(s2) * E + e] = static_cast<float>(mu[static_cast<size_t>(e)] + sd[static_cast<size_t>(e)] * z.next());
    kernels::matmul_ref(m.layers[static_cast<size_t>(layer)].wq, hs.data(), S, qs.data());
    for (int s2 = 0; s2 < S; ++s2) kernels::rope(&qs[static_cast<size_t>(s2) * H * D], H, D, R, cs.data(), m.hp.rope_style);
    for (int kvh = 0; kvh < Hkv; ++kvh) {
      std::vector<float> K(static_cast<size_t>(n) * D);
      ref_cache_->gather(layer, kvh, 0, n, K.data(), nullptr);
      std::vector<uint8_t> keep(static_cast<size_t>(n), 0);
      for (int g = 0; g < G; ++g) {
        const int qh = kvh * G + g;
        const float* q0 = &rows[static_cast<size_t>(layer)].q[(static_cast<size_t>(n - 1) * H + qh) * D];
        std::vector<double> lg(static_cast<size_t>(n));
        double mx = -kInf;
        for (int j = 0; j < n; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += static_cast<double>(q0[d]) * K[static_cast<size_t>(j) * D + d];
          lg[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, lg[static_cast<size_t>(j)]);
        }
        double zsum = 0;
        for (double& v : lg) zsum += (v = std::exp(v - mx));
        std::vector<double> pr = lg;
        for (double& v : pr) v /= zsum;
        std::sort(pr.begin(), pr.end(), std::greater<>());
        int64_t B = 0;
        for (double cum = 0; B < n && cum < p_nuc; ++B) cum += pr[static_cast<size_t>(B)];
        B = std::max<int64_t>(B, 1);
        for (int s2 = 0; s2 < S; ++s2) {
          const float* qv = &qs[(static_cast<size_t>(s2) * H + qh) * D];
          std::vector<std::pair<double, int>> v(static_cast<size_t>(n));
          for (int j = 0; j < n; ++j) {
            double dot = 0;
            for (int d = 0; d < D; ++d) dot += static_cast<double>(qv[d]) * K[static_cast<size_t>(j) * D + d];
            v[static_cast<size_t>(j)] = {dot, j};
          }
          std::sort(v.begin(), v.end(), [](const auto& p1, const auto& p2) {
            return p1.first != p2.first ? p1.first > p2.first : p1.second > p2.second;
          });
          for (int64_t b = 0; b < B; ++b) keep[static_cast<size_t>(v[static_cast<size_t>(b)].second)] = 1;
        }
      }
      const auto& got = c.cache().head(layer, kvh).pos;
      got_kept += got.size();
      for (int32_t p : got) agree += keep[static_cast<size_t>(p)];
      for (uint8_t k : keep) ref_kept += k;
    }
  }
  const double held = static_cast<double>(n) * L * Hkv;
  ASSERT_TRUE(c.keep_chosen().has_value());
  EXPECT_NEAR(*c.keep_chosen(), static_cast<double>(ref_kept) / held, 0.002);
  EXPECT_EQ(static_cast<double>(got_kept) / held, *c.keep_chosen());
  // Votes at the top-B boundary may go to a neighbour when two dot products tie to float precision.
  EXPECT_GE(static_cast<double>(agree) / static_cast<double>(ref_kept), 0.995);
  EXPECT_GE(static_cast<double>(agree) / static_cast<double>(got_kept), 0.995);
  std::printf("gvote: %zu kept, %zu in the reference, %zu in both (chosen keep %.4f, reference %.4f)\n", got_kept,
              ref_kept, agree, *c.keep_chosen(), static_cast<double>(ref_kept) / held);
}

}  // namespace
}  // namespace kvs
