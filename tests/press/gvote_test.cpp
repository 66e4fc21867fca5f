// GVote's voting on synthetic caches (no model: the synthetic queries are given), with answers
// built by hand: B_step from the last query's top-p set, p_nuc -> 1 keeps everything, one
// dominant key keeps few, the union over samples and over the query heads of a GQA group (and
// nothing from another group), the adaptive allocator's budgets and keep_chosen.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "press/methods/gvote.h"
#include "press/registry.h"
#include "press/scorers/scorers.h"
#include "press_test_util.h"

namespace kvs {
namespace {

using test::Synth;

constexpr int kD = 8, kN = 16;

// Key of slot p in KV head h: one-hot on dimension (p + h) % D, length 1 + p / D (distinct keys
// along each axis: the longer one wins a vote along that axis).
float onehot(int, int h, int pos, int d) { return d == (pos + h) % kD ? 1.0f + static_cast<float>(pos / kD) : 0.0f; }

// q [n_head][D] with query head qh pointing along axis[qh] with strength s.
std::vector<float> along(const std::vector<int>& axis, float s) {
  std::vector<float> q(axis.size() * kD, 0.0f);
  for (size_t h = 0; h < axis.size(); ++h) q[h * kD + static_cast<size_t>(axis[h])] = s;
  return q;
}

std::vector<int32_t> kept(const std::vector<uint8_t>& k) {
  std::vector<int32_t> v;
  for (size_t i = 0; i < k.size(); ++i)
    if (k[i]) v.push_back(static_cast<int32_t>(i));
  return v;
}

TEST(GVote, OneDominantKeyKeepsFew) {
  // 1 KV head, 2 query heads (a group of 2). The last query of both heads points hard at axis 3:
  // slot 11 (axis (11 + 0) % 8 = 3, length 2) dominates, so B_step = 1 for each query head.
  Synth s = Synth::make(1, 2, 1, kD, kN, onehot);
  const auto q_last = along({3, 3}, 40.0f);
  // Two samples: head 0's point along axes 1 and 5, head 1's along 6 and 6 (the top key along an
  // axis is the longer one, slot 8 + axis).
  std::vector<float> q_syn(2 * 2 * kD, 0.0f);  // [S][H][D]
  auto set = [&](int s_, int h, int axis) { q_syn[(static_cast<size_t>(s_) * 2 + h) * kD + axis] = 1.0f; };
  set(0, 0, 1), set(1, 0, 5), set(0, 1, 6), set(1, 1, 6);
  std::vector<int64_t> b;
  const auto keep = gvote_layer_votes(*s.cache, 0, s.shape, q_last.data(), kN - 1, q_syn.data(), 2, 0.95, &b);
  EXPECT_EQ(b, (std::vector<int64_t>{1, 1}));
  // Union over samples {9, 13} and over the group's heads {14}: 3 of 16 slots.
  EXPECT_EQ(kept(keep[0]), (std::vector<int32_t>{9, 13, 14}));
}

TEST(GVote, NucleusOneKeepsEverything) {
  Synth s = Synth::make(1, 2, 1, kD, kN, onehot);
  const auto q_last = along({3, 3}, 40.0f);
  std::vector<float> q_syn(2 * kD, 0.0f);
  q_syn[1] = q_syn[kD + 2] = 1.0f;
  std::vector<int64_t> b;
  const auto keep = gvote_layer_votes(*s.cache, 0, s.shape, q_last.data(), kN - 1, q_syn.data(), 1, 1.0, &b);
  EXPECT_EQ(b, (std::vector<int64_t>{kN, kN}));
  EXPECT_EQ(kept(keep[0]).size(), static_cast<size_t>(kN));
}

// B_step is the top-p set size of each query head's own attention: a flat last query needs
// ceil(0.95 n) keys, a sharp one 1; the group's votes use each head's own B_step.
TEST(GVote, StepBudgetIsPerQueryHeadTopP) {
  Synth s = Synth::make(1, 2, 1, kD, kN, onehot);
  std::vector<float> q_last(2 * kD, 0.0f);
  q_last[kD + 3] = 40.0f;  // head 0 flat (all logits 0), head 1 sharp on slot 11
  std::vector<float> q_syn(2 * kD, 0.0f);  // one sample; head 0 along axis 1, head 1 along 2
  q_syn[1] = q_syn[kD + 2] = 1.0f;
  std::vector<int64_t> b;
  const auto keep = gvote_layer_votes(*s.cache, 0, s.shape, q_last.data(), kN - 1, q_syn.data(), 1, 0.95, &b);
  // Flat: the smallest m with m / 16 >= 0.95 is 16 (15 / 16 = 0.9375).
  EXPECT_EQ(b, (std::vector<int64_t>{16, 1}));
  EXPECT_EQ(kept(keep[0]).size(), 16u);
  const auto keep2 = gvote_layer_votes(*s.cache, 0, s.shape, q_last.data(), kN - 1, q_syn.data(), 1, 0.9, &b);
  EXPECT_EQ(b, (std::vector<int64_t>{15, 1}));  // 15 / 16 >= 0.9
  EXPECT_EQ(kept(keep2[0]).size(), 15u);
}

// Two KV heads: the votes of group 0's query heads never reach KV head 1.
TEST(GVote, UnionIsPerGroup) {
  Synth s = Synth::make(1, 4, 2, kD, kN, onehot);  // query heads 0,1 -> KV head 0; 2,3 -> KV head 1
  const auto q_last = along({3, 3, 4, 4}, 40.0f);
  std::vector<float> q_syn(3 * 4 * kD, 0.0f);  // [S = 3][H = 4][D]
  auto set = [&](int s_, int h, int axis) { q_syn[(static_cast<size_t>(s_) * 4 + h) * kD + axis] = 1.0f; };
  // Group 0 votes along axes 0, 1, 2 (samples) and 7 (head 1, sample 0); group 1 only along axis 5.
  set(0, 0, 0), set(1, 0, 1), set(2, 0, 2), set(0, 1, 7), set(1, 1, 7), set(2, 1, 7);
  for (int s_ = 0; s_ < 3; ++s_) set(s_, 2, 5), set(s_, 3, 5);
  std::vector<int64_t> b;
  const auto keep = gvote_layer_votes(*s.cache, 0, s.shape, q_last.data(), kN - 1, q_syn.data(), 3, 0.95, &b);
  EXPECT_EQ(b, (std::vector<int64_t>{1, 1, 1, 1}));
  // KV head 0: key of slot p lies on axis p % 8; the longer one (p >= 8) wins.
  EXPECT_EQ(kept(keep[0]), (std::vector<int32_t>{8, 9, 10, 15}));
  // KV head 1: key of slot p lies on axis (p + 1) % 8: axis 5 -> slot 12.
  EXPECT_EQ(kept(keep[1]), (std::vector<int32_t>{12}));
}

// The adaptive allocator keeps the voted slots plus the protected ones and reports its keep.
TEST(GVote, AllocatorKeepsVotesAndProtectedAndReportsKeep) {
  Synth s = Synth::make(1, 2, 2, kD, kN, onehot);
  Scores sc = make_scores(*s.cache);
  for (int i : {3, 7, 9}) sc.s[0][static_cast<size_t>(i)] = 1.0f;
  sc.s[1][5] = 1.0f;
  CompressRequest r;
  r.sinks = 1;
  GVoteAllocator alloc;
  EXPECT_TRUE(alloc.adaptive());
  const Allocation a = alloc.allocate(sc, s.env(r));
  EXPECT_EQ(a.budgets, (Budgets{4, 2}));  // {0, 3, 7, 9} and {0, 5}
  ASSERT_TRUE(a.keep_chosen.has_value());
  EXPECT_DOUBLE_EQ(*a.keep_chosen, 6.0 / 32.0);
}

TEST(GVote, PressIsAdaptiveAndNeedsTheModel) {
  Press p = make_press("gvote");
  EXPECT_TRUE(p.adaptive());
  EXPECT_TRUE(p.needs().probe);
  EXPECT_EQ(p.needs().stats.window, 1);
  EXPECT_TRUE(p.needs().stats.attn_input_moments);
  CompressRequest with_keep;
  with_keep.keep = 0.5;
  EXPECT_THROW(check_request(p, with_keep), Error);  // chooses its own keep ratio
  EXPECT_NO_THROW(check_request(p, CompressRequest{}));
  EXPECT_THROW(make_press("gvote", {{"p_nuc", "0"}}), Error);
  EXPECT_THROW(make_press("gvote", {{"samples", "0"}}), Error);
  // Without the model (synthetic caches) it is refused, not run on nothing.
  Synth s = Synth::make(1, 2, 1, kD, kN, onehot, p.needs().stats);
  EXPECT_THROW(s.run(p, CompressRequest{}), Error);
}

}  // namespace
}  // namespace kvs
