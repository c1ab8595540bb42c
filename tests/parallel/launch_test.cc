// The rank layer in real processes: bin/parallel_check under infini_run on the
// gloo backend, for every process × thread split of 8 ranks, across two
// launchers, and when a rank misbehaves.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "trace_json.h"
#include "unused_port.h"

namespace {

using ::testing::AllOf;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kBinDir = INFINI_PARALLEL_BIN_DIR;

struct Outcome {
  int exit_code = -1;  // 128+N for signal N
  std::string output;  // stdout and stderr together
  double seconds = 0;
  bool timed_out = false;
};

// A child process with its output collected through a pipe.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      dup2(fds[1], 1);
      dup2(fds[1], 2);
      close(fds[0]);
      close(fds[1]);
      for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
      std::vector<char*> args;
      for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(fds[1]);
    fd_ = fds[0];
    fcntl(fd_, F_SETFL, O_NONBLOCK);
  }

  void Kill() { kill(-pid_, SIGKILL); }

  // Seconds until the output holds `text` (from this call), or -1 after
  // `limit`. What was read stays for Finish.
  double SecondsUntilOutput(const std::string& text, std::chrono::seconds limit) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      Drain(early_output_);
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (early_output_.find(text) != std::string::npos) return elapsed;
      if (elapsed > static_cast<double>(limit.count())) return -1;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  // Waits up to `limit`; kills the child's process group past it.
  Outcome Finish(std::chrono::seconds limit) {
    Outcome outcome;
    outcome.output = std::move(early_output_);
    const auto start = std::chrono::steady_clock::now();
    int status = 0;
    for (;;) {
      Drain(outcome.output);
      if (waitpid(pid_, &status, WNOHANG) == pid_) break;
      if (std::chrono::steady_clock::now() - start > limit) {
        outcome.timed_out = true;
        kill(-pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    Drain(outcome.output);
    close(fd_);
    outcome.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return outcome;
  }

 private:
  void Drain(std::string& output) {
    char buffer[4096];
    ssize_t got;
    while ((got = read(fd_, buffer, sizeof(buffer))) > 0) output.append(buffer, got);
  }
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string early_output_;  // read by SecondsUntilOutput
};

Outcome RunProgram(const std::vector<std::string>& argv,
                   const std::map<std::string, std::string>& env = {},
                   std::chrono::seconds limit = std::chrono::seconds(90)) {
  return Child(argv, env).Finish(limit);
}

int FreePort() { return infini::testing::UnusedPortBelowEphemeralRange(); }

bool HaveLauncher() { return access((kBinDir + "/infini_run").c_str(), X_OK) == 0; }

#define REQUIRE_LAUNCHER() \
  if (!HaveLauncher()) GTEST_SKIP() << "bin/infini_run is not built";

// Every rank printed "OK" and the run succeeded.
void ExpectEightRanksPassed(const Outcome& outcome) {
  EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  EXPECT_FALSE(outcome.timed_out);
  for (int rank = 0; rank < 8; ++rank) {
    EXPECT_THAT(outcome.output, HasSubstr("rank " + std::to_string(rank) + "/8 "))
        << outcome.output;
  }
  size_t passed = 0;
  for (size_t at = outcome.output.find(" OK (world"); at != std::string::npos;
       at = outcome.output.find(" OK (world", at + 1)) {
    ++passed;
  }
  EXPECT_EQ(passed, 8u) << outcome.output;
}

// `launcher_flags` go to infini_run, `extra` to parallel_check.
Outcome RunLocal(int processes, int threads, std::map<std::string, std::string> env = {},
                 std::vector<std::string> extra = {},
                 std::vector<std::string> launcher_flags = {}) {
  std::vector<std::string> argv = {kBinDir + "/infini_run",
                                   "--nproc_per_node=" + std::to_string(processes),
                                   "--ccl_backend=gloo"};
  argv.insert(argv.end(), launcher_flags.begin(), launcher_flags.end());
  for (const std::string& tail : {std::string("--"), kBinDir + "/parallel_check",
                                  "--threads_per_process=" + std::to_string(threads)}) {
    argv.push_back(tail);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  return RunProgram(argv, env);
}

TEST(ParallelLaunchTest, EightRanksAsEightProcessesOfOneThread) {
  REQUIRE_LAUNCHER();
  ExpectEightRanksPassed(RunLocal(8, 1));
}

TEST(ParallelLaunchTest, EightRanksAsFourProcessesOfTwoThreads) {
  REQUIRE_LAUNCHER();
  ExpectEightRanksPassed(RunLocal(4, 2));
}

TEST(ParallelLaunchTest, EightRanksAsTwoProcessesOfFourThreads) {
  REQUIRE_LAUNCHER();
  ExpectEightRanksPassed(RunLocal(2, 4));
}

TEST(ParallelLaunchTest, EightRanksAsOneProcessOfEightThreads) {
  REQUIRE_LAUNCHER();
  ExpectEightRanksPassed(RunLocal(1, 8, {}, {"--nthread_per_process=8"}));
}

TEST(ParallelLaunchTest, EightThreadsWithoutALauncherHostTheirOwnStore) {
  ExpectEightRanksPassed(RunProgram({kBinDir + "/parallel_check", "--threads_per_process=8"},
                                    {{"INFINI_CCL_BACKEND", "gloo"}}));
}

TEST(ParallelLaunchTest, EightRanksOnTwoNodesOfTwoProcessesOfTwoThreads) {
  REQUIRE_LAUNCHER();
  const Outcome help = RunProgram({kBinDir + "/infini_run", "--help"});
  if (help.output.find("rdzv_endpoint") == std::string::npos) {
    GTEST_SKIP() << "infini_run has no multi-node rendezvous (--rdzv_endpoint)";
  }
  const std::string port = std::to_string(FreePort());
  std::vector<Child> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.emplace_back(
        std::vector<std::string>{kBinDir + "/infini_run", "--nnodes=2",
                                 "--node_rank=" + std::to_string(node), "--nproc_per_node=2",
                                 "--rdzv_endpoint=127.0.0.1:" + port,
                                 "--rdzv_id=parallel_check_" + port, "--ccl_backend=gloo", "--",
                                 kBinDir + "/parallel_check", "--threads_per_process=2"},
        std::map<std::string, std::string>{});
  }
  Outcome both;
  for (Child& node : nodes) {
    Outcome outcome = node.Finish(std::chrono::seconds(90));
    EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
    both.output += outcome.output;
  }
  both.exit_code = 0;
  ExpectEightRanksPassed(both);
}

// How many TCP connections this host's endpoint 127.0.0.1:`port` holds
// open now: /proc/net/tcp's server ends (local port `port`) that are
// established. A closed client's end leaves that state at once (CLOSE_WAIT,
// in the kernel), so a sample never counts one that its server has not read
// to its end yet.
int EstablishedConnectionsTo(int port) {
  FILE* table = std::fopen("/proc/net/tcp", "r");
  if (table == nullptr) return -1;
  char line[512];
  int count = 0;
  if (std::fgets(line, sizeof(line), table) != nullptr) {  // the header
    unsigned local_address, local_port, remote_address, remote_port, state;
    while (std::fgets(line, sizeof(line), table) != nullptr) {
      if (std::sscanf(line, " %*d: %x:%x %x:%x %x", &local_address, &local_port, &remote_address,
                      &remote_port, &state) == 5 &&
          static_cast<int>(local_port) == port && state == 0x01) {
        ++count;
      }
    }
  }
  std::fclose(table);
  return count;
}

// Each node's launcher relays the store for its ranks: a cross-node group's
// unique id goes upstream once, written by its root's node (the world and
// the data-parallel groups {0,2}, {1,3}: roots on node 0), and a group of one
// node's ranks (tensor-parallel {0,1}, {2,3}) never goes upstream; each
// relay holds one upstream connection for all its ranks' requests, so that
// node 0's store holds two per node (the relay's and the launcher's own),
// never more.
TEST(ParallelLaunchTest, TwoNodesRelayCrossNodeIdsOnceAndKeepIntraNodeGroupsHome) {
  REQUIRE_LAUNCHER();
  const std::string port = std::to_string(FreePort());
  const std::string log = "/tmp/relay_log_" + port + "_" + std::to_string(getpid());
  unlink(log.c_str());
  std::vector<Child> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.emplace_back(
        std::vector<std::string>{
            kBinDir + "/infini_run", "--nnodes=2", "--node_rank=" + std::to_string(node),
            "--nproc_per_node=2", "--rdzv_endpoint=127.0.0.1:" + port, "--rdzv_id=relay_" + port,
            "--rdzv_conf=relay_log=" + log, "--ccl_backend=gloo", "--", kBinDir + "/parallel_check",
            "--tensor_parallel=2", "--pipeline_parallel=1"},
        std::map<std::string, std::string>{});
  }
  std::atomic<bool> finished{false};
  std::atomic<int> most_connections{0}, samples_with_one{0};
  std::thread sampler([&] {
    while (!finished) {
      const int now = EstablishedConnectionsTo(std::stoi(port));
      if (now > most_connections) most_connections = now;
      if (now > 0) ++samples_with_one;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  for (Child& node : nodes) {
    Outcome outcome = node.Finish(std::chrono::seconds(60));
    EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
  }
  finished = true;
  sampler.join();
  ASSERT_FALSE(HasFailure());
  EXPECT_GT(samples_with_one.load(), 0) << "the sampler never saw the store's connections";
  // Each node's relay and its launcher (kept apart, so that liveness never
  // queues behind the ranks' values): two a node.
  EXPECT_LE(most_connections.load(), 4)
      << "node 0's store held more than two connections a node (its relay's, its launcher's)";
  std::map<std::string, std::vector<std::string>> id_writers;  // key -> "node N" per write
  std::vector<std::string> lines;
  FILE* file = std::fopen(log.c_str(), "r");
  ASSERT_NE(file, nullptr) << log;
  char buffer[4096];
  while (std::fgets(buffer, sizeof(buffer), file)) lines.emplace_back(buffer);
  std::fclose(file);
  unlink(log.c_str());
  int counts_lines = 0;
  for (const std::string& line : lines) {
    EXPECT_EQ(line.find("node-local"), std::string::npos) << line;
    EXPECT_EQ(line.find("/pg/tp"), std::string::npos) << line;
    if (line.find("relay counts:") != std::string::npos) {
      ++counts_lines;
      EXPECT_NE(line.find(" connections=1\n"), std::string::npos) << line;
    }
    const size_t set = line.find(": set ");
    if (set == std::string::npos || line.find("/unique_id\n") == std::string::npos) continue;
    id_writers[line.substr(set + 6, line.size() - set - 7)].push_back(line.substr(0, set));
  }
  EXPECT_EQ(counts_lines, 2) << "one per node's relay, as its launcher ends";
  ASSERT_EQ(id_writers.size(), 3u) << "the world and two data-parallel groups";
  for (const auto& [key, writers] : id_writers) {
    EXPECT_EQ(writers, std::vector<std::string>{"node 0"}) << key;
  }
}

// torch env:// style: no launcher store, global rank 0 hosts one at
// MASTER_ADDR:MASTER_PORT.
TEST(ParallelLaunchTest, RanksStartedWithTorchrunVariablesMeetAtMasterPort) {
  const std::string port = std::to_string(FreePort());
  std::vector<Child> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back(
        std::vector<std::string>{kBinDir + "/parallel_check", "--threads_per_process=4"},
        std::map<std::string, std::string>{{"RANK", std::to_string(rank)},
                                           {"LOCAL_RANK", std::to_string(rank)},
                                           {"WORLD_SIZE", "2"},
                                           {"LOCAL_WORLD_SIZE", "2"},
                                           {"MASTER_ADDR", "127.0.0.1"},
                                           {"MASTER_PORT", port},
                                           {"INFINI_CCL_BACKEND", "gloo"}});
  }
  Outcome both;
  for (Child& rank : ranks) {
    Outcome outcome = rank.Finish(std::chrono::seconds(90));
    EXPECT_EQ(outcome.exit_code, 0) << outcome.output;
    both.output += outcome.output;
  }
  both.exit_code = 0;
  ExpectEightRanksPassed(both);
}

// The lines of `output` that hold `text`.
std::vector<std::string> LinesContaining(const std::string& output, const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end; (end = output.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string line = output.substr(start, end - start);
    if (line.find(text) != std::string::npos) lines.push_back(line);
  }
  return lines;
}

// A rank whose store is dead says so within 10 s, naming the store, the
// variables that named it and when it gives up; again every period; and ends
// with one line (exit 1) at the store's deadline. Before, it waited that long
// without a word. The deadline and the period are the user's
// (INFINI_CCL_STORE_CONNECT_TIMEOUT_S, INFINI_RUN_WAITING_NOTE_S), short here;
// their defaults (INFINI_CCL_TIMEOUT_S + 30 s, 30 s) are in store_access_test.
TEST(ParallelLaunchTest, ARankWaitingForAnUnreachableStoreSaysSoAndGivesUpWithOneLine) {
  const std::string dead_port = std::to_string(FreePort());
  const std::map<std::string, std::string> rank1 = {{"RANK", "1"},
                                                    {"LOCAL_RANK", "1"},
                                                    {"WORLD_SIZE", "2"},
                                                    {"LOCAL_WORLD_SIZE", "2"},
                                                    {"INFINI_CCL_BACKEND", "gloo"},
                                                    {"INFINI_CCL_TIMEOUT_S", "1"},
                                                    {"INFINI_CCL_STORE_CONNECT_TIMEOUT_S", "7"}};
  auto with = [&rank1](std::map<std::string, std::string> extra) {
    extra.insert(rank1.begin(), rank1.end());
    return extra;
  };
  const std::vector<std::string> check = {kBinDir + "/parallel_check"};
  // The launcher's variables, the default period: one line (at 5 s) before
  // it gives up at 7 s.
  Child launcher_store(
      check, with({{"INFINI_STORE_ADDR", "127.0.0.1"}, {"INFINI_STORE_PORT", dead_port}}));
  // torchrun's, every 3 s: at 3 s and 6 s, then it gives up at 7 s.
  Child master_store(check, with({{"MASTER_ADDR", "127.0.0.1"},
                                  {"MASTER_PORT", dead_port},
                                  {"INFINI_RUN_WAITING_NOTE_S", "3"}}));
  const std::string waiting = "waiting for the run's store at 127.0.0.1:" + dead_port;
  const double first_line = launcher_store.SecondsUntilOutput(waiting, std::chrono::seconds(10));
  EXPECT_GE(first_line, 0) << "no line within 10 s";
  EXPECT_LE(first_line, 10);
  EXPECT_GE(master_store.SecondsUntilOutput(waiting, std::chrono::seconds(5)), 0);

  const Outcome launcher = launcher_store.Finish(std::chrono::seconds(60));
  EXPECT_FALSE(launcher.timed_out);
  EXPECT_EQ(launcher.exit_code, 1) << launcher.output;
  EXPECT_GT(launcher.seconds + first_line, 6) << launcher.output;
  const std::vector<std::string> launcher_waits = LinesContaining(launcher.output, waiting);
  ASSERT_EQ(launcher_waits.size(), 1u) << launcher.output;
  EXPECT_THAT(launcher_waits[0], AllOf(HasSubstr("[rank 1 "),
                                       HasSubstr(" (INFINI_STORE_ADDR/INFINI_STORE_PORT) since "),
                                       HasSubstr("(last try: Connection refused); gives up at "),
                                       HasSubstr(" s (INFINI_CCL_STORE_CONNECT_TIMEOUT_S=7)")));
  // Then one line at the end, and nothing else.
  const std::vector<std::string> launcher_lines = LinesContaining(launcher.output, "");
  ASSERT_EQ(launcher_lines.size(), 2u) << launcher.output;
  EXPECT_THAT(launcher_lines[1],
              AllOf(HasSubstr("parallel_check: could not connect to store at 127.0.0.1:" +
                              dead_port + " after 7s: Connection refused"),
                    HasSubstr("INFINI_STORE_ADDR/INFINI_STORE_PORT")));

  const Outcome master = master_store.Finish(std::chrono::seconds(60));
  EXPECT_EQ(master.exit_code, 1) << master.output;
  const std::vector<std::string> master_waits = LinesContaining(master.output, waiting);
  ASSERT_EQ(master_waits.size(), 2u) << master.output;  // at 3 s and 6 s
  EXPECT_THAT(master_waits[0], AllOf(HasSubstr(" (MASTER_ADDR/MASTER_PORT) since "),
                                     HasSubstr(" s (INFINI_CCL_STORE_CONNECT_TIMEOUT_S=7)")));
  // 3 s after the first (a loaded machine may wake half a second late).
  EXPECT_THAT(master_waits[1], AnyOf(HasSubstr(", 6 s ago "), HasSubstr(", 7 s ago ")));
  EXPECT_THAT(master.output,
              AllOf(HasSubstr("after 7s: Connection refused"), Not(HasSubstr("terminate called"))));
}

// Whether a TCP connection to address:port is accepted now.
bool Accepts(const std::string& address, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, address.c_str(), &target.sin_addr);
  const bool accepted = connect(fd, reinterpret_cast<sockaddr*>(&target), sizeof(target)) == 0;
  close(fd);
  return accepted;
}

// Global rank 0 of a run that spans hosts (2 nodes of one rank) hosts the
// store at MASTER_ADDR=127.0.0.2: it listens there only, so another local
// address does not answer on its port. Before, a loopback MASTER_ADDR of a
// multi-node run meant every interface.
TEST(ParallelLaunchTest, RankZerosStoreListensOnMasterAddrAloneAndNotOnAnotherAddress) {
  const int port = FreePort();
  Child rank0({kBinDir + "/parallel_check"}, {{"RANK", "0"},
                                              {"LOCAL_RANK", "0"},
                                              {"WORLD_SIZE", "2"},
                                              {"LOCAL_WORLD_SIZE", "1"},
                                              {"GROUP_RANK", "0"},
                                              {"MASTER_ADDR", "127.0.0.2"},
                                              {"MASTER_PORT", std::to_string(port)},
                                              {"INFINI_CCL_TIMEOUT_S", "20"},
                                              {"GLOO_SOCKET_IFNAME", "lo"},
                                              {"INFINI_CCL_BACKEND", "gloo"}});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!Accepts("127.0.0.2", port) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(Accepts("127.0.0.2", port)) << "rank 0's store never listened on 127.0.0.2";
  EXPECT_FALSE(Accepts("127.0.0.3", port)) << "rank 0's store answers on 127.0.0.3 too";
  EXPECT_FALSE(Accepts("127.0.0.1", port)) << "rank 0's store answers on 127.0.0.1 too";
  rank0.Kill();
  const Outcome outcome = rank0.Finish(std::chrono::seconds(10));
  EXPECT_THAT(outcome.output, Not(HasSubstr("every interface"))) << outcome.output;
}

// MASTER_ADDR that is no address of this host: every interface, and one line
// that says so naming MASTER_ADDR.
TEST(ParallelLaunchTest, RankZeroWarnsNamingMasterAddrWhenItMustListenOnEveryInterface) {
  const int port = FreePort();
  Child rank0({kBinDir + "/parallel_check"}, {{"RANK", "0"},
                                              {"LOCAL_RANK", "0"},
                                              {"WORLD_SIZE", "2"},
                                              {"LOCAL_WORLD_SIZE", "1"},
                                              {"GROUP_RANK", "0"},
                                              {"MASTER_ADDR", "198.51.100.7"},  // TEST-NET-2
                                              {"MASTER_PORT", std::to_string(port)},
                                              {"INFINI_CCL_TIMEOUT_S", "20"},
                                              {"GLOO_SOCKET_IFNAME", "lo"},
                                              {"INFINI_CCL_BACKEND", "gloo"}});
  EXPECT_GE(rank0.SecondsUntilOutput("every interface", std::chrono::seconds(20)), 0);
  rank0.Kill();
  const Outcome outcome = rank0.Finish(std::chrono::seconds(10));
  const std::vector<std::string> warnings = LinesContaining(outcome.output, "every interface");
  ASSERT_EQ(warnings.size(), 1u) << outcome.output;
  EXPECT_THAT(warnings[0], AllOf(HasSubstr("MASTER_ADDR='198.51.100.7' is not an address of this "
                                           "host: the store listens on every interface (0.0.0.0:" +
                                           std::to_string(port) + ")"),
                                 HasSubstr("[rank 0 ")));
}

// Processes whose environment holds `mark` (a /proc scan: descendants,
// daemons and ranks in the launcher's PID namespace included).
std::vector<pid_t> ProcessesMarked(const std::string& mark) {
  std::vector<pid_t> found;
  const Outcome listing =
      RunProgram({"/bin/sh", "-c", "grep -l -a -s -F '" + mark + "' /proc/[0-9]*/environ || true"});
  size_t start = 0;
  for (size_t end; (end = listing.output.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string path = listing.output.substr(start, end - start);
    if (path.rfind("/proc/", 0) == 0) found.push_back(std::atoi(path.c_str() + 6));
  }
  return found;
}

bool NoProcessMarked(const std::string& mark, std::chrono::seconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!ProcessesMarked(mark).empty()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

std::string UniqueMark() {
  return "PARALLEL_TEST_MARK_" + std::to_string(getpid()) + "_" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

// Lines a rank printed ("[rankN]:..." as infini_run prefixes them) that
// hold `text`.
int RankLinesContaining(const std::string& output, const std::string& text) {
  int count = 0;
  size_t start = 0;
  for (size_t end; (end = output.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string line = output.substr(start, end - start);
    if (line.rfind("[rank", 0) == 0 && line.find(text) != std::string::npos) ++count;
  }
  return count;
}

// Rank 3 (process 1, whose other thread rank 2 waits) skips all_reduce #1:
// the report and the launcher's summary name it, not the first watchdog.
TEST(ParallelLaunchTest, WatchdogEndsARunWhereOneRankSkipsACollective) {
  REQUIRE_LAUNCHER();
  const int timeout_s = 5;
  const Outcome outcome = RunLocal(4, 2, {{"INFINI_CCL_TIMEOUT_S", std::to_string(timeout_s)}},
                                   {"--mode=hang", "--faulty_rank=3"});
  EXPECT_FALSE(outcome.timed_out) << outcome.output;
  EXPECT_EQ(outcome.exit_code, 124) << outcome.output;
  EXPECT_LT(outcome.seconds, timeout_s + 30.0) << outcome.output;
  EXPECT_THAT(outcome.output,
              AllOf(HasSubstr("all_reduce #1 on group 'world'"),
                    HasSubstr("did not complete within INFINI_CCL_TIMEOUT_S=5"),
                    HasSubstr("exiting with 124"),
                    HasSubstr("infini_ccl flight recorder: behind: process rank 1 (global rank 3) "
                              "on group 'world': last on this group: all_reduce #0 (float32 x 4, "
                              "done); the others are at #1"),
                    HasSubstr("infini_run: stuck rank: rank 1 (local rank 1")))
      << outcome.output;
  // One report for the run (the summary may quote it again).
  EXPECT_EQ(RankLinesContaining(outcome.output, "infini_ccl flight recorder: behind:"), 1)
      << outcome.output;
}

// Rank 1 never makes the world group: the others' init ends at the
// timeout, and the line names the group and the rank that never arrived.
TEST(ParallelLaunchTest, InitEndsAtTheTimeoutNamingTheRankThatNeverArrived) {
  REQUIRE_LAUNCHER();
  const int timeout_s = 4;
  const Outcome outcome = RunLocal(3, 1, {{"INFINI_CCL_TIMEOUT_S", std::to_string(timeout_s)}},
                                   {"--mode=skip_init", "--faulty_rank=1"});
  EXPECT_FALSE(outcome.timed_out) << outcome.output;
  EXPECT_EQ(outcome.exit_code, 124) << outcome.output;
  EXPECT_LT(outcome.seconds, timeout_s + 30.0) << outcome.output;
  EXPECT_THAT(outcome.output,
              AllOf(HasSubstr("init #0 on group 'world'"),
                    HasSubstr("did not complete within INFINI_CCL_TIMEOUT_S=4"),
                    HasSubstr("1 of 3 members of group 'world' never arrived at its init: "
                              "global rank 1 ")))
      << outcome.output;
}

#ifdef KVTEST_PLUGIN_PATH
// A backend whose init never returns (nothing to abort: no handle yet):
// every member arrived, so the line blames the backend's init.
TEST(ParallelLaunchTest, InitThatHangsInTheBackendEndsAtTheTimeoutNamingTheBackend) {
  REQUIRE_LAUNCHER();
  const int timeout_s = 4;
  const std::vector<std::string> argv = {kBinDir + "/infini_run",
                                         "--nproc_per_node=2",
                                         std::string("--ccl_backend=") + KVTEST_PLUGIN_PATH,
                                         "--",
                                         kBinDir + "/parallel_check",
                                         "--mode=hang",
                                         "--faulty_rank=9"};
  const Outcome outcome = RunProgram(
      argv, {{"INFINI_CCL_TIMEOUT_S", std::to_string(timeout_s)}, {"KVTEST_FAULT", "hang_init"}});
  EXPECT_FALSE(outcome.timed_out) << outcome.output;
  EXPECT_EQ(outcome.exit_code, 124) << outcome.output;
  EXPECT_LT(outcome.seconds, timeout_s + 30.0) << outcome.output;
  EXPECT_THAT(outcome.output,
              AllOf(HasSubstr("init #0 on group 'world'"),
                    HasSubstr("every member of group 'world' arrived at its init; backend "
                              "'kvtest' did not finish making the communicator")))
      << outcome.output;
}

// A plugin whose process-wide init entry never returns: before this, every
// rank hung forever, since the entry runs while loading, before any group
// exists; now the watchdog bounds the load like any other step.
TEST(ParallelLaunchTest, APluginInitThatNeverReturnsEndsAtTheTimeoutInOneLine) {
  const int timeout_s = 2;
  const Outcome outcome = RunProgram(
      {kBinDir + "/parallel_check", std::string("--ccl_backend=") + KVTEST_PLUGIN_PATH},
      {{"INFINI_CCL_TIMEOUT_S", std::to_string(timeout_s)}, {"KVTEST_FAULT", "hang_load"}},
      std::chrono::seconds(60));
  EXPECT_FALSE(outcome.timed_out) << outcome.output;
  EXPECT_EQ(outcome.exit_code, 124) << outcome.output;
  EXPECT_LT(outcome.seconds, timeout_s + 10.0) << outcome.output;
  EXPECT_THAT(outcome.output,
              HasSubstr(std::string("loading backend '") + KVTEST_PLUGIN_PATH +
                        "' (global rank 0) did not complete within INFINI_CCL_TIMEOUT_S=2 s (its "
                        "plugin's init, get_device_count or set_device entry never returned)"))
      << outcome.output;
}
#endif

// Rank 1 of 3 is stopped (SIGSTOP) between two all_reduces: ranks 0 and 2
// time out; it publishes nothing, so the report names it as the one behind.
// Traced, the watchdog's firing and its aborts are on the timeline of the
// ranks that fired (docs/tracing.md, "Watchdog and recovery events").
TEST(ParallelLaunchTest, FlightRecorderNamesAStoppedRankAndSoDoesTheLauncher) {
  REQUIRE_LAUNCHER();
  const std::string mark = UniqueMark();
  char trace_pattern[] = "/tmp/watchdog_trace_XXXXXX";
  const std::string trace_dir = mkdtemp(trace_pattern) != nullptr ? trace_pattern : "/tmp";
  const Outcome outcome =
      RunLocal(3, 1, {{"INFINI_CCL_TIMEOUT_S", "2"}, {mark, "1"}},
               {"--mode=stop", "--faulty_rank=1"}, {"--trace_dir=" + trace_dir});
  std::printf("FLIGHT stopped rank: exit %d after %.2f s\n", outcome.exit_code, outcome.seconds);
  EXPECT_FALSE(outcome.timed_out) << outcome.output;
  EXPECT_EQ(outcome.exit_code, 124) << outcome.output;
  EXPECT_LT(outcome.seconds, 30.0) << outcome.output;
  EXPECT_THAT(
      outcome.output,
      AllOf(HasSubstr("infini_ccl flight recorder: group 'world' (global ranks 0, 1, 2): records "
                      "of process ranks 0, 2 gathered, none from global ranks 1"),
            HasSubstr("infini_ccl flight recorder: waiting: global ranks 0, 2 in all_reduce #1 "
                      "(float32 x 4, started"),
            HasSubstr("infini_ccl flight recorder: behind: process rank 1 (global rank 1) on "
                      "group 'world': no record"),
            HasSubstr("infini_run: stuck rank: rank 1 (local rank 1"),
            Not(HasSubstr("terminate called"))))
      << outcome.output;
  EXPECT_EQ(RankLinesContaining(outcome.output, "infini_ccl flight recorder: behind:"), 1)
      << outcome.output;
  // The launcher read the stopped rank's stacks before it stopped it
  // (launch/src/stack_dump.cc): the frame that raised SIGSTOP is named.
  if (access("/usr/bin/gdb", X_OK) == 0) {
    EXPECT_THAT(outcome.output, AllOf(HasSubstr("infini_run: stacks of rank 1 (local rank 1, pid "),
                                      HasSubstr("before infini_run stopped it:"),
                                      HasSubstr("(anonymous namespace)::Misbehave at "),
                                      HasSubstr("parallel_check.cc:")))
        << outcome.output;
  } else {
    EXPECT_THAT(outcome.output, HasSubstr("not read: 'gdb' not found in PATH")) << outcome.output;
  }
  EXPECT_TRUE(NoProcessMarked(mark, std::chrono::seconds(10)));

  // The first rank to fire ends the run; the other may be stopped by the
  // launcher before it fires, so at least one of ranks 0 and 2 holds it.
  const infini::testing::Json trace = infini::testing::ReadJsonFile(trace_dir + "/trace.json");
  const auto timeouts = infini::testing::FaultEventsOf(trace, "timeout");
  const auto aborts = infini::testing::FaultEventsOf(trace, "abort");
  EXPECT_FALSE(timeouts.empty()) << infini::testing::DescribeFaultEvents(trace);
  for (const auto& [lane, events] : timeouts) {
    EXPECT_TRUE(lane == 0 || lane == 2) << lane;
    const infini::testing::Json& event = *events.at(0);
    EXPECT_EQ(event["ph"].text, "i");
    EXPECT_EQ(event["cat"].text, "watchdog");
    EXPECT_EQ(event["args"]["group"].text, "world");
    EXPECT_EQ(event["args"]["op"].text, "all_reduce");
    EXPECT_EQ(event["args"]["seq"].number, 1);
    EXPECT_EQ(event["args"]["timeout_s"].number, 2);
    EXPECT_FALSE(event["args"]["why"].text.empty());
    ASSERT_TRUE(aborts.count(lane)) << infini::testing::DescribeFaultEvents(trace);
    EXPECT_EQ((*aborts.at(lane)[0])["args"]["why"].text, "watchdog");
  }
  // The flight recorder's report, line by line, on the reporter's lane.
  bool behind_named = false;
  for (const auto& [lane, events] : infini::testing::FaultEventsOf(trace, "hang_report")) {
    for (const infini::testing::Json* event : events) {
      behind_named = behind_named ||
                     (*event)["args"]["line"].text.find("behind: process rank 1 (global rank 1)") !=
                         std::string::npos;
    }
  }
  EXPECT_TRUE(behind_named) << infini::testing::DescribeFaultEvents(trace);
  RunProgram({"/bin/rm", "-rf", trace_dir});
}

TEST(ParallelLaunchTest, DebugModeStopsRanksThatCallDifferentCollectives) {
  REQUIRE_LAUNCHER();
  const Outcome outcome =
      RunLocal(4, 1, {{"INFINI_CCL_DEBUG", "DETAIL"}, {"INFINI_CCL_TIMEOUT_S", "30"}},
               {"--mode=mismatch", "--faulty_rank=2"});
  EXPECT_NE(outcome.exit_code, 0);
  EXPECT_LT(outcome.seconds, 25.0) << outcome.output;
  EXPECT_THAT(outcome.output,
              AllOf(HasSubstr("collective mismatch on process group 'world'"),
                    HasSubstr("global rank 2 called all_gather(dtype=float32, count=4)")));
}

TEST(ParallelLaunchTest, EachProcessWritesALogFileWhoseLinesNameTheRank) {
  REQUIRE_LAUNCHER();
  char pattern[] = "/tmp/parallel_logs_XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string log_dir = pattern;
  const Outcome outcome =
      RunLocal(2, 2, {{"INFINI_CCL_LOG_DIR", log_dir}, {"INFINI_CCL_DEBUG", "INFO"}});
  ASSERT_EQ(outcome.exit_code, 0) << outcome.output;
  const Outcome listing = RunProgram({"/bin/sh", "-c", "cat " + log_dir + "/proc1.INFO.*"});
  EXPECT_THAT(listing.output,
              AllOf(HasSubstr("[rank 2 local 2 pid "), HasSubstr("[rank 3 local 3 pid "),
                    HasSubstr("process group 'world' [0, 1, 2, 3]: group rank 3"),
                    Not(HasSubstr("[rank 0 local"))));
  RunProgram({"/bin/rm", "-rf", log_dir});
}

TEST(ParallelLaunchTest, BadEnvironmentIsOneLineNamingTheVariable) {
  const Outcome outcome =
      RunProgram({kBinDir + "/parallel_check"}, {{"RANK", "one"},
                                                 {"LOCAL_RANK", "0"},
                                                 {"WORLD_SIZE", "2"},
                                                 {"LOCAL_WORLD_SIZE", "2"},
                                                 {"MASTER_PORT", "29999"},
                                                 {"INFINI_CCL_BACKEND", "gloo"}});
  EXPECT_EQ(outcome.exit_code, 1);
  EXPECT_THAT(outcome.output, AllOf(HasSubstr("RANK='one': expected a non-negative integer"),
                                    Not(HasSubstr("terminate called"))));
}

}  // namespace
