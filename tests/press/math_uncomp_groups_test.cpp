// UNComp grouping on hand-built cases: per-sample groups, the two majority votes, layer groups
// (Eq. 8), stage token counts (Eq. 10), stepped budgets (Eq. 11) summing exactly to the request.
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "press/math/uncomp_groups.h"

namespace kvs::math {
namespace {

TEST(MathUncompGroups, GroupSizesAndPerSampleAssignment) {
  EXPECT_EQ(uncomp_group_sizes(8, 4), (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(uncomp_group_sizes(10, 4), (std::vector<int>{3, 3, 2, 2}));
  // Fewer heads than groups: ranks spread over the whole ladder, round(r (M-1) / (n-1)).
  EXPECT_EQ(uncomp_group_sizes(3, 5), (std::vector<int>{1, 0, 1, 0, 1}));
  EXPECT_EQ(uncomp_group_sizes(4, 8), (std::vector<int>{1, 0, 1, 0, 0, 1, 0, 1}));  // groups 0, 2, 5, 7
  EXPECT_EQ(uncomp_group_sizes(7, 8), (std::vector<int>{1, 1, 1, 0, 1, 1, 1, 1}));  // 0 1 2 4 5 6 7
  EXPECT_EQ(uncomp_group_sizes(1, 8), (std::vector<int>{1, 0, 0, 0, 0, 0, 0, 0}));
  // 4 KV heads, 8 groups: budgets 640, 492, 270, 122 (the paper's ladder's ends), mean 381
  const auto lab = uncomp_assign_head_groups(std::vector<double>{3, 9, 1, 5}, 8);
  EXPECT_EQ(lab, (std::vector<int>{5, 0, 7, 2}));
  EXPECT_EQ(uncomp_head_budgets(lab, 8, 1524), (std::vector<int64_t>{270, 640, 122, 492}));
  // erank 5,1,4,2,3,0 -> ranks h0 h2 | h4 h3 | h1 h5
  EXPECT_EQ(uncomp_assign_head_groups(std::vector<double>{5, 1, 4, 2, 3, 0}, 3), (std::vector<int>{0, 2, 0, 1, 1, 2}));
  // ties: the lower head index ranks first
  EXPECT_EQ(uncomp_assign_head_groups(std::vector<double>{1, 1, 1, 1}, 2), (std::vector<int>{0, 0, 1, 1}));
  // 5 heads, 2 groups: sizes 3, 2
  EXPECT_EQ(uncomp_assign_head_groups(std::vector<double>{0, 1, 2, 3, 4}, 2), (std::vector<int>{1, 1, 0, 0, 0}));
  EXPECT_THROW(uncomp_assign_head_groups(std::vector<double>{1, 2}, 0), Error);
}

TEST(MathUncompGroups, MajorityVote) {
  // clear majorities: both modes agree
  const std::vector<int> clear = {0, 0, 1, 1,   // sample 0
                                  0, 1, 0, 1,   // sample 1
                                  0, 0, 1, 1};  // sample 2
  EXPECT_EQ(uncomp_majority_vote(clear, 3, 4, 2), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(uncomp_majority_vote(clear, 3, 4, 2, VoteMode::PerHead), (std::vector<int>{0, 0, 1, 1}));
  // g0 = {0,1}, {0,2}, {1,2}: heads 0-2 each voted twice into group 0, head 3 never.
  const std::vector<int> split = {0, 0, 1, 1, 0, 1, 0, 1, 1, 0, 0, 1};
  // per head: three heads in group 0 (sizes not kept)
  EXPECT_EQ(uncomp_majority_vote(split, 3, 4, 2, VoteMode::PerHead), (std::vector<int>{0, 0, 0, 1}));
  // balanced (official): group 1 picks first — head 3 (3 votes), then the tie (1 vote each) goes
  // to the lowest index, head 0; groups keep two heads each
  EXPECT_EQ(uncomp_majority_vote(split, 3, 4, 2, VoteMode::Balanced), (std::vector<int>{1, 0, 0, 1}));
  // per-head ties go to the larger-budget group
  EXPECT_EQ(uncomp_majority_vote(std::vector<int>{0, 1, 1, 0}, 2, 2, 2, VoteMode::PerHead), (std::vector<int>{0, 0}));
  EXPECT_THROW(uncomp_majority_vote(std::vector<int>{0, 2}, 1, 2, 2), Error);  // label out of range
  EXPECT_THROW(uncomp_majority_vote(std::vector<int>{0, 1, 0}, 1, 2, 2), Error);  // wrong size
}

TEST(MathUncompGroups, LayerGroupsFromEntropyDrops) {
  // drops: 0.5, 2.5, 0.2, -0.1, 6.9
  const std::vector<double> e = {30, 29.5, 27, 26.8, 26.9, 20};
  EXPECT_EQ(uncomp_layer_groups(e, 1.0), (std::vector<int>{0, 0, 1, 1, 1, 2}));
  EXPECT_EQ(uncomp_layer_groups(e, 3.0), (std::vector<int>{0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(uncomp_layer_groups(e, 100.0), (std::vector<int>(6, 0)));
  // an entropy increase never starts a group; a drop equal to eps does not either (strict >)
  EXPECT_EQ(uncomp_layer_groups(std::vector<double>{5, 9, 8}, 1.0), (std::vector<int>{0, 0, 0}));
  EXPECT_TRUE(uncomp_layer_groups(std::vector<double>{}, 1.0).empty());
}

TEST(MathUncompGroups, StageTokens) {
  EXPECT_EQ(uncomp_stage_tokens(3, 1000, 200, 500), (std::vector<int64_t>{1000, 800, 600}));
  EXPECT_EQ(uncomp_stage_tokens(4, 1000, 300, 500), (std::vector<int64_t>{1000, 700, 500, 500}));
  EXPECT_EQ(uncomp_stage_tokens(2, 100, 10, 500), (std::vector<int64_t>{100, 100}));  // never above n
  EXPECT_THROW(uncomp_stage_tokens(0, 100, 10, 5), Error);
}

TEST(MathUncompGroups, SteppedBudgetsSumExactly) {
  const auto sizes = uncomp_stepped_sizes(8);  // 640, 566, ..., 122
  EXPECT_EQ(sizes.front(), 640.0);
  EXPECT_EQ(sizes.back(), 122.0);
  EXPECT_NEAR(std::accumulate(sizes.begin(), sizes.end(), 0.0) / 8, 381.0, 1e-12);
  EXPECT_THROW(uncomp_stepped_sizes(8, 640, 100), Error);  // 640 - 7 * 100 < 0
  // one head per group: the paper's sizes exactly at their own total, and exactly half at half
  std::vector<int> one_each(8);
  std::iota(one_each.begin(), one_each.end(), 0);
  EXPECT_EQ(uncomp_head_budgets(one_each, 8, 3048), (std::vector<int64_t>{640, 566, 492, 418, 344, 270, 196, 122}));
  EXPECT_EQ(uncomp_head_budgets(one_each, 8, 1524), (std::vector<int64_t>{320, 283, 246, 209, 172, 135, 98, 61}));
  // two heads per group, a total that does not divide: exact sum, within-group difference <= 1
  const std::vector<int> labels = {3, 0, 1, 2, 0, 3, 2, 1};
  const auto b = uncomp_head_budgets(labels, 4, 1001, {}, 100, 20);  // weights 100, 80, 60, 40
  EXPECT_EQ(std::accumulate(b.begin(), b.end(), int64_t{0}), 1001);
  EXPECT_LE(std::abs(b[1] - b[4]), 1);
  EXPECT_LE(std::abs(b[0] - b[5]), 1);
  EXPECT_GT(b[1], b[2]);
  EXPECT_GT(b[2], b[3]);
  EXPECT_GT(b[3], b[0]);
  // caps: a short head cannot take its share; the rest absorb it
  const std::vector<int64_t> caps = {1000, 50, 1000, 1000, 1000, 1000, 1000, 1000};
  const auto c = uncomp_head_budgets(labels, 4, 1001, caps, 100, 20);
  EXPECT_EQ(c[1], 50);
  EXPECT_EQ(std::accumulate(c.begin(), c.end(), int64_t{0}), 1001);
  EXPECT_THROW(uncomp_head_budgets(std::vector<int>{0, 4}, 4, 10), Error);
}

}  // namespace
}  // namespace kvs::math
