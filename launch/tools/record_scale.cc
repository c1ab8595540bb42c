// Measures the run record under N launchers at once: N threads, each with
// its own connection to one TCP store (node 0's, as launchers have), join a
// fixed world of N nodes, then each is ready, then each is done, every step
// a compare-and-set of the whole record (run_record_store.h). Prints per
// phase the wall time until all N landed, the transitions tried (a lost
// compare-and-set tries again on the newer record) and the record's size.
//
//   record_scale [--nodes=8,32,128]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "infini/launch/run_record_store.h"
#include "infini/rendezvous/tcp_store.h"

namespace {

using infini::launch::RecordStep;
using infini::launch::RunMember;
using infini::launch::RunRecord;
using infini::launch::RunRecordStore;
using infini::launch::RunRules;
using infini::launch::WallTime;
using Clock = std::chrono::steady_clock;

std::vector<int> NodeCounts(int argc, char** argv) {
  std::string list = "8,32,128";
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument.rfind("--nodes=", 0) == 0) list = argument.substr(8);
  }
  std::vector<int> counts;
  std::istringstream items(list);
  for (std::string item; std::getline(items, item, ',');) counts.push_back(std::atoi(item.c_str()));
  return counts;
}

// One phase: every launcher applies its transition at once; returns the
// seconds until the last landed and counts the tries.
double Phase(std::vector<std::unique_ptr<RunRecordStore>>& homes,
             const std::function<RecordStep(const RunRecord&, int)>& transition,
             std::atomic<long>* tries) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (size_t node = 0; node < homes.size(); ++node) {
    threads.emplace_back([&, node] {
      ++ready;
      while (!go) std::this_thread::yield();
      UpdateRunRecord(*homes[node], [&](const RunRecord& record) {
        ++*tries;
        return transition(record, static_cast<int>(node));
      });
    });
  }
  while (ready != static_cast<int>(homes.size())) std::this_thread::yield();
  const auto started = Clock::now();
  go = true;
  for (std::thread& thread : threads) thread.join();
  return std::chrono::duration<double>(Clock::now() - started).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::printf("%6s %-6s %10s %8s %12s\n", "nodes", "phase", "seconds", "tries", "record_bytes");
  for (int nodes : NodeCounts(argc, argv)) {
    auto server = infini::rendezvous::TcpStoreServer::Start();
    std::vector<std::unique_ptr<infini::rendezvous::TcpStoreClient>> clients;
    std::vector<std::unique_ptr<RunRecordStore>> homes;
    for (int node = 0; node < nodes; ++node) {
      clients.push_back(infini::rendezvous::TcpStoreClient::Connect("127.0.0.1", server->port(),
                                                                    std::chrono::seconds(30)));
      homes.push_back(infini::launch::MakeKeyRunRecordStore(*clients.back()));
    }
    RunRules rules;
    rules.min_nodes = rules.max_nodes = nodes;
    const auto owner = [](int node) { return "host" + std::to_string(node) + ":1000"; };
    const WallTime now{std::chrono::milliseconds(1'700'000'000'000)};
    const std::vector<std::pair<const char*, std::function<RecordStep(const RunRecord&, int)>>>
        phases = {{"join",
                   [&](const RunRecord& record, int node) {
                     RunMember member;
                     member.owner = owner(node);
                     member.host = "host" + std::to_string(node);
                     return infini::launch::record::Join(record, rules, member, now);
                   }},
                  {"ready",
                   [&](const RunRecord& record, int node) {
                     return infini::launch::record::Ready(record, rules, owner(node));
                   }},
                  {"done", [&](const RunRecord& record, int node) {
                     return infini::launch::record::Finish(record, rules, owner(node));
                   }}};
    for (const auto& [name, transition] : phases) {
      std::atomic<long> tries{0};
      const double seconds = Phase(homes, transition, &tries);
      const size_t bytes = infini::launch::EncodeRunRecord(homes[0]->Get()).size();
      std::printf("%6d %-6s %10.3f %8ld %12zu\n", nodes, name, seconds, tries.load(), bytes);
    }
  }
  return 0;
}
