// The run record's three homes: this process, one key of node 0's TCP store
// (compare-and-set on the value), one key of etcd (on its mod_revision).
#include "infini/launch/run_record_store.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>

#include "infini/rendezvous/etcd_store.h"
#include "infini/rendezvous/store.h"

namespace infini::launch {
namespace {

using Clock = std::chrono::steady_clock;

RunRecord Versioned(RunRecord record, int64_t version) {
  record.version = version;
  return record;
}

class LocalRunRecordStore : public RunRecordStore {
 public:
  RunRecord Get() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return record_;
  }

  RecordWrite CompareAndSet(int64_t expected_version, const RunRecord& desired) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (record_.version != expected_version) return {false, record_};
    record_ = Versioned(desired, expected_version + 1);
    changed_.notify_all();
    return {true, record_};
  }

  RunRecord Watch(int64_t after_version, Clock::time_point deadline) override {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_until(lock, deadline, [&] { return record_.version > after_version; });
    return record_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  RunRecord record_;
};

const char* const kRecordKey = "infini_run/record";

// UpdateRunRecord's wait after a lost compare-and-set: below 0.5 ms first,
// doubling to 50 ms.
constexpr std::chrono::microseconds kFirstBackoffBound{500};
constexpr std::chrono::microseconds kLastBackoffBound{50000};

// The newest version keys stay; older ones go, so the keys do not grow
// with the run. A watcher that read a version this many writes old waits
// for a key already gone, and returns at its deadline.
constexpr int64_t kVersionKeysKept = 16;

std::string VersionKey(int64_t version) {
  return "infini_run/record_version/" + std::to_string(version);
}

class KeyRunRecordStore : public RunRecordStore {
 public:
  explicit KeyRunRecordStore(rendezvous::Store& store) : store_(store) {}

  RunRecord Get() override { return Read().first; }

  RecordWrite CompareAndSet(int64_t expected_version, const RunRecord& desired) override {
    const RunRecord next = Versioned(desired, expected_version + 1);
    const std::string value = WriteId() + " " + EncodeRunRecord(next);
    // The stored value to compare with: the last one this store saw, when
    // it is the expected version (most writes), else read.
    std::string expected;
    if (expected_version > 0) {
      std::unique_lock<std::mutex> lock(mutex_);
      if (last_seen_.first.version == expected_version) {
        expected = last_seen_.second;
      } else {
        lock.unlock();
        const auto [current, raw] = Read();
        if (current.version != expected_version) return {false, current};
        expected = raw;
      }
    }
    const std::string now_stored = store_.CompareSet(kRecordKey, expected, value);
    if (now_stored != value) {
      // c10d's rule: a missing key with a value expected answers that value.
      if (expected_version > 0 && now_stored == expected) return {false, RunRecord{}};
      RunRecord current = Decode(now_stored);
      Remember(current, now_stored);
      return {false, std::move(current)};
    }
    Remember(next, value);
    store_.Set(VersionKey(next.version), "");
    if (next.version > 1) store_.Set(VersionKey(next.version - 1), "");
    if (next.version > kVersionKeysKept)
      store_.DeleteKey(VersionKey(next.version - kVersionKeysKept));
    return {true, next};
  }

  RunRecord Watch(int64_t after_version, Clock::time_point deadline) override {
    RunRecord current = Get();
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (current.version > after_version || left.count() <= 0) return current;
    try {
      store_.Wait({VersionKey(after_version + 1)}, left);
    } catch (const rendezvous::StoreTimeoutError&) {
      // the deadline: the caller reads the version
    }
    return Get();
  }

 private:
  std::pair<RunRecord, std::string> Read() {
    if (!store_.Check({kRecordKey})) return {RunRecord{}, ""};
    std::string raw = store_.Get(kRecordKey);  // never deleted while the run lasts
    RunRecord record = Decode(raw);
    Remember(record, raw);
    return {std::move(record), std::move(raw)};
  }

  // Two launchers may make the same change to the same version (both see a
  // node lost): the values they write differ by this, so that the one whose
  // compare-and-set lost learns it did.
  std::string WriteId() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::to_string(handle_id_) + "." + std::to_string(++writes_);
  }

  static RunRecord Decode(const std::string& value) {
    const size_t space = value.find(' ');
    if (space == std::string::npos) {
      throw RunRecordError(std::string("run record at '") + kRecordKey +
                           "': expected '<write id> <JSON>', got no write id");
    }
    return DecodeRunRecord(value.substr(space + 1));
  }

  void Remember(const RunRecord& record, const std::string& raw) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (record.version >= last_seen_.first.version) last_seen_ = {record, raw};
  }

  rendezvous::Store& store_;
  std::mutex mutex_;
  std::pair<RunRecord, std::string> last_seen_;
  const uint64_t handle_id_ = std::random_device{}() * (uint64_t{1} << 32) + std::random_device{}();
  uint64_t writes_ = 0;
};

// On etcd: compare-and-set on the key's mod_revision, one transaction; the
// connection's own watch follows the key.
class EtcdRunRecordStore : public RunRecordStore {
 public:
  explicit EtcdRunRecordStore(std::unique_ptr<rendezvous::EtcdStore> etcd)
      : etcd_(std::move(etcd)) {
    etcd_->Watch(kRecordKey, [this](const rendezvous::EtcdEvent& event) {
      if (event.deleted || event.key != kRecordKey) return;
      try {
        Remember(DecodeRunRecord(event.value), event.revision);
      } catch (const RunRecordError&) {
        // Get reads it again and says so
      }
    });
  }
  // The watch's thread calls Remember: it ends before the members go.
  ~EtcdRunRecordStore() override { etcd_->StopBackground(); }
  void StopBackground() override { etcd_->StopBackground(); }

  RunRecord Get() override { return Read().first; }

  RecordWrite CompareAndSet(int64_t expected_version, const RunRecord& desired) override {
    const RunRecord next = Versioned(desired, expected_version + 1);
    int64_t expected_revision = 0;
    if (expected_version > 0) {
      std::unique_lock<std::mutex> lock(mutex_);
      if (seen_.version == expected_version) {
        expected_revision = seen_revision_;
      } else {
        lock.unlock();
        const auto [current, revision] = Read();
        if (current.version != expected_version) return {false, current};
        expected_revision = revision;
      }
    }
    const rendezvous::EtcdStore::RevisionedPut put =
        etcd_->PutIfRevision(kRecordKey, expected_revision, EncodeRunRecord(next));
    if (!put.now) return {false, RunRecord{}};  // missing, though a version was expected
    RunRecord now = put.put ? next : DecodeRunRecord(put.now->value);
    Remember(now, put.now->mod_revision);
    return {put.put, std::move(now)};
  }

  RunRecord Watch(int64_t after_version, Clock::time_point deadline) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (seen_.version > after_version) return seen_;
    }
    Get();  // what the watch may have missed before it started
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait_until(lock, deadline, [&] { return seen_.version > after_version; });
    return seen_;
  }

 private:
  // The stored record and its mod_revision (0: none stored).
  std::pair<RunRecord, int64_t> Read() {
    const std::optional<rendezvous::EtcdStore::Revisioned> stored =
        etcd_->GetRevisioned(kRecordKey);
    if (!stored) return {RunRecord{}, 0};
    RunRecord record = DecodeRunRecord(stored->value);
    Remember(record, stored->mod_revision);
    return {std::move(record), stored->mod_revision};
  }

  void Remember(const RunRecord& record, int64_t mod_revision) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (mod_revision < seen_revision_) return;
    seen_ = record;
    seen_revision_ = mod_revision;
    changed_.notify_all();
  }

  std::unique_ptr<rendezvous::EtcdStore> etcd_;
  std::mutex mutex_;
  std::condition_variable changed_;
  RunRecord seen_;
  int64_t seen_revision_ = 0;
};

}  // namespace

std::unique_ptr<RunRecordStore> MakeLocalRunRecordStore() {
  return std::make_unique<LocalRunRecordStore>();
}

std::unique_ptr<RunRecordStore> MakeKeyRunRecordStore(rendezvous::Store& store) {
  return std::make_unique<KeyRunRecordStore>(store);
}

std::unique_ptr<RunRecordStore> MakeEtcdRunRecordStore(rendezvous::EtcdStoreOptions options) {
  options.lease_ttl = std::chrono::milliseconds(0);
  return std::make_unique<EtcdRunRecordStore>(rendezvous::EtcdStore::Connect(options));
}

RecordStep UpdateRunRecord(RunRecordStore& store,
                           const std::function<RecordStep(const RunRecord&)>& transition) {
  // N launchers writing at once would each lose to every other in turn
  // (N²/2 tries): a loser waits a random time below a bound that doubles
  // with each loss ("full jitter"), so the writes spread out.
  thread_local std::minstd_rand random(std::random_device{}());
  std::chrono::microseconds bound = kFirstBackoffBound;
  RunRecord current = store.Get();
  while (true) {
    RecordStep step = transition(current);
    if (step.record == current) return step;
    RecordWrite write = store.CompareAndSet(current.version, step.record);
    if (write.stored) {
      step.record = std::move(write.record);
      return step;
    }
    current = std::move(write.record);
    std::this_thread::sleep_for(std::chrono::microseconds(
        std::uniform_int_distribution<int64_t>(0, bound.count())(random)));
    bound = std::min(bound * 2, kLastBackoffBound);
    current = store.Get();  // what landed while this one waited
  }
}

}  // namespace infini::launch
