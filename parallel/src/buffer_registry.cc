#include "buffer_registry.h"

#include <glog/logging.h>

#include <algorithm>

namespace infini::parallel::internal {

void BufferRegistry::RegisterEntry(const ccl::Communicator& comm, Entry& entry) {
  if (!comm.valid() || !comm.backend()->capabilities().register_buffers()) return;
  try {
    entry.registration = comm.Register(entry.data, entry.bytes);
  } catch (const ccl::Error& error) {
    // Registration only makes collectives faster: they stay correct without.
    LOG(WARNING) << "process group '" << group_name_ << "': registering " << entry.bytes
                 << " bytes failed, collectives on them run unregistered: " << error.what();
  }
}

uint64_t BufferRegistry::Add(const ccl::Communicator& comm, void* data, size_t bytes) {
  std::lock_guard lock(mutex_);
  Entry& entry = entries_.emplace_back();
  entry.id = next_id_++;
  entry.data = data;
  entry.bytes = bytes;
  RegisterEntry(comm, entry);
  return entry.id;
}

void BufferRegistry::Remove(uint64_t id) {
  std::lock_guard lock(mutex_);
  auto entry = std::find_if(entries_.begin(), entries_.end(),
                            [id](const Entry& candidate) { return candidate.id == id; });
  if (entry == entries_.end()) return;
  try {
    entry->registration.Deregister();
  } catch (const ccl::Error& error) {
    LOG(WARNING) << "process group '" << group_name_ << "': deregistering " << entry->bytes
                 << " bytes failed: " << error.what();
  }
  entries_.erase(entry);
}

void BufferRegistry::DeregisterAll() {
  std::lock_guard lock(mutex_);
  for (Entry& entry : entries_) {
    try {
      entry.registration.Deregister();
    } catch (const ccl::Error& error) {
      LOG(WARNING) << "process group '" << group_name_ << "': deregistering " << entry.bytes
                   << " bytes failed: " << error.what();
    }
  }
}

void BufferRegistry::ForgetAll() {
  std::lock_guard lock(mutex_);
  for (Entry& entry : entries_) entry.registration.Forget();
}

void BufferRegistry::RegisterAll(const ccl::Communicator& comm) {
  std::lock_guard lock(mutex_);
  for (Entry& entry : entries_) {
    entry.registration.Forget();  // of a communicator that is gone
    RegisterEntry(comm, entry);
  }
}

}  // namespace infini::parallel::internal
