#include "group_state.h"

#include "flight_recorder.h"
#include "infini/ccl/trace.h"
#include "infini/rendezvous/store.h"
#include "loss_watcher.h"

namespace infini::parallel::internal {

std::string MemberList(const std::vector<int>& members) {
  std::string text;
  for (size_t i = 0; i < members.size(); ++i) {
    text += (i == 0 ? "" : ", ") + std::to_string(members[i]);
  }
  return text;
}

GroupState::~GroupState() {
  if (watched) Watchdog::Instance().RemoveGroup(this);
  if (environment.registry != nullptr) environment.registry->Remove(this);
  if (!comm.valid()) return;
  // After a failure, a peer may never answer: destroy would wait forever.
  bool failed = aborted.load() || *revoked_for_loss;
  if (!failed) {
    const infiniCclResult_t error = AsyncError();
    failed = error != infiniCclSuccess && error != infiniCclInProgress;
  }
  try {
    if (failed) {
      AbortOnce("destroyed after a failure");
    } else {
      std::lock_guard<std::mutex> lock(abort_mutex);
      registrations->DeregisterAll();
      comm.Destroy();
    }
  } catch (...) {
    // A destructor cannot report; the process is ending or moving on.
  }
}

infiniCclResult_t GroupState::AsyncError() {
  // Under shrink a peer's loss is no reason to end the process: the failed
  // collective throws PeerLostError and the program recovers.
  if (!comm.valid() || environment.shrink_on_failure) return infiniCclSuccess;
  try {
    return comm.GetAsyncError();
  } catch (const ccl::Error&) {
    return infiniCclSuccess;
  }
}

void GroupState::AbortFromWatchdog() { AbortOnce("watchdog"); }

void GroupState::ReportHang(const std::function<void(const std::string&)>& print) {
  HangScene scene;
  scene.store_key = store_key;
  scene.name = name;
  scene.members = members;
  scene.threads_per_process = environment.rank.threads_per_process();
  scene.proc_rank = environment.rank.global_proc_rank();
  // Its own connection: the rank's may be inside a call on another thread.
  std::shared_ptr<rendezvous::Store> store = environment.connect_store();
  store->set_timeout(kFlightGatherWindow);
  GatherHangReport(*store, scene, kFlightGatherWindow, print);
}

void GroupState::RevokeForLoss() {
  std::lock_guard<std::mutex> lock(abort_mutex);
  if (revoked_for_loss->exchange(true) || aborted || !comm.valid()) return;
  // Deregistering on a revoked communicator could wait for its lost peer.
  registrations->ForgetAll();
  const bool revoke = environment.backend->capabilities().revoke();
  if (ccl::trace::Enabled()) {
    const int64_t now = ccl::trace::NowNs();
    // Only what no other thread changes: a shrink renumbers the members
    // outside abort_mutex, and a revoke may come from the loss watcher.
    ccl::trace::RecordFault(TraceLane(), ccl::trace::Category::kRecovery, "revoke", name,
                            ccl::trace::Facts().Add("how", revoke ? "comm_revoke" : "comm_abort"),
                            now, now);
  }
  try {
    if (revoke) {
      comm.Revoke();
    } else {
      // Without comm_revoke only an abort ends the outstanding work; the
      // group cannot be shrunk then, and RecoverFromLoss says so.
      aborted = true;
      comm.Abort();
    }
  } catch (const ccl::Error&) {
    // Already failing: the collective that waits on it throws anyway.
  }
}

void GroupState::AbortOnce(const char* why) {
  std::lock_guard<std::mutex> lock(abort_mutex);
  if (ccl::trace::Enabled() && comm.valid() && !aborted) {
    const int64_t now = ccl::trace::NowNs();
    ccl::trace::RecordFault(TraceLane(), ccl::trace::Category::kRecovery, "abort", name,
                            ccl::trace::Facts().Add("why", why), now, now);
  }
  aborted = true;
  registrations->ForgetAll();
  if (comm.valid()) comm.Abort();
}

}  // namespace infini::parallel::internal
