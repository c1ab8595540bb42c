// A rank for the tests of whole nodes lost and replaced under
// infini_run --on_failure=shrink (shrink_nodes_test.cc), without parallel/:
// it reads the notices the launchers write into the ranks' store
// (infini/common/loss_notice.h; keys under INFINI_RUN_ID/INFINI_RESTART_COUNT).
//   A rank with INFINI_JOINING=n (a replacement node's): reads join notice n,
//   prints "joining RANK=.. WORLD_SIZE=.. LOCAL_RANK=.. GROUP_RANK=.. NNODES=..
//   INFINI_JOINING=n notice=<text>", writes <dir>/<RANK>.joined and exits 0.
//   Any other: writes <dir>/<RANK>.started, waits until --losses loss notices
//   and --joins join notices are there (writing <dir>/<RANK>.saw_<count of
//   notices> as they come), then for <dir>/stop, prints every notice and
//   exits 0. Exit 1 with one line when a wait passes --timeout_s.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "child_flags.h"
#include "infini/common/loss_notice.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace loss_notice = infini::loss_notice;

using infini::launch::testing::Env;
using infini::launch::testing::Flag;
using infini::launch::testing::RankStore;

void Touch(const std::string& path) {
  const std::string temporary = path + ".tmp";
  std::ofstream(temporary) << "1\n";
  std::rename(temporary.c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = Flag(argc, argv, "dir", ".");
  const int losses = std::atoi(Flag(argc, argv, "losses", "0").c_str());
  const int joins = std::atoi(Flag(argc, argv, "joins", "0").c_str());
  const std::chrono::seconds timeout(std::atoi(Flag(argc, argv, "timeout_s", "60").c_str()));
  const std::string rank = Env("RANK");
  try {
    const auto store = RankStore("", timeout);
    if (!Env("INFINI_JOINING").empty()) {
      const int64_t number = std::atoll(Env("INFINI_JOINING").c_str());
      std::printf(
          "joining RANK=%s WORLD_SIZE=%s LOCAL_RANK=%s GROUP_RANK=%s NNODES=%s "
          "INFINI_JOINING=%s notice=%s\n",
          rank.c_str(), Env("WORLD_SIZE").c_str(), Env("LOCAL_RANK").c_str(),
          Env("GROUP_RANK").c_str(), Env("NNODES").c_str(), Env("INFINI_JOINING").c_str(),
          store->Get(loss_notice::JoinNoticeKey(number)).c_str());
      std::fflush(stdout);
      Touch(dir + "/" + rank + ".joined");
      return 0;
    }
    Touch(dir + "/" + rank + ".started");
    const auto deadline = Clock::now() + timeout;
    int64_t seen = 0;
    while (true) {
      const int64_t lost = store->Add(loss_notice::kCountKey, 0);
      const int64_t joined = store->Add(loss_notice::kJoinCountKey, 0);
      for (; seen < lost + joined; ++seen)
        Touch(dir + "/" + rank + ".saw_" + std::to_string(seen + 1));
      if (lost >= losses && joined >= joins && access((dir + "/stop").c_str(), F_OK) == 0) {
        for (int64_t n = 1; n <= lost; ++n) {
          std::printf("rank %s sees %s=%s\n", rank.c_str(), loss_notice::NoticeKey(n).c_str(),
                      store->Get(loss_notice::NoticeKey(n)).c_str());
        }
        for (int64_t n = 1; n <= joined; ++n) {
          std::printf("rank %s sees %s=%s\n", rank.c_str(), loss_notice::JoinNoticeKey(n).c_str(),
                      store->Get(loss_notice::JoinNoticeKey(n)).c_str());
        }
        std::printf("rank %s finished WORLD_SIZE=%s\n", rank.c_str(), Env("WORLD_SIZE").c_str());
        return 0;
      }
      if (Clock::now() > deadline) {
        std::fprintf(stderr,
                     "rank %s: %lld loss and %lld join notices after %lld s (wanted %d, %d)\n",
                     rank.c_str(), static_cast<long long>(lost), static_cast<long long>(joined),
                     static_cast<long long>(timeout.count()), losses, joins);
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "rank %s: %s\n", rank.c_str(), error.what());
    return 1;
  }
}
