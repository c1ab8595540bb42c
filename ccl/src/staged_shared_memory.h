// Ranks of one host meet in shared memory instead of the transport's
// sockets: one segment per staged communicator, holding every rank's input
// slots (two, so that one chunk is copied in while the last is reduced), two
// result slots and a progress counter per rank and phase. A rank's process
// holds an open-file-description lock on its byte of the segment, so a peer
// that dies (SIGKILL included) is seen at once by whoever waits for it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "infini/ccl/plugin_abi.h"

namespace infini::ccl::internal::staged {

// Whether the host reduces `dtype` with `op` itself (staged_host_reduce.cc);
// other pairs stay on the transport.
bool HostReduces(DLDataType dtype, infiniCclRedOp_t op);
// out[i] = op over sources[0..n)[i], in rank order (so every rank that
// reads `out` sees the same bits); avg divides the sum by n.
void HostReduce(void* out, const char* const* sources, int n, size_t count, DLDataType dtype,
                infiniCclRedOp_t op);
// data[i] /= divisor, for the types HostReduces averages.
void HostDivide(void* data, size_t count, DLDataType dtype, int divisor);

// This machine (boot id and host name): ranks with the same key share memory.
std::string HostKey();

class SharedSlots {
 public:
  enum Phase : int { kArrived = 0, kReduced = 1, kConsumed = 2 };

  // Collective over `transport` (every rank calls it at the same call):
  // maps a segment every rank shares, or sets *slots to null when the ranks
  // are not all on this host, a rank set INFINI_CCL_STAGED_SHM=0, or
  // /dev/shm has no room (the transport is used then). Fails when the
  // transport does (*why empty: its own error), and with *why when
  // INFINI_CCL_STAGED_SHM is not 0, 1 or empty, or a rank set it to 1 and
  // the ranks cannot share memory.
  static infiniCclResult_t Open(const infiniCclPlugin_t& transport, infiniCclComm_t comm,
                                std::unique_ptr<SharedSlots>* slots, std::string* why);
  ~SharedSlots();
  SharedSlots(const SharedSlots&) = delete;
  SharedSlots& operator=(const SharedSlots&) = delete;

  int nranks() const { return nranks_; }
  int rank() const { return rank_; }
  size_t slot_bytes() const { return slot_bytes_; }
  char* input(int buffer, int rank) const;
  char* result(int buffer) const;
  // The whole mapping (page-aligned), for registering it with the device.
  void* mapping() const { return base_; }
  size_t mapped_bytes() const { return mapped_bytes_; }

  void Publish(Phase phase, int64_t sequence);
  // Until every rank published `phase` at `sequence` or later: infiniCclSuccess,
  // else the error and *why (a rank's process ended, `aborting` was set,
  // `timeout_ms` passed, or another rank failed). A failure poisons the
  // segment: every rank's later wait fails too.
  infiniCclResult_t WaitAll(Phase phase, int64_t sequence, const std::atomic<bool>& aborting,
                            int64_t timeout_ms, std::string* why);
  // This rank's call failed outside the waits (a device copy): every rank's
  // waits fail instead of waiting for it forever.
  void Abandon() { Poison(); }

 private:
  struct Header;
  SharedSlots() = default;
  std::atomic<int64_t>& Counter(Phase phase, int rank) const;
  bool Alive(int rank) const;
  void Poison();

  int nranks_ = 0;
  int rank_ = 0;
  int fd_ = -1;
  size_t slot_bytes_ = 0;
  size_t mapped_bytes_ = 0;
  char* base_ = nullptr;
};

}  // namespace infini::ccl::internal::staged
