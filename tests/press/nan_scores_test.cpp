// NaN and infinite scores through every press's allocation and selection: std::sort and
// nth_element are undefined for a comparison that NaN breaks (NaN < x and x < NaN both false is no
// strict weak ordering), so presses rank scores in a total order where NaN counts as -inf. Each
// registered press (and every allocator under one scorer) runs with its scorer replaced by fixed
// scores holding NaN, +inf and -inf, and must give a defined result: the same as with every NaN
// written as -inf, the same on every run, the protected tokens kept, keep lists valid.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <set>

#include "core/error.h"
#include "press/registry.h"
#include "press/select/topk.h"
#include "press_test_util.h"

namespace kvs {
namespace {

using test::noise;
using test::Synth;

constexpr int kLayers = 3, kHeads = 4, kKvHeads = 2, kDim = 64, kTokens = 160;
constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The score of slot s of head i: a finite value, NaN at every 5th slot (and a run of them), +inf
// at every 11th, -inf at every 13th.
float score_of(int i, int s, bool nan_as_minus_inf) {
  const float nan = nan_as_minus_inf ? -kInf : kNan;
  if (s % 5 == 2 || (s >= 40 && s < 60)) return nan;
  if (s % 11 == 4) return kInf;
  if (s % 13 == 7) return -kInf;
  return noise(i, 1, s, 2) * 50;
}

class FixedScorer : public Scorer {
 public:
  FixedScorer(std::shared_ptr<const Scorer> inner, bool nan_as_minus_inf)
      : inner_(std::move(inner)), minus_inf_(nan_as_minus_inf) {}
  std::string name() const override { return "fixed"; }
  int observation_window() const override { return inner_ ? inner_->observation_window() : 0; }
  Scores score(const PressEnv& env) const override {
    const KvLayout& l = env.cache.layout();
    Scores sc;
    sc.s.resize(static_cast<size_t>(l.n_heads_total()));
    for (int i = 0; i < l.n_heads_total(); ++i) {
      const HeadCache& h = env.cache.head(i / l.n_head_kv, i % l.n_head_kv);
      for (int32_t s = 0; s < h.len(); ++s) sc.s[static_cast<size_t>(i)].push_back(score_of(i, s, minus_inf_));
    }
    return sc;
  }

 private:
  std::shared_ptr<const Scorer> inner_;
  bool minus_inf_;
};

// Kept positions of every head after running `p` (scorer replaced) on a fresh synthetic cache.
std::vector<std::vector<int32_t>> run_fixed(const Press& p, bool nan_as_minus_inf, const CompressRequest& r) {
  Press q = p;
  q.scorer = std::make_shared<FixedScorer>(p.scorer, nan_as_minus_inf);
  Synth s = Synth::make(kLayers, kHeads, kKvHeads, kDim, kTokens, noise, q.needs().stats);
  for (int layer = 0; layer < kLayers; ++layer) {
    std::vector<float> qv(static_cast<size_t>(kTokens) * kHeads * kDim);
    for (size_t i = 0; i < qv.size(); ++i) qv[i] = noise(layer, 9, static_cast<int>(i), 3) * 10;
    std::vector<int32_t> pos(kTokens);
    std::iota(pos.begin(), pos.end(), 0);
    s.observe(layer, qv, pos);
  }
  s.run(q, r);
  std::vector<std::vector<int32_t>> kept;
  for (int layer = 0; layer < kLayers; ++layer)
    for (int h = 0; h < kKvHeads; ++h) kept.push_back(s.kept_positions(layer, h));
  return kept;
}

// Plain top-k (no recent share): the protected slots, then the best scores, NaN lowest, ties
// toward the newer slot — written here from the selector's contract, not from its code.
std::vector<int32_t> topk_reference(int head, size_t budget, int sinks, int window) {
  std::vector<int32_t> keep, rest;
  for (int s = 0; s < kTokens; ++s) (s < sinks || s >= kTokens - window ? keep : rest).push_back(s);
  auto key = [&](int s) {
    const float x = score_of(head, s, false);
    return std::isnan(x) ? -kInf : x;
  };
  std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) { return key(a) > key(b) || (key(a) == key(b) && a > b); });
  for (size_t k = 0; keep.size() < budget && k < rest.size(); ++k) keep.push_back(rest[k]);
  std::sort(keep.begin(), keep.end());
  return keep;
}

void check_press(const std::string& label, const Press& p) {
  SCOPED_TRACE(label);
  if (p.is_full()) return;
  Press probe_free = p;
  probe_free.scorer = std::make_shared<FixedScorer>(p.scorer, false);
  if (!test::runs_on_synthetic_cache(probe_free)) {
    GTEST_LOG_(INFO) << label << ": needs the model, skipped here";
    return;
  }
  CompressRequest r;
  if (!p.adaptive()) r.keep = 0.3;
  r.sinks = 3;
  r.window = 5;
  std::vector<std::vector<int32_t>> with_nan, again, with_minus_inf;
  try {
    with_nan = run_fixed(p, false, r);
  } catch (const Error& e) {
    FAIL() << "refused NaN scores: " << e.what();
  }
  again = run_fixed(p, false, r);
  with_minus_inf = run_fixed(p, true, r);
  EXPECT_EQ(with_nan, again) << "not deterministic";
  EXPECT_EQ(with_nan, with_minus_inf) << "NaN is not ranked as -inf";
  const auto* topk = dynamic_cast<const TopKSelector*>(p.selector.get());
  for (size_t i = 0; i < with_nan.size(); ++i) {
    const auto& kept = with_nan[i];
    EXPECT_TRUE(std::is_sorted(kept.begin(), kept.end()));
    EXPECT_EQ(std::set<int32_t>(kept.begin(), kept.end()).size(), kept.size()) << "duplicate slots";
    EXPECT_FALSE(kept.empty());
    for (int32_t x : kept) EXPECT_TRUE(x >= 0 && x < kTokens) << x;
    for (int s = 0; s < 3; ++s) EXPECT_TRUE(test::contains(kept, s)) << "sink " << s << " of head " << i;
    for (int s = kTokens - 5; s < kTokens; ++s) EXPECT_TRUE(test::contains(kept, s)) << "window " << s << " of head " << i;
    if (topk && topk->recent_share() == 0 && !p.merger && kept.size() < static_cast<size_t>(kTokens))
      EXPECT_EQ(kept, topk_reference(static_cast<int>(i), kept.size(), 3, 5)) << "head " << i;
  }
}

TEST(NanScores, EveryPressGivesADefinedResult) {
  for (const auto& info : press_registry()) check_press("press " + info.name, make_press(info.name));
}

TEST(NanScores, EveryAllocatorGivesADefinedResult) {
  for (const auto& a : allocator_registry()) {
    Press p;
    try {
      p = make_press("knorm", {{"allocator", a.name}});
    } catch (const Error& e) {
      GTEST_LOG_(INFO) << "allocator " << a.name << " not composable with knorm alone: " << e.what();
      continue;
    }
    check_press("knorm with allocator " + a.name, p);
  }
}

TEST(NanScores, TopKSlotsRanksNanLowest) {
  // All-NaN, NaN beside infinities, and a single finite score among NaNs.
  const std::vector<float> all_nan(50, kNan);
  auto top = top_k_slots(all_nan, 10, {});
  std::sort(top.begin(), top.end());
  std::vector<int32_t> want(10);
  std::iota(want.begin(), want.end(), 40);  // ties toward the newer slot
  EXPECT_EQ(top, want);
  std::vector<float> mixed(64, kNan);
  mixed[3] = -kInf, mixed[17] = 0.5f, mixed[30] = kInf, mixed[31] = -1e30f;
  top = top_k_slots(mixed, 3, {});
  std::sort(top.begin(), top.end());
  EXPECT_EQ(top, (std::vector<int32_t>{17, 30, 31}));
  top = top_k_slots(mixed, 5, {});
  std::sort(top.begin(), top.end());
  EXPECT_EQ(top, (std::vector<int32_t>{17, 30, 31, 62, 63}));  // -inf ties NaN: the newest of them
}

}  // namespace
}  // namespace kvs
