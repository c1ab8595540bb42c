// The server's list of strangers (connections before their hello) and its
// descriptor reserve on their own, without sockets: who is closed to make
// room for a newcomer, and when.
#include "strangers.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

namespace infini::rendezvous {
namespace {

TEST(StrangersTest, BeyondThePerPeerCapThatPeersOldestIsClosedFirst) {
  Strangers strangers(/*max_connections=*/10, /*max_per_peer=*/2);
  strangers.Add(1, "A", 0);
  strangers.Add(2, "B", 0);
  strangers.Add(3, "A", 0);
  EXPECT_EQ(strangers.NextBeyondCaps(3), 0u);
  strangers.Add(4, "A", 0);
  EXPECT_EQ(strangers.NextBeyondCaps(4), 1u);  // A's oldest, not B's older one
  strangers.Remove(1);
  EXPECT_EQ(strangers.NextBeyondCaps(4), 0u);
  EXPECT_EQ(strangers.size(), 3u);
}

TEST(StrangersTest, BeyondTheTotalCapTheOldestIsClosedButNeverTheNewcomer) {
  Strangers strangers(/*max_connections=*/2, /*max_per_peer=*/10);
  strangers.Add(1, "A", 0);
  strangers.Add(2, "B", 0);
  strangers.Add(3, "C", 0);
  EXPECT_EQ(strangers.NextBeyondCaps(3), 1u);
  EXPECT_EQ(strangers.NextBeyondCaps(1), 0u);  // the oldest is the one to make room for
  strangers.Remove(1);
  EXPECT_EQ(strangers.NextBeyondCaps(3), 0u);
  EXPECT_EQ(strangers.oldest(), 2u);
}

TEST(StrangersTest, RemovingIsIdempotentAndEmptiesThePeersList) {
  Strangers strangers(/*max_connections=*/10, /*max_per_peer=*/1);
  strangers.Add(1, "A", 0);
  strangers.Remove(1);
  strangers.Remove(1);
  strangers.Remove(99);
  EXPECT_FALSE(strangers.Contains(1));
  EXPECT_TRUE(strangers.empty());
  strangers.Add(2, "A", 0);  // A's list starts again from nothing
  EXPECT_EQ(strangers.NextBeyondCaps(2), 0u);
  EXPECT_TRUE(strangers.Contains(2));
}

TEST(StrangersTest, ForDescriptorsOnlyAnOldEnoughStrangerOtherThanTheNewcomerIsClosed) {
  Strangers strangers(/*max_connections=*/10, /*max_per_peer=*/10);
  EXPECT_EQ(strangers.OldestToShedForDescriptors(1, 5000), 0u);
  strangers.Add(1, "A", 0);
  EXPECT_EQ(strangers.OldestToShedForDescriptors(1, 5000), 0u);
  strangers.Add(2, "A", Strangers::kDescriptorShedAfterMs - 1);
  EXPECT_EQ(strangers.OldestToShedForDescriptors(2, Strangers::kDescriptorShedAfterMs - 1), 0u);
  EXPECT_EQ(strangers.OldestToShedForDescriptors(2, Strangers::kDescriptorShedAfterMs), 1u);
}

TEST(DescriptorLimitTest, TheReserveAndTheWarningFollowTheSoftLimit) {
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  if (saved.rlim_max != RLIM_INFINITY && saved.rlim_max < 1000) GTEST_SKIP() << "hard limit < 1000";
  rlimit lowered = saved;
  lowered.rlim_cur = 1000;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  DescriptorLimit descriptors;
  descriptors.Read();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  EXPECT_EQ(descriptors.limit(), 1000u);
  EXPECT_EQ(descriptors.reserve(), 125u);  // an eighth, within 16..1024
  EXPECT_FALSE(descriptors.InReserve(874));
  EXPECT_TRUE(descriptors.InReserve(875));
  EXPECT_FALSE(descriptors.Near(899));
  EXPECT_TRUE(descriptors.Near(900));
  EXPECT_TRUE(descriptors.ShouldWarn(5));
  EXPECT_FALSE(descriptors.ShouldWarn(5 + DescriptorLimit::kWarnEveryMs - 1));
  EXPECT_TRUE(descriptors.ShouldWarn(5 + DescriptorLimit::kWarnEveryMs));
}

TEST(DescriptorLimitTest, WithoutALimitNothingIsReserved) {
  DescriptorLimit descriptors;  // not read: no limit known
  EXPECT_EQ(descriptors.limit(), 0u);
  EXPECT_FALSE(descriptors.InReserve(1u << 30));
  EXPECT_FALSE(descriptors.Near(1u << 30));
}

}  // namespace
}  // namespace infini::rendezvous
