// The table of collectives (infini/ccl/collectives.h): every collective has
// a row that round-trips its name, agrees with the plugin ABI's
// infiniCclCollectiveReduces, and has the in-place forms that
// ccl_conformance and ccl_bench exercise.
#include "infini/ccl/collectives.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

extern "C" int InfiniCclTestCollectiveReducesFromC(int collective);  // plugin_abi_c_check.c

namespace {

using infini::ccl::Collective;
using infini::ccl::CountRule;
namespace ccl = infini::ccl;

Collective CollectiveAt(int index) { return static_cast<Collective>(index); }

TEST(Collectives, EveryNameRoundTrips) {
  for (int c = 0; c < ccl::kNumCollectives; ++c) {
    const std::string_view name = ccl::CollectiveName(CollectiveAt(c));
    EXPECT_NE(name, "unknown") << c;
    EXPECT_EQ(ccl::ParseCollective(name), CollectiveAt(c)) << name;
  }
  EXPECT_EQ(ccl::ParseCollective("sendrecv"), std::nullopt) << "bench's name, not a collective's";
  EXPECT_EQ(ccl::ParseCollective(""), std::nullopt);
  EXPECT_EQ(ccl::CollectiveName(CollectiveAt(ccl::kNumCollectives)), "unknown");
  EXPECT_EQ(ccl::CollectiveName(CollectiveAt(-1)), "unknown");
}

TEST(Collectives, ReducesAsThePluginAbiSaysInCAndCpp) {
  for (int c = 0; c < ccl::kNumCollectives; ++c) {
    const auto abi = static_cast<infiniCclCollective_t>(c);
    const bool reduces = ccl::IsReduction(CollectiveAt(c));
    EXPECT_EQ(reduces, infiniCclCollectiveReduces(abi) != 0)
        << ccl::CollectiveName(CollectiveAt(c));
    EXPECT_EQ(reduces, InfiniCclTestCollectiveReducesFromC(c) != 0)
        << ccl::CollectiveName(CollectiveAt(c));
  }
  // A value the header does not know takes no operator.
  EXPECT_EQ(infiniCclCollectiveReduces(infiniCclNumCollectives), 0);
  EXPECT_EQ(InfiniCclTestCollectiveReducesFromC(99), 0);
  EXPECT_FALSE(ccl::IsReduction(CollectiveAt(99)));
  std::set<std::string_view> reductions;
  for (const ccl::CollectiveInfo& row : ccl::kCollectiveTable) {
    if (row.reduces) reductions.insert(row.name);
  }
  EXPECT_EQ(reductions, (std::set<std::string_view>{"all_reduce", "reduce", "reduce_scatter",
                                                    "reduce_scatter_v"}));
}

// ccl_conformance runs these in place as well as out of place, and
// ccl_bench --inplace keeps them (skipping sendrecv and all_to_all): both
// read this column, so a row changed by mistake changes what they judge.
TEST(Collectives, InPlaceFormsAreNcclsAndWhatTheToolsExercise) {
  std::set<std::string_view> in_place;
  for (int c = 0; c < ccl::kNumCollectives; ++c) {
    if (ccl::HasInPlaceForm(CollectiveAt(c))) in_place.insert(ccl::CollectiveName(CollectiveAt(c)));
  }
  EXPECT_EQ(in_place, (std::set<std::string_view>{"all_reduce", "broadcast", "reduce", "all_gather",
                                                  "reduce_scatter"}));
  EXPECT_FALSE(ccl::HasInPlaceForm(Collective::kSend)) << "bench's sendrecv";
  EXPECT_FALSE(ccl::HasInPlaceForm(Collective::kAllToAll));
  EXPECT_FALSE(ccl::HasInPlaceForm(CollectiveAt(99)));
}

TEST(Collectives, CountRulesFollowThePluginEntries) {
  EXPECT_EQ(ccl::CountRuleOf(Collective::kAllReduce), CountRule::kWholeBuffer);
  EXPECT_EQ(ccl::CountRuleOf(Collective::kBroadcast), CountRule::kWholeBuffer);
  EXPECT_EQ(ccl::CountRuleOf(Collective::kAllGather), CountRule::kPerRankSend);  // sendcount
  EXPECT_EQ(ccl::CountRuleOf(Collective::kGather), CountRule::kPerRankSend);
  EXPECT_EQ(ccl::CountRuleOf(Collective::kReduceScatter), CountRule::kPerRankRecv);  // recvcount
  EXPECT_EQ(ccl::CountRuleOf(Collective::kScatter), CountRule::kPerRankRecv);
  EXPECT_EQ(ccl::CountRuleOf(Collective::kSend), CountRule::kPerPeer);
  EXPECT_EQ(ccl::CountRuleOf(Collective::kAllToAll), CountRule::kPerPeer);
  EXPECT_EQ(ccl::CountRuleOf(Collective::kBarrier), CountRule::kNoBuffer);
  for (Collective v :
       {Collective::kAllToAllV, Collective::kAllGatherV, Collective::kReduceScatterV}) {
    EXPECT_EQ(ccl::CountRuleOf(v), CountRule::kVariable) << ccl::CollectiveName(v);
  }
}

}  // namespace
