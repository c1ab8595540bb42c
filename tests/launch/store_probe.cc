#include "store_probe.h"

#include <thread>

#include "infini/rendezvous/tcp_store.h"
#include "launcher_harness.h"

namespace infini::launch::testing {

bool WaitForStoreKey(int port, const std::string& key, std::chrono::seconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      auto client = rendezvous::TcpStoreClient::Connect(
          "127.0.0.1", static_cast<uint16_t>(port), std::chrono::milliseconds(500), TestToken());
      if (client->Check({key})) return true;
    } catch (const rendezvous::StoreError&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace infini::launch::testing
