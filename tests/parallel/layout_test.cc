#include "infini/parallel/layout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "infini/parallel/errors.h"

namespace infini::parallel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(LayoutTest, TensorParallelVariesFastestThenDataThenPipeline) {
  Layout layout(2, 2, 2);
  EXPECT_EQ(layout.CoordinatesOf(0), (Coordinates{0, 0, 0}));
  EXPECT_EQ(layout.CoordinatesOf(1), (Coordinates{1, 0, 0}));
  EXPECT_EQ(layout.CoordinatesOf(2), (Coordinates{0, 1, 0}));
  EXPECT_EQ(layout.CoordinatesOf(4), (Coordinates{0, 0, 1}));
  EXPECT_EQ(layout.CoordinatesOf(7), (Coordinates{1, 1, 1}));
}

TEST(LayoutTest, CoordinatesRoundTrip) {
  Layout layout(3, 2, 4);
  for (int rank = 0; rank < layout.world_size(); ++rank) {
    EXPECT_EQ(layout.RankAt(layout.CoordinatesOf(rank)), rank);
  }
}

TEST(LayoutTest, GroupsOfTwoByTwoByTwo) {
  Layout layout(2, 2, 2);
  EXPECT_THAT(layout.GroupMembers(Axis::kTensor, 0), ElementsAre(0, 1));
  EXPECT_THAT(layout.GroupMembers(Axis::kTensor, 3), ElementsAre(6, 7));
  EXPECT_THAT(layout.GroupMembers(Axis::kData, 0), ElementsAre(0, 2));
  EXPECT_THAT(layout.GroupMembers(Axis::kData, 1), ElementsAre(1, 3));
  EXPECT_THAT(layout.GroupMembers(Axis::kData, 2), ElementsAre(4, 6));
  EXPECT_THAT(layout.GroupMembers(Axis::kPipeline, 0), ElementsAre(0, 4));
  EXPECT_THAT(layout.GroupMembers(Axis::kPipeline, 3), ElementsAre(3, 7));
  EXPECT_EQ(layout.GroupIdOf(Axis::kData, 5), 3);
  EXPECT_EQ(layout.GroupIdOf(Axis::kTensor, 5), 2);
}

TEST(LayoutTest, EveryRankIsInExactlyOneGroupPerAxisAtItsGroupId) {
  Layout layout(2, 4, 3);
  for (Axis axis : {Axis::kTensor, Axis::kData, Axis::kPipeline}) {
    std::multiset<int> seen;
    for (int id = 0; id < layout.GroupCount(axis); ++id) {
      std::vector<int> members = layout.GroupMembers(axis, id);
      EXPECT_EQ(static_cast<int>(members.size()), layout.AxisSize(axis));
      for (int member : members) {
        seen.insert(member);
        EXPECT_EQ(layout.GroupIdOf(axis, member), id);
      }
    }
    EXPECT_EQ(static_cast<int>(seen.size()), layout.world_size());
    EXPECT_EQ(std::set<int>(seen.begin(), seen.end()).size(), seen.size());
  }
}

TEST(LayoutTest, ForWorldDerivesDataParallelSize) {
  Layout layout = Layout::ForWorld(16, 2, 4);
  EXPECT_EQ(layout.data_parallel_size(), 2);
  try {
    Layout::ForWorld(8, 3, 1);
    FAIL() << "expected ParallelConfigError";
  } catch (const ParallelConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("--tensor_parallel=3"));
    EXPECT_THAT(error.what(), HasSubstr("world size 8"));
  }
  EXPECT_THROW(Layout(0, 1, 1), ParallelConfigError);
}

TEST(LayoutTest, OutOfRangeRanksAreRefused) {
  Layout layout(2, 2, 2);
  EXPECT_THROW(layout.CoordinatesOf(8), std::out_of_range);
  EXPECT_THROW(layout.GroupMembers(Axis::kTensor, 4), std::out_of_range);
}

TEST(LayoutTest, OverviewListsEveryGroup) {
  const std::string overview = Layout(2, 2, 2).Overview();
  EXPECT_THAT(overview, HasSubstr("DP=2 × TP=2 × PP=2 (order TP-DP-PP, 8 ranks)"));
  EXPECT_THAT(overview, HasSubstr("tp3: [6, 7]"));
  EXPECT_THAT(overview, HasSubstr("dp1: [1, 3]"));
  EXPECT_THAT(overview, HasSubstr("pp2: [2, 6]"));
}

TEST(LayoutTest, SurvivorsKeepTensorAndPipelineSizesAndShrinkDataParallel) {
  const Layout layout(3, 2, 1);
  const Layout shrunk = layout.ForSurvivors(4);
  EXPECT_EQ(shrunk.data_parallel_size(), 2);
  EXPECT_EQ(shrunk.tensor_parallel_size(), 2);
  EXPECT_EQ(Layout(3, 1, 1).ForSurvivors(2).data_parallel_size(), 2);
  try {
    layout.ForSurvivors(5);
    FAIL() << "5 survivors cannot keep TP=2";
  } catch (const ParallelConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("layout DP=3 × TP=2 × PP=1 cannot be kept by the 5 "
                                        "surviving ranks: expected a multiple of TP × PP = 2"));
  }
}

}  // namespace
}  // namespace infini::parallel
