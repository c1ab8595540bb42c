// The fault matrix's store cases (docs/reliability.md), at the level of a
// run: a 2-node infini_run whose four ranks each store one 60 MiB value in
// the run's store at once, and a 2-node run started while a stranger floods
// its rendezvous port from the run's own host. Each prints one
// "FAULT <case> exit=<code> stop_ms=<ms>" line for the table.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "launcher_harness.h"

namespace infini::launch::testing {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

void Report(const std::string& name, int exit_code, long long stop_ms) {
  printf("FAULT %s exit=%d stop_ms=%lld\n", name.c_str(), exit_code, stop_ms);
}

long long Ms(Clock::duration duration) {
  return std::chrono::duration_cast<milliseconds>(duration).count();
}

// Two nodes of two ranks meeting at `port`; each rank runs store_load_child.
std::vector<std::string> StoreRun(int port, const std::string& run_id, int node_rank,
                                  size_t value_bytes) {
  return {"--nnodes=2",
          "--nproc_per_node=2",
          "--rdzv_endpoint=127.0.0.1:" + std::to_string(port),
          "--rdzv_id=" + run_id,
          "--rdzv_timeout=60",
          "--rdzv_conf=heartbeat_timeout=10",
          "--term_timeout=2",
          "--node_rank=" + std::to_string(node_rank),
          "--",
          STORE_LOAD_CHILD_PATH,
          "--bytes=" + std::to_string(value_bytes),
          "--timeout_s=60"};
}

// The probe's case: four ranks each store one legal 60 MiB value at once (the
// old store froze for about 5 minutes and node 1 ended with "node 0's
// infini_run died or stalled").
TEST(FaultMatrix, FourRanksStoringSixtyMiBEachFinishATwoNodeRun) {
  const int port = FreePort();
  const auto start = Clock::now();
  LauncherProcess node0(StoreRun(port, "large-values", 0, size_t{60} << 20));
  LauncherProcess node1(StoreRun(port, "large-values", 1, size_t{60} << 20));
  const LauncherResult result0 = node0.Wait(seconds(120));
  const LauncherResult result1 = node1.Wait(seconds(120));
  const auto elapsed = Clock::now() - start;
  Report("four_ranks_60mib_values", result0.exit_code, Ms(elapsed));
  EXPECT_EQ(result0.exit_code, 0) << result0.err;
  EXPECT_EQ(result1.exit_code, 0) << result1.err;
  EXPECT_LT(elapsed, seconds(60));
  EXPECT_TRUE(NoProcessLeft());
}

// A stranger's process that keeps `connections` connections to 127.0.0.1:port
// open, reopening the oldest as fast as it goes (a few a millisecond), some
// of them after a hello, none ever proving a token. Told by the pipe once it
// has opened them all; stops when the test closes its pipe.
class Flooder {
 public:
  Flooder(int port, size_t connections) {
    int to_child[2];
    int from_child[2];
    EXPECT_EQ(::pipe(to_child), 0);
    EXPECT_EQ(::pipe(from_child), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(to_child[1]);
      ::close(from_child[0]);
      Flood(port, connections, to_child[0], from_child[1]);
      ::_exit(0);
    }
    ::close(to_child[0]);
    ::close(from_child[1]);
    to_child_ = to_child[1];
    from_child_ = from_child[0];
  }
  ~Flooder() {
    ::close(to_child_);
    ::close(from_child_);
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }

  bool WaitUntilAllOpened(milliseconds bound) {
    pollfd descriptor{.fd = from_child_, .events = POLLIN, .revents = 0};
    char byte = 0;
    return ::poll(&descriptor, 1, static_cast<int>(bound.count())) == 1 &&
           ::read(from_child_, &byte, 1) == 1;
  }

 private:
  static void Flood(int port, size_t connections, int stop, int opened) {
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    // A hello of the store's protocol version (5) with a nonce that carries no ticket.
    std::string hello = {'\x2d', 0, 0, 0, 1, 'I', 'N', 'C', 'S', 5, 0, 0, 0, 32, 0, 0, 0};
    hello.append(32, 'x');
    std::vector<int> ring(connections, -1);
    size_t next = 0;
    size_t made = 0;
    for (;;) {
      if (made % 64 == 0) {
        pollfd descriptor{.fd = stop, .events = POLLIN, .revents = 0};
        if (::poll(&descriptor, 1, 0) != 0) return;  // the test closed its end
      }
      if (ring[next] >= 0) ::close(ring[next]);
      ring[next] = -1;
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
        if (fd >= 0) ::close(fd);
        ::usleep(1000);  // not listening yet, or out of descriptors
        continue;
      }
      if (made % 2 == 0) (void)!::send(fd, hello.data(), hello.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ring[next] = fd;
      next = (next + 1) % connections;
      if (++made == connections) (void)!::write(opened, "x", 1);
      if (made > connections) ::usleep(200);
    }
  }

  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
};

// The probe's other case: two processes of a stranger on the run's host open
// 12,000 connections each to the rendezvous port (the old store, out of
// descriptors, dropped the nodes and ranks that came after, and the run
// exited 1). The store sheds the stranger's oldest connections; node 1, its
// ranks and node 0's hold the token and are never shed.
TEST(FaultMatrix, ARunStartsAndFinishesWhileAStrangerFloodsItsPort) {
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_max < 20000) GTEST_SKIP() << "hard open-file limit " << limit.rlim_max;
  const int port = FreePort();
  LauncherProcess node0(StoreRun(port, "flooded", 0, 1024));
  Flooder first(port, 12000);
  Flooder second(port, 12000);
  const bool flooded =
      first.WaitUntilAllOpened(seconds(30)) && second.WaitUntilAllOpened(seconds(30));
  const auto start = Clock::now();
  LauncherProcess node1(StoreRun(port, "flooded", 1, 1024));
  const LauncherResult result1 = node1.Wait(seconds(90));
  const LauncherResult result0 = node0.Wait(seconds(30));
  const auto elapsed = Clock::now() - start;
  Report("flooded_rendezvous_port", result1.exit_code, Ms(elapsed));
  EXPECT_TRUE(flooded) << "the strangers did not open their 24,000 connections";
  EXPECT_EQ(result0.exit_code, 0) << result0.err;
  EXPECT_EQ(result1.exit_code, 0) << result1.err;
  EXPECT_LT(elapsed, seconds(60));
  EXPECT_TRUE(NoProcessLeft());
}

}  // namespace
}  // namespace infini::launch::testing
