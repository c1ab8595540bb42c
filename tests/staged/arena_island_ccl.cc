// arena_island_ccl.h: a segment of one header, two progress counters per
// rank and one slot per rank. A collective goes in slot-sized steps: every
// rank copies its part in and says so (arrived), reads what it needs (the
// reduction, or the root's slot) and says so (done); a step's slots are
// reused only once every rank is done with them.
#include "arena_island_ccl.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

// The host's element-wise reductions (ccl/src/staged_host_reduce.cc).
#include "staged_shared_memory.h"

namespace arena_island {
namespace {

constexpr size_t kLine = 64;
constexpr size_t kSlotBytes = size_t{1} << 20;
// A peer that never comes (it died, or called another collective) is a
// failure after this, not a hang.
constexpr auto kPatience = std::chrono::seconds(60);

struct Header {
  std::atomic<int32_t> joined;
};

size_t CountersBytes(int nranks) { return kLine + 2 * kLine * static_cast<size_t>(nranks); }

}  // namespace

struct Comm {
  int nranks = 0;
  int rank = 0;
  char* base = nullptr;
  size_t mapped_bytes = 0;
  int64_t sequence = 0;
  std::atomic<bool> aborted{false};

  Header& header() const { return *reinterpret_cast<Header*>(base); }
  std::atomic<int64_t>& counter(int phase, int of) const {
    return *reinterpret_cast<std::atomic<int64_t>*>(
        base + kLine + (2 * static_cast<size_t>(of) + static_cast<size_t>(phase)) * kLine);
  }
  char* slot(int of) const {
    return base + CountersBytes(nranks) + static_cast<size_t>(of) * kSlotBytes;
  }
};

namespace {

std::string SegmentName(const char* device_name, const void* unique_id) {
  const auto* bytes = static_cast<const unsigned char*>(unique_id);
  std::string name = std::string("/arena-island-") + device_name + "-";
  char hex[3];
  for (size_t i = 0; i < kUniqueIdBytes; ++i) {
    std::snprintf(hex, sizeof(hex), "%02x", bytes[i]);
    name += hex;
  }
  return name;
}

// Until `ready()`; false after kPatience.
template <typename Ready>
bool WaitFor(const Comm& comm, Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + kPatience;
  for (int spins = 0; !ready(); ++spins) {
    if (comm.aborted.load(std::memory_order_acquire)) return false;
    if (spins < 64) {
      sched_yield();
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return true;
}

bool AllReached(const Comm& comm, int phase, int64_t sequence) {
  for (int r = 0; r < comm.nranks; ++r) {
    if (comm.counter(phase, r).load(std::memory_order_acquire) < sequence) return false;
  }
  return true;
}

size_t ElementBytes(DLDataType dtype) {
  return (static_cast<size_t>(dtype.bits) * dtype.lanes + 7) / 8;
}

}  // namespace

void MakeUniqueId(void* unique_id) {
  std::random_device random;
  for (size_t i = 0; i < kUniqueIdBytes; ++i)
    static_cast<unsigned char*>(unique_id)[i] = static_cast<unsigned char>(random());
}

infiniCclResult_t Join(const char* device_name, const void* unique_id, int nranks, int rank,
                       Comm** made, std::string* why) {
  *made = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    *why = "comm_init_rank: rank " + std::to_string(rank) + " of " + std::to_string(nranks);
    return infiniCclInvalidArgument;
  }
  auto comm = std::make_unique<Comm>();
  comm->nranks = nranks;
  comm->rank = rank;
  comm->mapped_bytes = CountersBytes(nranks) + static_cast<size_t>(nranks) * kSlotBytes;
  const std::string name = SegmentName(device_name, unique_id);
  const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(comm->mapped_bytes)) != 0) {
    if (fd >= 0) close(fd);
    *why = "comm_init_rank: cannot make the shared segment " + name + ": " + std::strerror(errno);
    return infiniCclSystemError;
  }
  void* base = mmap(nullptr, comm->mapped_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    *why = "comm_init_rank: cannot map " + name + ": " + std::strerror(errno);
    return infiniCclSystemError;
  }
  comm->base = static_cast<char*>(base);
  comm->header().joined.fetch_add(1, std::memory_order_acq_rel);
  if (!WaitFor(*comm,
               [&] { return comm->header().joined.load(std::memory_order_acquire) >= nranks; })) {
    *why = "comm_init_rank: not every one of " + std::to_string(nranks) + " ranks joined " + name;
    munmap(comm->base, comm->mapped_bytes);
    return infiniCclTimeout;
  }
  // Everyone has it open: the name is no longer needed.
  if (rank == 0) shm_unlink(name.c_str());
  *made = comm.release();
  return infiniCclSuccess;
}

void Leave(Comm* comm) {
  if (comm == nullptr) return;
  munmap(comm->base, comm->mapped_bytes);
  delete comm;
}

void Abort(Comm* comm) {
  if (comm != nullptr) comm->aborted.store(true, std::memory_order_release);
}

int RankOf(const Comm* comm) { return comm->rank; }
int SizeOf(const Comm* comm) { return comm->nranks; }

bool Supports(Kind kind, DLDataType dtype, infiniCclRedOp_t op) {
  if (dtype.lanes != 1 || dtype.bits % 8 != 0 || dtype.bits == 0) return false;
  if (kind == Kind::kBroadcast) return true;
  return infini::ccl::internal::staged::HostReduces(dtype, op);
}

infiniCclResult_t Run(Comm* comm, Kind kind, const char* send, char* recv, size_t count,
                      DLDataType dtype, infiniCclRedOp_t op, int root, std::string* why) {
  const size_t element = std::max<size_t>(ElementBytes(dtype), 1);
  const size_t per_step = kSlotBytes / element;
  const int me = comm->rank;
  const bool contributes = kind != Kind::kBroadcast || me == root;
  std::vector<const char*> sources(static_cast<size_t>(comm->nranks));
  for (size_t first = 0; first < count; first += per_step) {
    const size_t elements = std::min(per_step, count - first);
    const size_t offset = first * element, bytes = elements * element;
    const int64_t step = ++comm->sequence;
    if (contributes) std::memcpy(comm->slot(me), send + offset, bytes);
    comm->counter(0, me).store(step, std::memory_order_release);
    if (!WaitFor(*comm, [&] { return AllReached(*comm, 0, step); })) {
      *why = comm->aborted ? "the communicator was aborted"
                           : "a peer did not reach the collective within 60 s";
      return infiniCclTimeout;
    }
    if (kind == Kind::kBroadcast) {
      std::memcpy(recv + offset, comm->slot(root), bytes);
    } else if (kind == Kind::kAllReduce || me == root) {
      for (int r = 0; r < comm->nranks; ++r) sources[static_cast<size_t>(r)] = comm->slot(r);
      infini::ccl::internal::staged::HostReduce(recv + offset, sources.data(), comm->nranks,
                                                elements, dtype, op);
    }
    comm->counter(1, me).store(step, std::memory_order_release);
    if (!WaitFor(*comm, [&] { return AllReached(*comm, 1, step); })) {
      *why = comm->aborted ? "the communicator was aborted"
                           : "a peer did not finish the collective within 60 s";
      return infiniCclTimeout;
    }
  }
  return infiniCclSuccess;
}

}  // namespace arena_island
