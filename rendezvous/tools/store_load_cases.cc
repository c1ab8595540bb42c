// bin/store_load_cases: the store and its relay under the legal loads of
// issue 32, on loopback, direct and through a relay, each case with a fresh
// node-0 store and relay in processes of their own (their peak RSS is theirs
// alone):
//   large_sets   --ranks ranks SET --value_mib MiB each at once, while a
//                probe GETs a small key and Adds a heartbeat every 100 ms;
//   batch        one kBatch of 1,536 GETs of a 1 MiB value whose client never
//                reads (direct only: a relay takes no batches), then another
//                client's 1 MiB SET;
//   waits        65,536 waits of 1 ms on distinct absent keys (64 threads),
//                then node 0's waiters left, and another client's wait;
//   get_0ms      a 0 ms GET of a key that exists and of one that does not.
// Prints one line per case and path: peak RSS of node 0's store and of the
// relay, the worst small GET and heartbeat, and the case's outcome.
//
//   store_load_cases --ranks=30 --value_mib=60
//
// It uses the public API only, so the same source built against an older
// library measures "before".
//
// With --as_rank it is instead a rank of a real 2-node infini_run
// (scripts/store_shaped_link.sh): on node 1, local ranks below --ranks SET
// --value_mib MiB each through the store the launcher lent them and local rank
// --ranks GETs a small key every 100 ms (printing the worst); on node 0, local
// rank 0 reads node 1's heartbeat counter every 50 ms (printing the longest
// time it stood still); every other rank waits for the end.

#include <arpa/inet.h>
#include <gflags/gflags.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "infini/common/flags.h"
#include "infini/rendezvous/run_token.h"
#include "infini/rendezvous/tcp_store.h"

DEFINE_int32(ranks, 30, "ranks that SET a large value at once (large_sets)");
DEFINE_int32(value_mib, 60, "MiB each rank SETs (large_sets)");
DEFINE_bool(as_rank, false,
            "be a rank of scripts/store_shaped_link.sh's run (reads RANK, GROUP_RANK, "
            "LOCAL_RANK and the store from the launcher's environment)");
DEFINE_string(cases, "large_sets,batch,waits,get_0ms", "comma-separated cases to play");

namespace {

using Clock = std::chrono::steady_clock;
using infini::rendezvous::RelayUpstream;
using infini::rendezvous::StoreError;
using infini::rendezvous::StoreTimeoutError;
using infini::rendezvous::TcpStoreClient;
using infini::rendezvous::TcpStoreServer;
using infini::rendezvous::TcpStoreServerOptions;
using std::chrono::milliseconds;

// The one version the store speaks (rendezvous/src/wire_protocol.h's
// kVersion): the raw clients below say it in their hello.
constexpr uint32_t kStoreProtocolVersion = 5;

long StatusKib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0)
      return std::strtol(line.c_str() + field.size() + 1, nullptr, 10);
  }
  return -1;
}

// A store (or relay) in a child process, forked before the driver starts
// threads; Ask() returns "port hwm_kib waiters".
class ServerProcess {
 public:
  explicit ServerProcess(const TcpStoreServerOptions& options) {
    int down[2];
    int up[2];
    if (::pipe(down) != 0 || ::pipe(up) != 0) std::exit(1);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(down[1]);
      ::close(up[0]);
      auto server = TcpStoreServer::Start(options);
      char command;
      while (::read(down[0], &command, 1) == 1) {
        char line[128];
        const int length = std::snprintf(line, sizeof(line), "%u %ld %zu\n", server->port(),
                                         StatusKib("VmHWM"), server->num_waiters());
        if (::write(up[1], line, static_cast<size_t>(length)) != length) break;
      }
      ::_exit(0);
    }
    ::close(down[0]);
    ::close(up[1]);
    to_ = down[1];
    from_ = up[0];
    port_ = static_cast<uint16_t>(Ask()[0]);
  }
  ~ServerProcess() {
    ::close(to_);
    ::close(from_);
    ::waitpid(pid_, nullptr, 0);
  }
  uint16_t port() const { return port_; }
  long PeakMib() { return Ask()[1] >> 10; }
  long Waiters() { return Ask()[2]; }

 private:
  std::vector<long> Ask() {
    std::vector<long> fields(3, -1);
    if (::write(to_, "s", 1) != 1) return fields;
    std::string line;
    char byte;
    while (::read(from_, &byte, 1) == 1 && byte != '\n') line += byte;
    std::sscanf(line.c_str(), "%ld %ld %ld", &fields[0], &fields[1], &fields[2]);
    return fields;
  }

  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
  uint16_t port_ = 0;
};

// ---- a raw client (frames by hand: the public API has no batch) ----

void PutLe(std::string* bytes, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) bytes->push_back(static_cast<char>(value >> (8 * i)));
}
std::string Frame(const std::string& body) {
  std::string frame;
  PutLe(&frame, body.size(), 4);
  return frame + body;
}
std::string Str(const std::string& text) {
  std::string bytes;
  PutLe(&bytes, text.size(), 4);
  return bytes + text;
}

class RawClient {
 public:
  RawClient(uint16_t port, uint32_t version) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    std::string hello(1, '\x01');  // kHello
    PutLe(&hello, 0x53434E49, 4);
    PutLe(&hello, version, 4);
    hello += Str(std::string(32, '\x5a'));
    ok_ = ok_ && Send(Frame(hello)) && ReadFrame().rfind('\x65', 0) == 0;  // kHelloOk
  }
  ~RawClient() { ::close(fd_); }
  bool ok() const { return ok_; }
  bool Send(const std::string& bytes) { return Send(bytes.data(), bytes.size()); }
  bool Send(const char* bytes, size_t count) {
    for (size_t sent = 0; sent < count;) {
      const ssize_t went = ::send(fd_, bytes + sent, count - sent, MSG_NOSIGNAL);
      if (went <= 0) return false;
      sent += static_cast<size_t>(went);
    }
    return true;
  }
  std::string ReadFrame() {
    std::string header = Read(4);
    if (header.size() < 4) return "";
    uint32_t length = 0;
    for (int i = 0; i < 4; ++i) length |= uint32_t{static_cast<uint8_t>(header[i])} << (8 * i);
    return Read(length);
  }

 private:
  std::string Read(size_t count) {
    std::string bytes(count, '\0');
    for (size_t got = 0; got < count;) {
      const ssize_t read = ::recv(fd_, bytes.data() + got, count - got, 0);
      if (read <= 0) return "";
      got += static_cast<size_t>(read);
    }
    return bytes;
  }
  int fd_;
  bool ok_ = false;
};

// ---- the cases ----

TcpStoreServerOptions NodeZeroOptions() {
  TcpStoreServerOptions options;
  options.host = "127.0.0.1";
  return options;
}

struct Path {
  std::unique_ptr<ServerProcess> node0;
  std::unique_ptr<ServerProcess> relay;  // unset: direct
  uint16_t port() const { return relay ? relay->port() : node0->port(); }
  const char* name() const { return relay ? "relay" : "direct"; }
};

Path MakePath(bool relayed) {
  Path path;
  path.node0 = std::make_unique<ServerProcess>(NodeZeroOptions());
  if (relayed) {
    TcpStoreServerOptions options = NodeZeroOptions();
    options.upstream = RelayUpstream{.host = "127.0.0.1",
                                     .port = path.node0->port(),
                                     .token = "",
                                     .connect_timeout = std::chrono::seconds(10)};
    path.relay = std::make_unique<ServerProcess>(options);
  }
  return path;
}

std::unique_ptr<TcpStoreClient> Client(uint16_t port, milliseconds timeout = milliseconds(60000)) {
  auto client = TcpStoreClient::Connect("127.0.0.1", port, milliseconds(10000));
  client->set_timeout(timeout);
  return client;
}

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

void Report(const char* name, Path& path, double worst_get, double worst_heartbeat,
            const std::string& outcome) {
  std::printf("%-12s %-6s %14ld %14s %12.0f %14.0f  %s\n", name, path.name(), path.node0->PeakMib(),
              path.relay ? std::to_string(path.relay->PeakMib()).c_str() : "-", worst_get,
              worst_heartbeat, outcome.c_str());
  std::fflush(stdout);
}

void LargeSets(bool relayed) {
  Path path = MakePath(relayed);
  const size_t value_bytes = size_t(FLAGS_value_mib) << 20;
  const std::string value(value_bytes, 'v');
  Client(path.node0->port())->Set("run/small", "1");
  std::atomic<int> finished{0};
  std::atomic<int> stored{0};
  std::vector<std::thread> ranks;
  const auto start = Clock::now();
  for (int i = 0; i < FLAGS_ranks; ++i) {
    ranks.emplace_back([&] {
      RawClient rank(path.port(), kStoreProtocolVersion);
      std::string head(1, '\x02');  // kSet
      head += Str("run/large");
      PutLe(&head, value_bytes, 4);
      std::string frame;
      PutLe(&frame, head.size() + value_bytes, 4);
      frame += head;
      if (rank.ok() && rank.Send(frame) && rank.Send(value.data(), value.size()) &&
          rank.ReadFrame().rfind('\x66', 0) == 0) {  // kOk
        ++stored;
      }
      ++finished;
    });
  }
  double worst_get = 0;
  double worst_heartbeat = 0;
  std::string failure;
  try {
    auto probe = Client(path.port(), milliseconds(30000));
    while (finished.load() < FLAGS_ranks) {
      auto asked = Clock::now();
      probe->Get("run/small");
      worst_get = std::max(worst_get, MsSince(asked));
      asked = Clock::now();
      probe->Add("run/heartbeat", 1);
      worst_heartbeat = std::max(worst_heartbeat, MsSince(asked));
      std::this_thread::sleep_for(milliseconds(100));
    }
  } catch (const StoreError& error) {
    failure = std::string(" probe failed: ") + error.what();
  }
  for (std::thread& rank : ranks) rank.join();
  Report("large_sets", path, worst_get, worst_heartbeat,
         std::to_string(stored.load()) + "/" + std::to_string(FLAGS_ranks) + " x " +
             std::to_string(FLAGS_value_mib) + " MiB stored in " +
             std::to_string(static_cast<long>(MsSince(start))) + " ms" + failure);
}

void UnreadBatch() {
  Path path = MakePath(false);
  const std::string value(size_t{1} << 20, 'v');
  Client(path.node0->port())->Set("run/big", value);
  RawClient reader(path.node0->port(), kStoreProtocolVersion);
  std::string batch(1, '\x0b');  // kBatch
  PutLe(&batch, 1536, 4);
  for (uint64_t tag = 0; tag < 1536; ++tag) {
    std::string get(1, '\x03');  // kGet
    get += Str("run/big");
    PutLe(&get, 0, 8);
    PutLe(&batch, tag, 8);
    batch += Str(get);
  }
  reader.Send(Frame(batch));
  std::this_thread::sleep_for(milliseconds(2000));  // handled, its replies unread
  std::string outcome;
  const auto start = Clock::now();
  try {
    Client(path.node0->port(), milliseconds(20000))->Set("run/other", value);
    outcome = "another client's 1 MiB SET took " +
              std::to_string(static_cast<long>(MsSince(start))) + " ms";
  } catch (const StoreError& error) {
    outcome = std::string("another client's 1 MiB SET failed: ") + error.what();
  }
  Report("batch", path, 0, 0, outcome);
}

void ShortWaits(bool relayed) {
  Path path = MakePath(relayed);
  Client(path.node0->port())->Set("run/present", "yes");
  std::vector<std::thread> threads;
  for (int t = 0; t < 64; ++t) {
    threads.emplace_back([&, t] {
      auto rank = Client(path.port());
      for (int i = 0; i < 1024; ++i) {
        try {
          rank->Wait({"run/absent/" + std::to_string(t) + "/" + std::to_string(i)},
                     milliseconds(1));
        } catch (const StoreError&) {
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  std::this_thread::sleep_for(milliseconds(500));
  const long left = path.node0->Waiters();
  std::string other = "another client's wait answered";
  try {
    Client(path.port())->Wait({"run/present"}, milliseconds(1000));
  } catch (const StoreError& error) {
    other = std::string("another client's wait failed: ") + error.what();
  }
  Report("waits", path, 0, 0,
         "node 0 waiters 0.5 s after 65,536 1 ms waits: " + std::to_string(left) + "; " + other);
}

void ZeroMsGet(bool relayed) {
  Path path = MakePath(relayed);
  Client(path.node0->port())->Set("run/there", "value");
  auto rank = Client(path.port(), milliseconds(0));
  std::string outcome;
  for (const char* key : {"run/there", "run/absent"}) {
    try {
      outcome += std::string(key) + "='" + rank->Get(key) + "' ";
    } catch (const StoreTimeoutError&) {
      outcome += std::string(key) + "=TIMEOUT ";
    }
  }
  Report("get_0ms", path, 0, 0, outcome);
}

// ---- --as_rank: one rank of the shaped-link run ----

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

constexpr char kStoredKey[] = "shaped/stored";
constexpr char kFinishedKey[] = "shaped/finished";
// What node 1's launcher adds to every heartbeat_interval (launch/src/
// tcp_rendezvous.cc's NodeKeys(0, "heartbeat", 1); round 0 is unprefixed).
constexpr char kNodeOneHeartbeat[] = "infini_run/heartbeat/1";

int AsRank() {
  const int node = std::atoi(Env("GROUP_RANK").c_str());
  const int local = std::atoi(Env("LOCAL_RANK").c_str());
  std::unique_ptr<TcpStoreClient> store;
  try {
    store =
        TcpStoreClient::Connect(Env("INFINI_STORE_ADDR"),
                                static_cast<uint16_t>(std::atoi(Env("INFINI_STORE_PORT").c_str())),
                                milliseconds(30000), infini::rendezvous::RunTokenFromEnvironment());
    store->set_timeout(milliseconds(300000));
    if (node == 1 && local < FLAGS_ranks) {
      const auto start = Clock::now();
      store->Set("shaped/value",
                 std::string(size_t(FLAGS_value_mib) << 20, static_cast<char>('a' + local % 26)));
      std::printf("shaped: rank %d set %d MiB in %.0f ms\n", local, FLAGS_value_mib,
                  MsSince(start));
      store->Add(kStoredKey, 1);
    } else if (node == 1 && local == FLAGS_ranks) {
      store->Set("shaped/small", "s");
      double worst = 0;
      long gets = 0;
      const auto start = Clock::now();
      while (store->Add(kStoredKey, 0) < FLAGS_ranks) {
        const auto asked = Clock::now();
        if (store->Get("shaped/small") != "s") throw StoreError("shaped/small came back changed");
        const double took = MsSince(asked);
        if (took > 1000) {
          std::printf("shaped: a small GET asked %.0f ms in took %.0f ms\n",
                      std::chrono::duration<double, std::milli>(asked - start).count(), took);
        }
        worst = std::max(worst, took);
        ++gets;
        std::this_thread::sleep_for(milliseconds(100));
      }
      std::printf("shaped: worst_small_get_ms=%.0f gets=%ld\n", worst, gets);
      store->Set(kFinishedKey, "1");
    } else if (node == 0 && local == 0) {
      int64_t last = -1;
      const auto begin = Clock::now();
      auto moved = begin;
      double longest = 0;
      while (!store->Check({kFinishedKey})) {
        const int64_t count =
            store->Check({kNodeOneHeartbeat}) ? store->Add(kNodeOneHeartbeat, 0) : -1;
        if (count != last) {
          if (last >= 0 && MsSince(moved) > 5000) {
            std::printf("shaped: node 1's heartbeat stood still %.0f ms until %.0f ms in\n",
                        MsSince(moved), MsSince(begin));
          }
          if (last >= 0) longest = std::max(longest, MsSince(moved));
          last = count;
          moved = Clock::now();
        }
        std::this_thread::sleep_for(milliseconds(50));
      }
      longest = std::max(longest, MsSince(moved));
      std::printf("shaped: longest_heartbeat_gap_ms=%.0f\n", longest);
    } else {
      store->Wait({kFinishedKey});
    }
  } catch (const StoreError& error) {
    std::printf("shaped: node %d local rank %d failed: %s\n", node, local, error.what());
    return 1;
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  infini::flags::Parse(
      &argc, &argv,
      "store_load_cases [--ranks=N] [--value_mib=M] [--cases=A,B] | --as_rank (under infini_run)",
      "Plays issue 32's loads against a node-0 store, direct and through a "
      "relay, and prints peak RSS, worst small-request latency and outcomes.");
  if (FLAGS_ranks < 1 || FLAGS_ranks > 1000) {
    std::fprintf(stderr, "store_load_cases: --ranks=%d: expected 1..1000\n", FLAGS_ranks);
    return 2;
  }
  if (FLAGS_value_mib < 1 || FLAGS_value_mib > 63) {
    std::fprintf(stderr,
                 "store_load_cases: --value_mib=%d: expected 1..63 (the store's 64 MiB "
                 "max_message_bytes)\n",
                 FLAGS_value_mib);
    return 2;
  }
  if (FLAGS_as_rank) return AsRank();
  const std::string cases = "," + FLAGS_cases + ",";
  const auto wanted = [&](const char* name) {
    return cases.find("," + std::string(name) + ",") != std::string::npos;
  };
  for (size_t start = 0; start < FLAGS_cases.size();) {
    const size_t end = std::min(FLAGS_cases.find(',', start), FLAGS_cases.size());
    const std::string name = FLAGS_cases.substr(start, end - start);
    if (name != "large_sets" && name != "batch" && name != "waits" && name != "get_0ms") {
      std::fprintf(stderr,
                   "store_load_cases: --cases='%s': expected a comma-separated list of "
                   "large_sets, batch, waits, get_0ms\n",
                   FLAGS_cases.c_str());
      return 2;
    }
    start = end + 1;
  }
  std::printf("%-12s %-6s %14s %14s %12s %14s  %s\n", "case", "path", "node0_peak_MiB",
              "relay_peak_MiB", "worst_get_ms", "worst_heartbeat", "outcome");
  for (const bool relayed : {false, true}) {
    if (wanted("large_sets")) LargeSets(relayed);
  }
  if (wanted("batch")) UnreadBatch();
  for (const bool relayed : {false, true}) {
    if (wanted("waits")) ShortWaits(relayed);
    if (wanted("get_0ms")) ZeroMsGet(relayed);
  }
  return 0;
}
