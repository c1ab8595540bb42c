#include "group.h"

#include <gloo/transport/unbound_buffer.h>

#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "errors.h"
#include "slots.h"

namespace infini::gloo_backend {
namespace {

struct PointToPoint {
  Communicator* comm;  // holds a reference while queued
  bool is_send;
  void* buffer;
  size_t bytes;
  int peer;
};

struct DeferredCollective {
  Communicator* comm;  // holds a reference while queued
  std::function<void(Communicator&)> call;
};

struct GroupState {
  int depth = 0;
  std::vector<PointToPoint> point_to_point;
  std::vector<DeferredCollective> collectives;
};

thread_local GroupState group_state;

// Copies each self-send into the self-recv of the same order on its
// communicator.
void MatchSelfTransfers(const std::vector<PointToPoint>& ops) {
  std::map<Communicator*,
           std::pair<std::vector<const PointToPoint*>, std::vector<const PointToPoint*>>>
      by_comm;
  for (const PointToPoint& op : ops) {
    if (op.peer != op.comm->rank()) continue;
    auto& [sends, recvs] = by_comm[op.comm];
    (op.is_send ? sends : recvs).push_back(&op);
  }
  for (auto& [comm, lists] : by_comm) {
    auto& [sends, recvs] = lists;
    if (sends.size() != recvs.size()) {
      throw PluginError(infiniCclInvalidUsage,
                        "rank " + std::to_string(comm->rank()) + " has " +
                            std::to_string(sends.size()) + " send(s) to itself but " +
                            std::to_string(recvs.size()) +
                            " recv(s) from itself in one group; they must pair up");
    }
    for (size_t i = 0; i < sends.size(); ++i) {
      if (sends[i]->bytes != recvs[i]->bytes) {
        throw PluginError(infiniCclInvalidUsage, "a send to self of " +
                                                     std::to_string(sends[i]->bytes) +
                                                     " bytes is matched with a recv from self of " +
                                                     std::to_string(recvs[i]->bytes) + " bytes");
      }
      if (sends[i]->bytes > 0) std::memmove(recvs[i]->buffer, sends[i]->buffer, sends[i]->bytes);
    }
  }
}

// Posts every transfer to another rank, then waits for all of them.
void RunPointToPoint(const std::vector<PointToPoint>& ops) {
  struct Posted {
    std::unique_ptr<::gloo::transport::UnboundBuffer> buffer;
    const PointToPoint* op;
  };
  std::vector<Posted> posted;
  const uint64_t slot = MakeSlot(kPointToPointSlotPrefix, 0);
  for (const PointToPoint& op : ops) {
    if (op.peer == op.comm->rank() || op.bytes == 0) continue;
    op.comm->ThrowIfAborted();
    auto buffer = op.comm->context()->createUnboundBuffer(op.buffer, op.bytes);
    // The size is in the slot: a send and a recv of different sizes time out.
    if (op.is_send) {
      buffer->send(op.peer, SlotForBytes(slot, op.bytes));
    } else {
      buffer->recv(op.peer, SlotForBytes(slot, op.bytes));
    }
    posted.push_back({std::move(buffer), &op});
  }
  MatchSelfTransfers(ops);
  for (Posted& entry : posted) {
    const PointToPoint& op = *entry.op;
    const bool completed = op.is_send ? entry.buffer->waitSend(op.comm->timeout())
                                      : entry.buffer->waitRecv(op.comm->timeout());
    if (!completed) {
      throw PluginError(infiniCclAborted, std::string(op.is_send ? "send to" : "recv from") +
                                              " rank " + std::to_string(op.peer) + " was aborted");
    }
  }
}

// Runs each communicator's queued collectives in order; several
// communicators (one thread driving several ranks) each get a thread, since
// each waits for the others' participation.
void RunCollectives(const std::vector<DeferredCollective>& collectives) {
  std::vector<Communicator*> order;
  std::map<Communicator*, std::vector<const DeferredCollective*>> by_comm;
  for (const DeferredCollective& entry : collectives) {
    auto& list = by_comm[entry.comm];
    if (list.empty()) order.push_back(entry.comm);
    list.push_back(&entry);
  }
  auto run_list = [&by_comm](Communicator* comm) {
    for (const DeferredCollective* entry : by_comm[comm]) entry->call(*comm);
  };
  if (order.size() <= 1) {
    for (Communicator* comm : order) run_list(comm);
    return;
  }
  std::vector<std::exception_ptr> failures(order.size());
  std::vector<std::thread> threads;
  for (size_t i = 1; i < order.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        run_list(order[i]);
      } catch (...) {
        failures[i] = std::current_exception();
      }
    });
  }
  try {
    run_list(order[0]);
  } catch (...) {
    failures[0] = std::current_exception();
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& failure : failures) {
    if (failure) std::rethrow_exception(failure);
  }
}

// A failure on an aborted communicator is reported as infiniCclAborted.
[[noreturn]] void RethrowForComms(const std::vector<Communicator*>& comms) {
  for (Communicator* comm : comms) {
    if (comm->aborted()) {
      throw PluginError(infiniCclAborted, "the communicator was aborted (comm_abort)");
    }
  }
  throw;
}

}  // namespace

void GroupStart() { ++group_state.depth; }

bool InGroup() { return group_state.depth > 0; }

void GroupEnd() {
  if (group_state.depth == 0) {
    throw PluginError(infiniCclInvalidUsage, "group_end without a matching group_start");
  }
  if (--group_state.depth > 0) return;
  std::vector<PointToPoint> point_to_point = std::move(group_state.point_to_point);
  std::vector<DeferredCollective> collectives = std::move(group_state.collectives);
  group_state.point_to_point.clear();
  group_state.collectives.clear();
  std::vector<Communicator*> comms;
  for (const PointToPoint& op : point_to_point) comms.push_back(op.comm);
  for (const DeferredCollective& entry : collectives) comms.push_back(entry.comm);
  struct ReleaseAll {
    std::vector<Communicator*>& comms;
    ~ReleaseAll() {
      for (Communicator* comm : comms) comm->Release();
    }
  } release{comms};
  try {
    RunPointToPoint(point_to_point);
    RunCollectives(collectives);
  } catch (...) {
    RethrowForComms(comms);
  }
}

void DeferCollective(Communicator& comm, std::function<void(Communicator&)> call) {
  comm.Acquire();
  group_state.collectives.push_back({&comm, std::move(call)});
}

void Send(Communicator& comm, const void* buffer, size_t bytes, int peer) {
  PointToPoint op{&comm, true, const_cast<void*>(buffer), bytes, peer};
  if (InGroup()) {
    comm.Acquire();
    group_state.point_to_point.push_back(op);
    return;
  }
  if (peer == comm.rank() && bytes > 0) {
    throw PluginError(infiniCclInvalidUsage,
                      "send to its own rank " + std::to_string(peer) +
                          " outside group_start/group_end can never complete; put the send and "
                          "its recv in one group");
  }
  RunPointToPoint({op});
}

void Recv(Communicator& comm, void* buffer, size_t bytes, int peer) {
  PointToPoint op{&comm, false, buffer, bytes, peer};
  if (InGroup()) {
    comm.Acquire();
    group_state.point_to_point.push_back(op);
    return;
  }
  if (peer == comm.rank() && bytes > 0) {
    throw PluginError(infiniCclInvalidUsage,
                      "recv from its own rank " + std::to_string(peer) +
                          " outside group_start/group_end can never complete; put the recv and "
                          "its send in one group");
  }
  RunPointToPoint({op});
}

}  // namespace infini::gloo_backend
