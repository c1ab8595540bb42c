// A rank for the run-level store tests: stores --bytes (default 60 MiB) under
// its rank in the run's store (INFINI_STORE_ADDR/INFINI_STORE_PORT, proving
// INFINI_RUN_TOKEN; keys under INFINI_RUN_ID/INFINI_RESTART_COUNT, as
// parallel/ namespaces them), waits for the next rank's value and reads it
// back. Exit 0 when it came back whole; 1 with one line otherwise.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "child_flags.h"

namespace {

using infini::launch::testing::Env;
using infini::launch::testing::Flag;
using infini::launch::testing::RankStore;

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = std::stoull(Flag(argc, argv, "bytes", std::to_string(size_t{60} << 20)));
  const std::chrono::seconds timeout(std::stoi(Flag(argc, argv, "timeout_s", "60")));
  const int rank = std::atoi(Env("RANK").c_str());
  const int world = std::atoi(Env("WORLD_SIZE").c_str());
  const auto start = std::chrono::steady_clock::now();
  try {
    const auto store = RankStore("/store_load", timeout);
    const std::string value(bytes, static_cast<char>('a' + rank % 26));
    store->Set("value/" + std::to_string(rank), value);
    const int next = (rank + 1) % world;
    const std::string theirs = store->Get("value/" + std::to_string(next));
    if (theirs != std::string(bytes, static_cast<char>('a' + next % 26))) {
      std::fprintf(stderr, "rank %d: rank %d's value came back changed (%zu bytes)\n", rank, next,
                   theirs.size());
      return 1;
    }
    store->Add("done", 1);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "rank %d: %s\n", rank, error.what());
    return 1;
  }
  const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  std::printf("rank %d stored %zu bytes and read rank %d's in %lld ms\n", rank, bytes,
              (rank + 1) % world, static_cast<long long>(elapsed.count()));
  return 0;
}
