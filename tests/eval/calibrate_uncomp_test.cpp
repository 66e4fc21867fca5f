// The UNComp calibrator end to end on stories260K (six short WikiText-2 windows), against a
// reference computed here from the paper's / official formulas, independently of press/math: the
// same windows are run with an observer that keeps every query; per query head H_k (paper: k = D/4
// = 2 of D = 8, so the truncation matters; official: the official code's k = 32, i.e. all 8) from
// the Eq. 1 covariance (preset=paper) or the official unit-norm token covariance
// (preset=official), divided by its trace, eigenvalues by the Jacobi oracle; each sample's KV-head
// labels by sorting, the balanced vote written out, the layer values (Eq. 8's Σ_h erank_k =
// exp(H_k), or the official Σ_h exp(H_k / ln D)) and Eq. 8's groups by a loop, the halves' agreement
// from the stored halves. Then the press reads the file back and compresses, and unknown options
// are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "core/error.h"
#include "eval/calibrators.h"
#include "eval_test_util.h"
#include "press/math/sym_eigen.h"
#include "press/registry.h"
#include "runtime/calibration_store.h"
#include "runtime/session.h"

namespace kvs::eval {
namespace {

// Every query of every layer: q[layer] = [n][H * D] post-RoPE.
struct Queries : LayerObserver {
  std::vector<std::vector<float>> q;
  int qdim = 0;
  void on_layer(const LayerView& v) override {
    if (q.size() <= static_cast<size_t>(v.layer)) q.resize(static_cast<size_t>(v.layer) + 1);
    q[static_cast<size_t>(v.layer)].insert(q[static_cast<size_t>(v.layer)].end(), v.q, v.q + static_cast<size_t>(v.n_tok) * qdim);
  }
};

// H_k of head h of q [n][stride] (columns h*D .. h*D + D - 1): centred; unit-norm rows (official)
// or Eq. 1; trace-normalised; -Σ_{i<k} λ_i ln λ_i.
double ref_entropy(const std::vector<float>& q, int stride, int h, int D, int k, bool unit_norm) {
  const int n = static_cast<int>(q.size()) / stride;
  std::vector<double> mu(D, 0.0), c(static_cast<size_t>(D) * D, 0.0), z(D);
  for (int t = 0; t < n; ++t)
    for (int d = 0; d < D; ++d) mu[d] += q[static_cast<size_t>(t) * stride + h * D + d] / n;
  for (int t = 0; t < n; ++t) {
    double nn = 0;
    for (int d = 0; d < D; ++d) nn += (z[d] = q[static_cast<size_t>(t) * stride + h * D + d] - mu[d]) * z[d];
    const double s = unit_norm ? (nn > 0 ? 1.0 / std::sqrt(nn) : 0.0) : 1.0;
    for (int a = 0; a < D; ++a)
      for (int b = 0; b < D; ++b) c[static_cast<size_t>(a) * D + b] += z[a] * s * z[b] * s;
  }
  double tr = 0;
  for (int a = 0; a < D; ++a) tr += c[static_cast<size_t>(a) * D + a];
  for (double& x : c) x /= tr;
  const math::SymEigen e = math::sym_eigen_jacobi(c, D);
  double H = 0;
  for (int i = 0; i < k; ++i)
    if (e.values[i] > 1e-10 * e.values[0]) H -= e.values[i] * std::log(e.values[i]);
  return H;
}

struct Reference {
  std::vector<std::vector<double>> head_erank;  // [L][H], mean over samples
  std::vector<std::vector<int>> kv_groups;      // [L][Hkv]
  std::vector<double> layer_values;             // [L]
  std::vector<int> layer_groups;                // [L]
};

// Algorithm 1 with M = Hkv groups of one head each, the balanced vote written out: from the
// lowest-erank group to the highest, the unplaced head voted most often into it (ties: lower index).
std::vector<int> vote_one_per_group(const std::vector<std::vector<int>>& labels, int Hkv) {
  std::vector<int> out(Hkv, -1);
  for (int g = Hkv - 1; g >= 0; --g) {
    int best = -1, best_n = -1;
    for (int h = 0; h < Hkv; ++h) {
      if (out[h] >= 0) continue;
      int n = 0;
      for (const auto& s : labels) n += s[h] == g;
      if (n > best_n) best = h, best_n = n;
    }
    out[best] = g;
  }
  return out;
}

Reference reference(const std::vector<std::vector<std::vector<float>>>& samples, int L, int H, int Hkv, int D, int k,
                    bool official) {
  Reference r;
  const int S = static_cast<int>(samples.size()), G = H / Hkv;
  r.head_erank.assign(L, std::vector<double>(H, 0.0));
  r.layer_values.assign(L, 0.0);
  for (int l = 0; l < L; ++l) {
    std::vector<std::vector<int>> labels;
    for (int s = 0; s < S; ++s) {
      std::vector<double> kv(Hkv, 0.0);
      for (int h = 0; h < H; ++h) {
        const double Hk = ref_entropy(samples[s][l], H * D, h, D, k, official);
        r.head_erank[l][h] += std::exp(Hk) / S;
        kv[h / G] += std::exp(Hk) / G;
        r.layer_values[l] += (official ? std::exp(Hk / std::log(D)) : std::exp(Hk)) / S;
      }
      std::vector<int> order(Hkv);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return kv[a] > kv[b]; });
      std::vector<int> lab(Hkv);
      for (int i = 0; i < Hkv; ++i) lab[order[i]] = i;  // one head per group, group 0 = largest erank
      labels.push_back(lab);
    }
    r.kv_groups.push_back(vote_one_per_group(labels, Hkv));
  }
  const double eps = official ? 1.0 : 0.3;
  int g = 0;
  r.layer_groups.push_back(0);
  for (int l = 1; l < L; ++l) r.layer_groups.push_back(g += r.layer_values[l - 1] - r.layer_values[l] > eps ? 1 : 0);
  return r;
}

void check_preset(const std::string& preset) {
  SCOPED_TRACE("preset " + preset);
  const bool official = preset == "official";
  const Model& m = test::stories();
  EngineParams ep;
  ep.n_threads = 2;
  Engine e(m, ep);
  DataStore data(test::data_dir());
  const int samples = 6, tokens = 96;
  CalibrateArgs a{m, e, data, samples, tokens, {{"groups", "4"}, {"preset", preset}}, 0, false};
  const nlohmann::json j = calibrator("uncomp").run(a);
  const int L = m.hp.n_layer, Hkv = m.hp.n_head_kv, H = m.hp.n_head, D = m.hp.head_dim;
  ASSERT_EQ(D, 8);
  EXPECT_EQ(j["k"], official ? 32 : 2);  // official: the official code's 32; paper: D / 4, below D
  const int k = official ? D : 2;         // k = 32 > D uses every eigenvalue
  EXPECT_EQ(j["cov"], official ? "unitnorm" : "eq1");
  EXPECT_EQ(j["norm"], "trace");
  // The same windows as the calibrator (evenly spaced over the tokenized text, BOS first).
  const auto all = m.tokenizer->encode(data.text("wikitext2/wikitext-2-v1.tokens.valid.txt"), false, false);
  const int body = tokens - 1;
  const int64_t span = static_cast<int64_t>(all.size()) - body;
  std::vector<std::vector<std::vector<float>>> qs;
  for (int i = 0; i < samples; ++i) {
    const int64_t start = span * i / (samples - 1);
    std::vector<int32_t> ids{m.tokenizer->bos()};
    ids.insert(ids.end(), all.begin() + start, all.begin() + start + body);
    Queries obs;
    obs.qdim = H * D;
    auto cache = e.new_cache();
    e.forward(*cache, ids, Logits::None, &obs);
    qs.push_back(obs.q);
  }
  const Reference want = reference(qs, L, H, Hkv, D, k, official);
  for (int l = 0; l < L; ++l) {
    for (int h = 0; h < H; ++h)
      EXPECT_NEAR(j["head_erank"][l][h].get<double>(), want.head_erank[l][h], 2e-4) << "layer " << l << " head " << h;
    EXPECT_EQ(j["kv_head_groups"][l].get<std::vector<int>>(), want.kv_groups[l]) << "layer " << l;
    EXPECT_NEAR(j["layer_values"][l].get<double>(), want.layer_values[l], 2e-4 * std::max(1.0, want.layer_values[l])) << "layer " << l;
  }
  EXPECT_EQ(j["layer_groups"].get<std::vector<int>>(), want.layer_groups);
  // The halves: their stored groups, and the agreement as the share of heads they agree on.
  EXPECT_EQ(j["stability"]["halves"], nlohmann::json({3, 3}));
  const auto first = j["stability"]["kv_head_groups_first_half"].get<std::vector<std::vector<int>>>();
  const auto second = j["stability"]["kv_head_groups_second_half"].get<std::vector<std::vector<int>>>();
  int same = 0;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < Hkv; ++h) same += first[l][h] == second[l][h];
  EXPECT_DOUBLE_EQ(j["stability"]["agreement"].get<double>(), std::round(1e6 * same / (L * Hkv)) / 1e6);
  const std::vector<std::vector<std::vector<float>>> h1(qs.begin(), qs.begin() + 3), h2(qs.begin() + 3, qs.end());
  EXPECT_EQ(first, reference(h1, L, H, Hkv, D, k, official).kv_groups);
  EXPECT_EQ(second, reference(h2, L, H, Hkv, D, k, official).kv_groups);
}

TEST(CalibrateUncomp, PaperPresetAgainstAReference) { check_preset("paper"); }
TEST(CalibrateUncomp, OfficialPresetAgainstAReference) { check_preset("official"); }

TEST(CalibrateUncomp, TheFileDrivesThePressAndBadOptionsAreRefused) {
  test::TempDir dir("calib_uncomp");
  ::setenv("KVSHRINK_CALIB_DIR", dir.str().c_str(), 1);
  const Model& m = test::stories();
  EngineParams ep;
  ep.n_threads = 2;
  Engine e(m, ep);
  DataStore data(test::data_dir());
  CalibrateArgs a{m, e, data, 4, 64, {{"groups", "4"}}, 0, false};
  const nlohmann::json j = calibrator("uncomp").run(a);
  save_calibration(m, "uncomp", j);
  CompressionSpec spec;
  spec.press = make_press("uncomp");
  spec.trigger = spec.press.trigger;
  spec.request.keep = 0.5;
  CompressedContext ctx(e, spec);
  const auto ids = m.tokenizer->encode("Once upon a time, there was a little girl named Lily. She loved to play outside.", true, false);
  ctx.prefill(ids);
  const int L = m.hp.n_layer, Hkv = m.hp.n_head_kv;
  EXPECT_EQ(ctx.cache().total_slots(), static_cast<size_t>(std::lround(0.5 * ids.size() * L * Hkv)));
  ::unsetenv("KVSHRINK_CALIB_DIR");
  for (const auto& [opt, msg] : std::vector<std::pair<ParamMap, std::string>>{
           {{{"gruops", "4"}}, "unknown option 'gruops'"},
           {{{"preset", "mine"}}, "preset must be paper or official"},
           {{{"k", "0"}}, "k must be auto"},
           {{{"cov", "full"}}, "cov must be eq1 or unitnorm"}}) {
    CalibrateArgs bad{m, e, data, 2, 64, opt, 0, false};
    try {
      calibrator("uncomp").run(bad);
      ADD_FAILURE() << "accepted: " << msg;
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find(msg), std::string::npos) << err.what();
    }
  }
}

}  // namespace
}  // namespace kvs::eval
