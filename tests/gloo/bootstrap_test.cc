// How gloo ranks meet: through the host's bootstrap (no private server),
// through the plugin's private store without one, by split over the
// bootstrap, and several ranks of one process in one comm_init_ranks call.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "infini/ccl/memory_bootstrap_store.h"
#include "rank_runner.h"

namespace infini::gloo_test {
namespace {

using Clock = std::chrono::steady_clock;

ccl::CommConfig ConfigWithTimeout(int64_t timeout_ms) {
  ccl::CommConfig config;
  config.timeout_ms = timeout_ms;
  return config;
}

// TCP sockets of this process in the LISTEN state (/proc/net/tcp{,6}).
int ListeningSocketsOfThisProcess() {
  std::set<std::string> inodes;
  if (DIR* fds = opendir("/proc/self/fd")) {
    while (dirent* entry = readdir(fds)) {
      char target[128] = {};
      const std::string path = std::string("/proc/self/fd/") + entry->d_name;
      const ssize_t length = readlink(path.c_str(), target, sizeof(target) - 1);
      const std::string link(target, length > 0 ? static_cast<size_t>(length) : 0);
      if (link.rfind("socket:[", 0) == 0) inodes.insert(link.substr(8, link.size() - 9));
    }
    closedir(fds);
  }
  int listening = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream lines(table);
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state == "0A" && inodes.count(inode) > 0) ++listening;
    }
  }
  return listening;
}

// Sum over ranks of rank+1, on every rank.
void ExpectAllReduceOfRankPlusOne(ccl::Communicator& comm) {
  ccl::DeviceBuffer buffer(comm.backend(), sizeof(int64_t));
  const int64_t mine = comm.rank() + 1;
  buffer.CopyFromHost(&mine, sizeof(mine));
  comm.AllReduce(buffer.AsTensor(ccl::dtype::kInt64, 1), buffer.AsTensor(ccl::dtype::kInt64, 1),
                 ccl::ReduceOp::kSum);
  int64_t sum = 0;
  buffer.CopyToHost(&sum, sizeof(sum));
  const int64_t n = comm.world_size();
  EXPECT_EQ(sum, n * (n + 1) / 2) << "rank " << comm.rank();
}

TEST(GlooBootstrap, RanksMeetThroughTheHostBootstrapWithoutStartingAServer) {
  // A fresh process: no earlier test's private server is listening there.
  RunInFreshProcess([] {
    ASSERT_EQ(ListeningSocketsOfThisProcess(), 0);
    auto store = std::make_shared<ccl::MemoryBootstrapStore>();
    const ccl::UniqueId id = GlooBackend()->GetUniqueId(store);
    EXPECT_EQ(id.size(), GlooBackend()->info().unique_id_bytes);
    int listening_during = -1;
    RunThreadRanks(
        3, id,
        [&](ccl::Communicator& comm) {
          ExpectAllReduceOfRankPlusOne(comm);
          if (comm.rank() == 0) listening_during = ListeningSocketsOfThisProcess();
          comm.Barrier();
        },
        ConfigWithTimeout(60000), store);
    EXPECT_EQ(listening_during, 0) << "a socket listened while the group met over the bootstrap";
    const std::set<std::string> keys = store->Keys();
    EXPECT_FALSE(keys.empty()) << "the ranks did not use the host's bootstrap";
    for (const std::string& key : keys) {
      EXPECT_EQ(key.rfind("infini_ccl_gloo/", 0), 0u) << key;
    }
    // Control: without a bootstrap the plugin does start its server.
    GlooBackend()->GetUniqueId();
    EXPECT_EQ(ListeningSocketsOfThisProcess(), 1);
  });
}

TEST(GlooBootstrap, IdMadeWithTheBootstrapIsRefusedWithoutOne) {
  const ccl::UniqueId id =
      GlooBackend()->GetUniqueId(std::make_shared<ccl::MemoryBootstrapStore>());
  try {
    GlooBackend()->CommInitRank(1, id, 0, ConfigWithTimeout(5000));
    ADD_FAILURE() << "init without the bootstrap the id was made with succeeded";
  } catch (const ccl::Error& e) {
    EXPECT_EQ(e.code(), infiniCclInvalidUsage);
    EXPECT_NE(std::string(e.what()).find("bootstrap"), std::string::npos) << e.what();
  }
}

TEST(GlooBootstrap, SplitMeetsThroughTheParentsBootstrap) {
  auto store = std::make_shared<ccl::MemoryBootstrapStore>();
  const ccl::UniqueId id = GlooBackend()->GetUniqueId(store);
  RunThreadRanks(
      4, id,
      [](ccl::Communicator& comm) {
        ccl::Communicator half = comm.Split(comm.rank() % 2, comm.rank());
        ASSERT_TRUE(half.valid());
        EXPECT_EQ(half.world_size(), 2);
        EXPECT_EQ(half.rank(), comm.rank() / 2);
        ExpectAllReduceOfRankPlusOne(half);
      },
      ConfigWithTimeout(60000), store);
  int split_keys = 0;
  for (const std::string& key : store->Keys()) {
    if (key.find("/split0/color") != std::string::npos) ++split_keys;
  }
  EXPECT_GT(split_keys, 0) << "the split groups did not meet in the parent's bootstrap";
}

// Several ranks made by one call, each then driven by its own thread.
void DriveEach(std::vector<ccl::Communicator>& comms) {
  std::vector<std::thread> threads;
  for (ccl::Communicator& comm : comms) {
    threads.emplace_back([&comm] { ExpectAllReduceOfRankPlusOne(comm); });
  }
  for (std::thread& thread : threads) thread.join();
}

TEST(GlooInitRanks, OneCallMakesEveryRankOfTheGroup) {
  const ccl::UniqueId id = GlooBackend()->GetUniqueId();
  const std::vector<int> ranks = {0, 1, 2};
  const std::vector<int> devices = {0, 0, 0};
  std::vector<ccl::Communicator> comms =
      GlooBackend()->CommInitRanks(3, id, ranks, devices, ConfigWithTimeout(60000));
  ASSERT_EQ(comms.size(), 3u);
  for (size_t i = 0; i < comms.size(); ++i) {
    EXPECT_EQ(comms[i].rank(), ranks[i]);
    EXPECT_EQ(comms[i].world_size(), 3);
  }
  DriveEach(comms);
}

TEST(GlooInitRanks, BatchOfTwoRanksJoinsARankMadeAloneOverTheBootstrap) {
  auto store = std::make_shared<ccl::MemoryBootstrapStore>();
  const ccl::UniqueId id = GlooBackend()->GetUniqueId(store);
  const ccl::CommConfig config = ConfigWithTimeout(60000);
  ccl::Communicator alone;
  std::thread single([&] { alone = GlooBackend()->CommInitRank(3, id, 1, config, store); });
  const std::vector<int> ranks = {2, 0};
  const std::vector<int> devices = {0, 0};
  std::vector<ccl::Communicator> batch =
      GlooBackend()->CommInitRanks(3, id, ranks, devices, config, store);
  single.join();
  ASSERT_TRUE(alone.valid());
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0].rank(), 2);
  EXPECT_EQ(batch[1].rank(), 0);
  batch.push_back(std::move(alone));
  DriveEach(batch);
}

TEST(GlooInitRanks, MissingRankMakesTheBatchFailWithTimeoutNotHang) {
  const ccl::UniqueId id = GlooBackend()->GetUniqueId();
  const std::vector<int> ranks = {0, 1};
  const std::vector<int> devices = {0, 0};
  const auto start = Clock::now();
  try {
    GlooBackend()->CommInitRanks(3, id, ranks, devices, ConfigWithTimeout(1000));
    ADD_FAILURE() << "comm_init_ranks without rank 2 succeeded";
  } catch (const ccl::Error& e) {
    EXPECT_EQ(e.code(), infiniCclTimeout) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 20.0);
}

}  // namespace
}  // namespace infini::gloo_test
