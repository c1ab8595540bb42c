// Point-to-point operations and NCCL-style grouping. Between group_start and
// group_end (per thread, nesting), send/recv and collectives are queued; at
// the outermost group_end every send and recv is posted before any is
// waited on (so a ring where everyone sends, then receives, completes), then
// the queued collectives run, one thread per communicator when one thread
// drives several.
#pragma once

#include <cstddef>
#include <functional>

#include "communicator.h"

namespace infini::gloo_backend {

void GroupStart();
// Throws PluginError(infiniCclInvalidUsage) without a matching GroupStart.
void GroupEnd();
bool InGroup();

// Queues `call` on `comm` for the outermost GroupEnd; holds a reference.
void DeferCollective(Communicator& comm, std::function<void(Communicator&)> call);

// Inside a group: queued. Outside: posts and waits. A rank's send to itself
// is matched with its recv from itself inside one group.
void Send(Communicator& comm, const void* buffer, size_t bytes, int peer);
void Recv(Communicator& comm, void* buffer, size_t bytes, int peer);

}  // namespace infini::gloo_backend
