// Where the run record (run_record.h) lives: read, compare-and-set and
// watched whole, the way torchrun's backends hold its _RendezvousState. Three
// places: in this process (a single-node run), node 0's TCP store and etcd;
// one contract test suite (tests/launch/run_record_store_test.cc) runs
// against each.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

#include "infini/launch/run_record.h"

namespace infini::rendezvous {
class Store;
struct EtcdStoreOptions;
}  // namespace infini::rendezvous

namespace infini::launch {

// A compare-and-set's answer: whether `record` is what this caller stored,
// or (not stored) the newer record that another stored first.
struct RecordWrite {
  bool stored = false;
  RunRecord record;
};

class RunRecordStore {
 public:
  virtual ~RunRecordStore() = default;

  // The stored record; a default one (version 0) before the first write.
  // Throws rendezvous::StoreError, and RunRecordError for a malformed one.
  virtual RunRecord Get() = 0;
  // Stores `desired` as version `expected_version` + 1 if the stored record
  // is still version `expected_version` (0: none stored yet); the version
  // `desired` carries is ignored.
  virtual RecordWrite CompareAndSet(int64_t expected_version, const RunRecord& desired) = 0;
  // Returns the stored record as soon as its version is past
  // `after_version`, or at `deadline` whatever is stored then (the caller
  // reads the version). Waits without polling.
  virtual RunRecord Watch(int64_t after_version,
                          std::chrono::steady_clock::time_point deadline) = 0;
  // Ends the threads the home runs for its watch (etcd's); reads and writes
  // still work, Watch waits out its deadline. For a process about to exit.
  virtual void StopBackground() {}
};

// In this process: a single-node run's record.
std::unique_ptr<RunRecordStore> MakeLocalRunRecordStore();

// On a key-value store (node 0's TCP store): the record is one key,
// "infini_run/record", holding "<write id> <JSON>" and compare-and-set with
// the store's CompareSet on that value. The write id (the handle's random id
// and its count of writes) makes every written value unique, even where two
// launchers make the same change to the same version, so comparing values is
// comparing versions. A write of version v also sets
// "infini_run/record_version/<v>" (and v - 1's, should its writer have died
// before it) and removes v - 16's; Watch waits on those. `store` must
// outlive the result.
std::unique_ptr<RunRecordStore> MakeKeyRunRecordStore(rendezvous::Store& store);

// On etcd, through a connection of its own without a lease (the record must
// outlive whichever launcher wrote it last), under `options.key_prefix`: the
// key "infini_run/record" holding the JSON, compare-and-set in one
// transaction on its mod_revision, followed by the connection's watch.
// Throws rendezvous::StoreError when no endpoint answers.
std::unique_ptr<RunRecordStore> MakeEtcdRunRecordStore(rendezvous::EtcdStoreOptions options);

// One transition applied through `store`: read, `transition`, compare-and-
// set, and again on the newer record while another launcher wrote first
// (torchrun's _BackendRendezvousStateHolder.sync). A transition that leaves
// the record as it was writes nothing. Returns the step as applied to the
// record that was stored.
RecordStep UpdateRunRecord(RunRecordStore& store,
                           const std::function<RecordStep(const RunRecord&)>& transition);

}  // namespace infini::launch
