#include "store_probe.h"

#include <thread>

#include "infini/launch/run_record_store.h"
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

bool WaitForRecord(int port, const std::function<bool(const RunRecord&)>& holds,
                   std::chrono::seconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      auto client = rendezvous::TcpStoreClient::Connect(
          "127.0.0.1", static_cast<uint16_t>(port), std::chrono::milliseconds(500), TestToken());
      if (holds(MakeKeyRunRecordStore(*client)->Get())) return true;
    } catch (const rendezvous::StoreError&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

namespace {
std::function<bool(const RunRecord&)> MemberHas(int slot, bool RunMember::*flag) {
  return [slot, flag](const RunRecord& record) {
    for (const RunMember& member : record.members) {
      if (member.slot == slot) return member.*flag;
    }
    return false;
  };
}
}  // namespace

std::function<bool(const RunRecord&)> NodeDone(int slot) {
  return MemberHas(slot, &RunMember::done);
}
std::function<bool(const RunRecord&)> NodeReady(int slot) {
  return MemberHas(slot, &RunMember::ready);
}

}  // namespace infini::launch::testing
