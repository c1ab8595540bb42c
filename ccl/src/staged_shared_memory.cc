// SharedSlots (staged_shared_memory.h): the segment's layout, its opening
// as a collective over the transport, and the progress counters.
#include "staged_shared_memory.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

namespace infini::ccl::internal::staged {
namespace {

constexpr uint64_t kMagic = 0x696e66696e69736dULL;  // "infinism"
constexpr size_t kLine = 64;                        // a counter per cache line
constexpr size_t kPage = 4096;
// The segment's data stays within this, whatever the rank count (a
// container's /dev/shm is often 64 MiB).
constexpr size_t kSegmentBudget = size_t{48} << 20;
constexpr size_t kSlotGranule = size_t{64} << 10;

size_t RoundUp(size_t bytes, size_t to) { return (bytes + to - 1) / to * to; }

// What a rank tells the others when they meet: where it runs, whether it
// may share memory, and (rank 0's counts) the segment's name.
struct Record {
  char host[160];
  char name[64];
  int32_t mode;
  int32_t padding;
};

constexpr const char* kShmVariable = "INFINI_CCL_STAGED_SHM";

// INFINI_CCL_STAGED_SHM: unset or empty, when the ranks can; 0, never; 1,
// always (a communicator whose ranks cannot share memory fails).
enum Mode : int32_t { kOff = 0, kAuto = 1, kRequired = 2, kBadValue = 3 };
Mode ReadMode() {
  const char* text = std::getenv(kShmVariable);
  if (text == nullptr || *text == '\0') return kAuto;
  if (std::strcmp(text, "0") == 0) return kOff;
  if (std::strcmp(text, "1") == 0) return kRequired;
  return kBadValue;
}

std::string SegmentName() {
  std::random_device random;
  char name[64];
  std::snprintf(name, sizeof(name), "/infini-ccl-%d-%08x%08x", static_cast<int>(getpid()), random(),
                random());
  return name;
}

// Every rank's `value`, the least of them (a transport all_reduce).
infiniCclResult_t AgreeOnLeast(const infiniCclPlugin_t& transport, infiniCclComm_t comm,
                               int32_t* value) {
  return transport.all_reduce(value, value, 1, DLDataType{kDLInt, 32, 1}, infiniCclMin, comm,
                              nullptr);
}

}  // namespace

std::string HostKey() {
  std::string boot_id;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot_id;
  char name[64] = {};
  gethostname(name, sizeof(name) - 1);
  return boot_id + "/" + name;
}

struct SharedSlots::Header {
  uint64_t magic;
  uint64_t slot_bytes;
  int32_t nranks;
  std::atomic<int32_t> poisoned;
};
static_assert(sizeof(SharedSlots::Phase) <= kLine);

infiniCclResult_t SharedSlots::Open(const infiniCclPlugin_t& transport, infiniCclComm_t comm,
                                    std::unique_ptr<SharedSlots>* slots, std::string* why) {
  slots->reset();
  const Mode mode = ReadMode();
  if (mode == kBadValue) {
    *why = std::string(kShmVariable) + "='" + std::getenv(kShmVariable) +
           "': expected 0 (never share memory), 1 (always) or nothing (when the ranks can)";
    return infiniCclInvalidArgument;
  }
  int nranks = 0, rank = 0;
  infiniCclResult_t result = transport.comm_count(comm, &nranks);
  if (result == infiniCclSuccess) result = transport.comm_user_rank(comm, &rank);
  if (result != infiniCclSuccess || nranks < 2) return result;

  Record mine{};
  std::snprintf(mine.host, sizeof(mine.host), "%s", HostKey().c_str());
  std::snprintf(mine.name, sizeof(mine.name), "%s", rank == 0 ? SegmentName().c_str() : "");
  mine.mode = mode;
  std::vector<Record> all(static_cast<size_t>(nranks));
  result = transport.all_gather(&mine, all.data(), sizeof(Record), DLDataType{kDLUInt, 8, 1}, comm,
                                nullptr);
  if (result != infiniCclSuccess) return result;
  bool required = false;
  std::string refusal;
  for (int r = 0; r < nranks; ++r) {
    const Record& other = all[static_cast<size_t>(r)];
    required = required || other.mode == kRequired;
    if (refusal.empty() && other.mode == kOff) {
      refusal = "rank " + std::to_string(r) + " set " + kShmVariable + "=0";
    }
    if (refusal.empty() && std::strncmp(other.host, all[0].host, sizeof(other.host)) != 0) {
      refusal = "rank " + std::to_string(r) + " runs on another host than rank 0";
    }
  }
  // Not all on this host: the transport it is, unless a rank required memory.
  const auto decline = [&](const std::string& reason) {
    if (!required) return infiniCclSuccess;
    *why = std::string(kShmVariable) + "=1: the ranks cannot share memory: " + reason;
    return infiniCclInvalidUsage;
  };
  if (!refusal.empty()) return decline(refusal);

  std::unique_ptr<SharedSlots> made(new SharedSlots());
  made->nranks_ = nranks;
  made->rank_ = rank;
  const size_t counters = RoundUp(kLine + 3 * kLine * static_cast<size_t>(nranks), kPage);
  made->slot_bytes_ =
      std::max(kSlotGranule, kSegmentBudget / (2 * (static_cast<size_t>(nranks) + 1)) /
                                 kSlotGranule * kSlotGranule);
  made->mapped_bytes_ = counters + 2 * (static_cast<size_t>(nranks) + 1) * made->slot_bytes_;
  const char* name = all[0].name;
  const auto map = [&](int flags) {
    made->fd_ = shm_open(name, flags, 0600);
    if (made->fd_ < 0) return false;
    if ((flags & O_CREAT) != 0 &&
        (ftruncate(made->fd_, static_cast<off_t>(made->mapped_bytes_)) != 0 ||
         posix_fallocate(made->fd_, 0, static_cast<off_t>(made->mapped_bytes_)) != 0)) {
      return false;  // no room: the pages are taken now rather than SIGBUS later
    }
    struct stat status {};
    if (fstat(made->fd_, &status) != 0 ||
        static_cast<size_t>(status.st_size) != made->mapped_bytes_) {
      return false;
    }
    void* base =
        mmap(nullptr, made->mapped_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, made->fd_, 0);
    if (base == MAP_FAILED) return false;
    made->base_ = static_cast<char*>(base);
    // This rank's liveness: its lock lasts as long as its open file.
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    lock.l_start = rank;
    lock.l_len = 1;
    return fcntl(made->fd_, F_OFD_SETLK, &lock) == 0;
  };

  int32_t ok = 1;
  if (rank == 0) {
    ok = map(O_RDWR | O_CREAT | O_EXCL) ? 1 : 0;
    if (ok) {
      auto* header = reinterpret_cast<Header*>(made->base_);
      header->magic = kMagic;
      header->slot_bytes = made->slot_bytes_;
      header->nranks = nranks;
    }
  }
  std::string failure = ok ? "" : "rank 0: " + std::string(name) + ": " + std::strerror(errno);
  result = AgreeOnLeast(transport, comm, &ok);
  if (result == infiniCclSuccess && ok && rank != 0) {
    ok = map(O_RDWR) ? 1 : 0;
    if (!ok) failure = "rank " + std::to_string(rank) + ": " + name + ": " + std::strerror(errno);
  }
  if (result == infiniCclSuccess && ok) result = AgreeOnLeast(transport, comm, &ok);
  if (rank == 0) shm_unlink(name);  // every rank has it open, or none will use it
  if (result != infiniCclSuccess) return result;
  if (!ok) return decline(failure.empty() ? "another rank could not map /dev/shm" : failure);
  const auto* header = reinterpret_cast<const Header*>(made->base_);
  if (header->magic != kMagic || header->nranks != nranks ||
      header->slot_bytes != made->slot_bytes_) {
    return infiniCclSuccess;  // cannot happen between equal builds; stay on the transport
  }
  *slots = std::move(made);
  return infiniCclSuccess;
}

SharedSlots::~SharedSlots() {
  if (base_ != nullptr) munmap(base_, mapped_bytes_);
  if (fd_ >= 0) close(fd_);
}

char* SharedSlots::input(int buffer, int rank) const {
  const size_t counters = RoundUp(kLine + 3 * kLine * static_cast<size_t>(nranks_), kPage);
  return base_ + counters +
         (static_cast<size_t>(buffer) * static_cast<size_t>(nranks_ + 1) +
          static_cast<size_t>(rank)) *
             slot_bytes_;
}

char* SharedSlots::result(int buffer) const { return input(buffer, nranks_); }

std::atomic<int64_t>& SharedSlots::Counter(Phase phase, int rank) const {
  char* at =
      base_ + kLine +
      (static_cast<size_t>(phase) * static_cast<size_t>(nranks_) + static_cast<size_t>(rank)) *
          kLine;
  return *reinterpret_cast<std::atomic<int64_t>*>(at);
}

void SharedSlots::Publish(Phase phase, int64_t sequence) {
  Counter(phase, rank_).store(sequence, std::memory_order_release);
}

bool SharedSlots::Alive(int rank) const {
  if (rank == rank_) return true;
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = rank;
  lock.l_len = 1;
  if (fcntl(fd_, F_OFD_GETLK, &lock) != 0) return true;  // cannot tell: the deadline decides
  return lock.l_type != F_UNLCK;
}

void SharedSlots::Poison() {
  reinterpret_cast<Header*>(base_)->poisoned.store(1, std::memory_order_release);
}

infiniCclResult_t SharedSlots::WaitAll(Phase phase, int64_t sequence,
                                       const std::atomic<bool>& aborting, int64_t timeout_ms,
                                       std::string* why) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  Clock::time_point next_check = start;
  const auto* header = reinterpret_cast<const Header*>(base_);
  for (unsigned spins = 0;; ++spins) {
    int waiting_for = -1;
    for (int r = 0; r < nranks_ && waiting_for < 0; ++r) {
      if (Counter(phase, r).load(std::memory_order_acquire) < sequence) waiting_for = r;
    }
    if (waiting_for < 0) return infiniCclSuccess;
    if (header->poisoned.load(std::memory_order_acquire) != 0) {
      *why = "another rank's call on this communicator failed";
      return infiniCclRemoteError;
    }
    // Spin briefly (the peers are usually a few microseconds behind), then
    // give the core away: ranks may outnumber cores.
    if (spins < 64) continue;
    if (spins < 1024) {
      sched_yield();
      continue;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    const Clock::time_point now = Clock::now();
    if (now < next_check) continue;
    next_check = now + std::chrono::milliseconds(2);
    if (aborting.load(std::memory_order_acquire)) {
      *why = "the communicator was aborted";
      Poison();
      return infiniCclRemoteError;
    }
    if (!Alive(waiting_for)) {
      *why = "rank " + std::to_string(waiting_for) + "'s process ended (a peer on this host)";
      Poison();
      return infiniCclRemoteError;
    }
    if (timeout_ms > 0 && now - start > std::chrono::milliseconds(timeout_ms)) {
      *why = "rank " + std::to_string(waiting_for) + " did not arrive within " +
             std::to_string(timeout_ms) + " ms";
      Poison();
      return infiniCclTimeout;
    }
  }
}

}  // namespace infini::ccl::internal::staged
