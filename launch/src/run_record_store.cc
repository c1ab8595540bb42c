// The run record's three homes: this process, and one key of a key-value
// store (node 0's TCP store, or etcd on a connection without a lease).
#include "infini/launch/run_record_store.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <random>
#include <string>
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

std::string VersionKey(int64_t version) {
  return "infini_run/record_version/" + std::to_string(version);
}

class KeyRunRecordStore : public RunRecordStore {
 public:
  KeyRunRecordStore(rendezvous::Store& store, std::unique_ptr<rendezvous::Store> owned)
      : owned_(std::move(owned)), store_(store) {}

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

  std::unique_ptr<rendezvous::Store> owned_;
  rendezvous::Store& store_;
  std::mutex mutex_;
  std::pair<RunRecord, std::string> last_seen_;
  const uint64_t handle_id_ = std::random_device{}() * (uint64_t{1} << 32) + std::random_device{}();
  uint64_t writes_ = 0;
};

}  // namespace

std::unique_ptr<RunRecordStore> MakeLocalRunRecordStore() {
  return std::make_unique<LocalRunRecordStore>();
}

std::unique_ptr<RunRecordStore> MakeKeyRunRecordStore(rendezvous::Store& store) {
  return std::make_unique<KeyRunRecordStore>(store, nullptr);
}

std::unique_ptr<RunRecordStore> MakeEtcdRunRecordStore(rendezvous::EtcdStoreOptions options) {
  options.lease_ttl = std::chrono::milliseconds(0);
  std::unique_ptr<rendezvous::Store> etcd = rendezvous::EtcdStore::Connect(options);
  rendezvous::Store& store = *etcd;
  return std::make_unique<KeyRunRecordStore>(store, std::move(etcd));
}

RecordStep UpdateRunRecord(RunRecordStore& store,
                           const std::function<RecordStep(const RunRecord&)>& transition) {
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
  }
}

}  // namespace infini::launch
