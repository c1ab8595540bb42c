// Internal: the buffers registered with a group's communicator
// (ProcessGroup::RegisterBuffer). The group keeps them so that a
// communicator that replaces its own (a shrink after a loss, a remake for
// joiners) registers them again, and so that none outlives its
// communicator: a healthy one deregisters them before it is destroyed; a
// revoked or aborted one only forgets them (its work may never end, and
// comm_abort frees what it registered).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "infini/ccl/ccl.h"

namespace infini::parallel::internal {

class BufferRegistry {
 public:
  explicit BufferRegistry(std::string group_name) : group_name_(std::move(group_name)) {}

  // Keeps [data, data + bytes) and registers it with `comm` when `comm` is
  // valid and its backend registers buffers. Returns the entry's id (> 0).
  uint64_t Add(const ccl::Communicator& comm, void* data, size_t bytes);
  // Deregisters entry `id` (if registered) and drops it.
  void Remove(uint64_t id);
  // Before a healthy communicator is destroyed.
  void DeregisterAll();
  // Before a communicator is aborted, or once it is revoked.
  void ForgetAll();
  // With a new communicator: every entry, registered anew.
  void RegisterAll(const ccl::Communicator& comm);

 private:
  struct Entry {
    uint64_t id = 0;
    void* data = nullptr;
    size_t bytes = 0;
    ccl::BufferRegistration registration;
  };
  void RegisterEntry(const ccl::Communicator& comm, Entry& entry);

  std::string group_name_;  // for the warning of a failed registration
  std::mutex mutex_;
  std::vector<Entry> entries_;
  uint64_t next_id_ = 1;
};

}  // namespace infini::parallel::internal
