// staged_hierarchy.h: finding a communicator's islands (one all_gather of
// what each rank runs on, one of the islands' unique ids, a split of the
// transport for the leaders, the islands' comm_init_rank, one agreement
// that all of it worked) and the three steps of a hierarchical all_reduce.
#include "staged_hierarchy.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "infini/ccl/capabilities.h"
#include "staged_comm.h"
#include "staged_shared_memory.h"

namespace infini::ccl::internal::staged {
namespace {

constexpr const char* kThresholdVariable = "INFINI_CCL_STAGED_HIERARCHY_BYTES";
// Unset, the threshold depends on what flat staging would do. Ranks all on
// one host meet in shared memory there (INFINI_CCL_STAGED_SHM), which the
// arena islands never clearly beat on 2 CPU cores (256 KiB to 64 MiB, within
// noise or slower): flat. Ranks that go through the transport's sockets were
// slower flat at every size measured (1 KiB to 64 MiB): hierarchical at
// every size. docs/ccl.md has the figures.
constexpr int64_t kNever = -1;
constexpr int64_t kOneHostThreshold = kNever;
constexpr int64_t kSocketsThreshold = 0;
constexpr int64_t kUnset = -2;
constexpr size_t kIdBytes = 256;  // the largest device unique id carried

// The types a rank says its CCL reduces and broadcasts: one bit per known
// type (capabilities.h) and operator; another type stays flat.
constexpr int kTypeCount = kNumKnownDataTypes;
constexpr size_t kSupportBytes = (kTypeCount * infiniCclNumOps + 7) / 8;

int BitOf(DLDataType dtype, infiniCclRedOp_t op) {
  const int type = KnownDataTypeIndex(dtype);
  if (type < 0 || op < 0 || op >= infiniCclNumOps) return -1;
  return type * infiniCclNumOps + static_cast<int>(op);
}

// What a rank tells the others at its communicator's first all_reduce.
struct Record {
  char host[160];
  char device[64];   // the device plugin; "" where it has no CCL to island with
  char runtime[64];  // the device plugin, always
  int32_t device_index;
  int32_t flags;
  int64_t threshold;
  uint8_t supported[kSupportBytes];
};
constexpr int32_t kShares = 1;          // ranks may share a device in its CCL
constexpr int32_t kBadThreshold = 2;    // its INFINI_CCL_STAGED_HIERARCHY_BYTES is not a size
constexpr int32_t kCannotSplit = 4;     // its transport has no comm_split
constexpr int32_t kNoSharedMemory = 8;  // INFINI_CCL_STAGED_SHM=0

struct IdRecord {
  int32_t failed;
  int32_t padding;
  char id[kIdBytes];
};

// INFINI_CCL_STAGED_HIERARCHY_BYTES: bytes with an optional K, M or G
// (binary), or `never`. False for anything else.
bool ReadThreshold(int64_t* threshold) {
  const char* text = std::getenv(kThresholdVariable);
  *threshold = kUnset;
  if (text == nullptr || *text == '\0') return true;
  if (std::strcmp(text, "never") == 0) {
    *threshold = kNever;
    return true;
  }
  char* end = nullptr;
  if (*text < '0' || *text > '9') return false;
  const unsigned long long value = std::strtoull(text, &end, 10);
  int shift = 0;
  if (*end == 'K' || *end == 'k') shift = 10, ++end;
  if (*end == 'M' || *end == 'm') shift = 20, ++end;
  if (*end == 'G' || *end == 'g') shift = 30, ++end;
  if (*end != '\0' || value > (1ULL << (62 - shift))) return false;
  *threshold = static_cast<int64_t>(value << shift);
  return true;
}

bool HasCcl(const infiniCclPlugin_t& device) {
  return &device != &Transport() && device.get_unique_id != nullptr &&
         device.comm_init_rank != nullptr && device.comm_destroy != nullptr &&
         device.reduce != nullptr && device.broadcast != nullptr && device.supports != nullptr &&
         device.unique_id_bytes > 0 && device.unique_id_bytes <= kIdBytes;
}

Record MyRecord(const StagedComm& comm) {
  Record mine{};
  std::snprintf(mine.host, sizeof(mine.host), "%s", HostKey().c_str());
  const infiniCclPlugin_t& device = Device();
  if (HasCcl(device)) {
    std::snprintf(mine.device, sizeof(mine.device), "%s", device.name);
    for (int t = 0; t < kTypeCount; ++t) {
      for (int op = 0; op < infiniCclNumOps; ++op) {
        // An average is a sum in the island.
        const auto island_op = static_cast<infiniCclRedOp_t>(op == infiniCclAvg ? 0 : op);
        if (device.supports(infiniCclCollReduce, KnownDataType(t), island_op) != 0 &&
            device.supports(infiniCclCollBroadcast, KnownDataType(t), infiniCclSum) != 0) {
          const int bit = t * infiniCclNumOps + op;
          mine.supported[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
        }
      }
    }
    if ((device.features & INFINI_CCL_FEATURE_DEVICE_SHARING) != 0) mine.flags |= kShares;
  }
  std::snprintf(mine.runtime, sizeof(mine.runtime), "%s", device.name);
  mine.device_index = comm.device;
  if (!ReadThreshold(&mine.threshold)) mine.flags |= kBadThreshold;
  if (Transport().comm_split == nullptr) mine.flags |= kCannotSplit;
  const char* shared_memory = std::getenv("INFINI_CCL_STAGED_SHM");
  if (shared_memory != nullptr && std::strcmp(shared_memory, "0") == 0)
    mine.flags |= kNoSharedMemory;
  return mine;
}

// Each rank's island leader (its lowest rank): ranks of one host and one
// device plugin with a CCL, unless that CCL refuses two ranks on one device
// and two of them share one (each is an island of one then).
std::vector<int> LeadersOf(const std::vector<Record>& all) {
  const int nranks = static_cast<int>(all.size());
  std::vector<int> leader(all.size());
  std::map<std::pair<std::string, std::string>, std::vector<int>> groups;
  for (int r = 0; r < nranks; ++r) {
    leader[static_cast<size_t>(r)] = r;
    const Record& record = all[static_cast<size_t>(r)];
    if (record.device[0] != '\0') groups[{record.host, record.device}].push_back(r);
  }
  for (const auto& [key, members] : groups) {
    bool collide = false;
    for (size_t i = 0; i < members.size() && !collide; ++i) {
      const Record& one = all[static_cast<size_t>(members[i])];
      for (size_t j = i + 1; j < members.size(); ++j) {
        if ((one.flags & kShares) == 0 &&
            all[static_cast<size_t>(members[j])].device_index == one.device_index) {
          collide = true;
        }
      }
    }
    if (collide) continue;
    for (int member : members) leader[static_cast<size_t>(member)] = members[0];
  }
  return leader;
}

// Makes comm.islands, or leaves the communicator flat (*islands stays
// NULL) when no island has two ranks or `never` was asked for.
infiniCclResult_t FindIslands(StagedComm& comm, std::shared_ptr<Islands>* found) {
  const infiniCclPlugin_t& transport = Transport();
  const infiniCclPlugin_t& device = Device();
  int nranks = 0, rank = 0;
  infiniCclResult_t result = FromPlugin(transport, transport.comm_count(comm.transport, &nranks),
                                        "comm_init (finding islands)");
  if (result == infiniCclSuccess) {
    result = FromPlugin(transport, transport.comm_user_rank(comm.transport, &rank),
                        "comm_init (finding islands)");
  }
  if (result != infiniCclSuccess || nranks < 2) return result;

  const Record mine = MyRecord(comm);
  std::vector<Record> all(static_cast<size_t>(nranks));
  result = FromPlugin(transport,
                      transport.all_gather(&mine, all.data(), sizeof(Record),
                                           DLDataType{kDLUInt, 8, 1}, comm.transport, nullptr),
                      "comm_init (finding islands)");
  if (result != infiniCclSuccess) return result;
  for (int r = 0; r < nranks; ++r) {
    if ((all[static_cast<size_t>(r)].flags & kBadThreshold) == 0) continue;
    if (r == rank) {
      return Fail(infiniCclInvalidUsage,
                  std::string(kThresholdVariable) + "='" + std::getenv(kThresholdVariable) +
                      "': expected a size in bytes (e.g. 1048576 or 1M; 0: every size) from "
                      "which all_reduce goes through the islands' device CCLs, or 'never'");
    }
    return Fail(infiniCclInvalidUsage, "rank " + std::to_string(r) + "'s " + kThresholdVariable +
                                           " is not a size in bytes or 'never' (its own line "
                                           "says the value)");
  }
  comm.device_shared = false;
  const Record& me = all[static_cast<size_t>(rank)];
  for (int r = 0; r < nranks; ++r) {
    const Record& other = all[static_cast<size_t>(r)];
    if (r != rank && other.device_index == me.device_index &&
        std::strncmp(other.host, me.host, sizeof(me.host)) == 0 &&
        std::strncmp(other.runtime, me.runtime, sizeof(me.runtime)) == 0) {
      comm.device_shared = true;
    }
  }
  const std::vector<int> leader = LeadersOf(all);
  std::vector<int> members;  // of this rank's island, in rank order
  int island_count = 0;
  bool some_island_shared = false, can_split = true, flat_shares_memory = true;
  for (int r = 0; r < nranks; ++r) {
    const int its = leader[static_cast<size_t>(r)];
    if (its == r) ++island_count;
    if (its != r) some_island_shared = true;
    if (its == leader[static_cast<size_t>(rank)]) members.push_back(r);
    const Record& record = all[static_cast<size_t>(r)];
    if ((record.flags & kCannotSplit) != 0) can_split = false;
    if ((record.flags & kNoSharedMemory) != 0 ||
        std::strncmp(record.host, all[0].host, sizeof(record.host)) != 0) {
      flat_shares_memory = false;
    }
  }
  const int64_t threshold = all[0].threshold != kUnset ? all[0].threshold
                            : flat_shares_memory       ? kOneHostThreshold
                                                       : kSocketsThreshold;
  if (!some_island_shared || !can_split || threshold == kNever) return infiniCclSuccess;

  auto islands = std::make_shared<Islands>();
  islands->nranks = nranks;
  islands->island_count = island_count;
  islands->threshold = threshold;
  // What every island of two or more does.
  islands->supported.assign(kSupportBytes, 0xff);
  for (int r = 0; r < nranks; ++r) {
    if (std::count(leader.begin(), leader.end(), leader[static_cast<size_t>(r)]) < 2) continue;
    for (size_t b = 0; b < kSupportBytes; ++b)
      islands->supported[b] &= all[static_cast<size_t>(r)].supported[b];
  }

  // The islands' unique ids, from their leaders.
  const bool leads = leader[static_cast<size_t>(rank)] == rank;
  const bool in_island = members.size() > 1;
  IdRecord my_id{};
  std::string why;
  if (leads && in_island) {
    if (const infiniCclResult_t made = device.get_unique_id(my_id.id, nullptr);
        made != infiniCclSuccess) {
      my_id.failed = 1;
      FromPlugin(device, made, "comm_init (island get_unique_id)");
      why = LastError();
    }
  }
  std::vector<IdRecord> ids(static_cast<size_t>(nranks));
  result = FromPlugin(transport,
                      transport.all_gather(&my_id, ids.data(), sizeof(IdRecord),
                                           DLDataType{kDLUInt, 8, 1}, comm.transport, nullptr),
                      "comm_init (island ids)");
  if (result != infiniCclSuccess) return result;

  // The leaders' communicator over the transport (a split every rank joins).
  infiniCclComm_t child = nullptr;
  result = FromPlugin(transport,
                      transport.comm_split(comm.transport, leads ? 0 : -1, rank, &child, nullptr),
                      "comm_init (the islands' leaders)");
  if (result != infiniCclSuccess) return result;
  if (child != nullptr) {
    if (MakeStagedComm(child, nullptr, &islands->leaders) != infiniCclSuccess) {
      why = LastError();
      transport.comm_destroy(child);
    } else {
      islands->leaders->timeout_ms = comm.timeout_ms;  // flat among the leaders
      // Proxied when its parent is (StageTransport), its device being the parent's.
      islands->leaders->device_shared = comm.device_shared;
    }
  }

  // The island's own communicator on the device.
  const IdRecord& island_id = ids[static_cast<size_t>(members[0])];
  if (in_island && why.empty() && island_id.failed == 0) {
    const int island_rank =
        static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
    // On the communicator's device; the caller's current device is kept.
    int current = comm.device;
    infiniCclResult_t joined = device.get_device(&current);
    if (joined == infiniCclSuccess) joined = device.set_device(comm.device);
    if (joined == infiniCclSuccess) {
      joined = device.comm_init_rank(&islands->island, static_cast<int>(members.size()),
                                     island_id.id, island_rank, nullptr, nullptr);
      device.set_device(current);
    }
    if (joined != infiniCclSuccess) {
      islands->island = nullptr;
      FromPlugin(device, joined, "comm_init (island comm_init_rank)");
      why = LastError();
    }
  }
  if (in_island && island_id.failed != 0 && why.empty()) {
    why = "the island's leader, rank " + std::to_string(members[0]) +
          ", could not make its unique id";
  }

  // Every rank's islands, or none.
  int32_t ok = why.empty() ? 1 : 0;
  result = FromPlugin(transport,
                      transport.all_reduce(&ok, &ok, 1, DLDataType{kDLInt, 32, 1}, infiniCclMin,
                                           comm.transport, nullptr),
                      "comm_init (agreeing on the islands)");
  *found = std::move(islands);
  if (result != infiniCclSuccess) return result;
  if (ok == 0) {
    return Fail(infiniCclInternalError,
                "comm_init: a hierarchical communicator's islands could not be made (" +
                    (why.empty() ? std::string("on another rank") : why) + "); " +
                    kThresholdVariable + "=never keeps all_reduce flat");
  }
  // Leaders of one host meet in shared memory, as any staged ranks do.
  if (leads) return OpenSharedSlots(*(*found)->leaders, "comm_init (the islands' leaders)");
  return infiniCclSuccess;
}

}  // namespace

infiniCclResult_t SettleIslands(StagedComm& comm) {
  std::shared_ptr<Islands> found;
  infiniCclResult_t result;
  {
    std::lock_guard<std::mutex> lock(comm.calls);
    result = FindIslands(comm, &found);
  }
  comm.islands = std::move(found);
  if (result != infiniCclSuccess) {
    FreeIslands(comm, true);
    comm.islands_use = StagedComm::IslandUse::kOff;
    return result;
  }
  comm.islands_use = comm.islands ? StagedComm::IslandUse::kOn : StagedComm::IslandUse::kOff;
  return infiniCclSuccess;
}

infiniCclResult_t ChooseIslands(StagedComm& comm, size_t count, DLDataType dtype,
                                infiniCclRedOp_t op, bool* chosen) {
  *chosen = false;
  if (comm.islands_use != StagedComm::IslandUse::kOn) return infiniCclSuccess;
  const Islands& islands = *comm.islands;
  const size_t bytes = count * ((static_cast<size_t>(dtype.bits) * dtype.lanes + 7) / 8);
  const int bit = BitOf(dtype, op);
  if (bit < 0 || static_cast<int64_t>(bytes) < islands.threshold) return infiniCclSuccess;
  if ((islands.supported[static_cast<size_t>(bit / 8)] & (1u << (bit % 8))) == 0)
    return infiniCclSuccess;
  // An average is divided on the leaders' host, which one island alone skips.
  if (op == infiniCclAvg && (!HostReduces(dtype, op) || islands.island_count < 2))
    return infiniCclSuccess;
  *chosen = true;
  return infiniCclSuccess;
}

infiniCclResult_t IslandAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                  DLDataType dtype, infiniCclRedOp_t op, StagedComm& comm,
                                  infiniCclStream_t stream) {
  // comm_abort frees the islands once this call has seen its failure.
  std::lock_guard<std::mutex> lock(comm.calls);
  const Islands& islands = *comm.islands;
  const infiniCclPlugin_t& device = Device();
  const infiniCclRedOp_t island_op = op == infiniCclAvg ? infiniCclSum : op;
  if (islands.island != nullptr) {
    const infiniCclResult_t reduced =
        device.reduce(sendbuff, recvbuff, count, dtype, island_op, 0, islands.island, stream);
    if (reduced != infiniCclSuccess)
      return FromPlugin(device, reduced, "all_reduce (island reduce)");
  }
  // One island: its reduce and broadcast are the whole all_reduce.
  if (islands.leaders != nullptr && islands.island_count > 1) {
    // The leaders' flat all_reduce (in shared memory when they share a
    // host); an average's sum is divided on the host, through the transport.
    const void* input = islands.island != nullptr ? recvbuff : sendbuff;
    const infiniCclResult_t across =
        op == infiniCclAvg
            ? TransportAllReduce(input, recvbuff, count, dtype, island_op, islands.nranks,
                                 islands.leaders, stream)
            : AllReduce(input, recvbuff, count, dtype, op, Handle(islands.leaders), stream);
    if (across != infiniCclSuccess) return across;
  }
  if (islands.island != nullptr) {
    const infiniCclResult_t broadcast =
        device.broadcast(recvbuff, recvbuff, count, dtype, 0, islands.island, stream);
    if (broadcast != infiniCclSuccess) {
      return FromPlugin(device, broadcast, "all_reduce (island broadcast)");
    }
  }
  return infiniCclSuccess;
}

void UnblockIslands(StagedComm& comm) {
  if (!comm.islands) return;
  Islands& islands = *comm.islands;
  const infiniCclPlugin_t& device = Device();
  if (islands.island != nullptr && device.comm_abort != nullptr && !islands.island_aborted) {
    islands.island_aborted = true;
    device.comm_abort(islands.island);
  }
  if (islands.leaders != nullptr &&
      !islands.leaders->aborting.exchange(true, std::memory_order_acq_rel)) {
    Transport().comm_abort(islands.leaders->transport);
  }
}

void FreeIslands(StagedComm& comm, bool abort) {
  if (!comm.islands) return;
  Islands& islands = *comm.islands;
  if (islands.island != nullptr && !islands.island_aborted) {
    const infiniCclPlugin_t& device = Device();
    if (abort && device.comm_abort != nullptr) {
      device.comm_abort(islands.island);
    } else {
      device.comm_destroy(islands.island);
    }
  }
  islands.island = nullptr;
  if (islands.leaders != nullptr) {
    FreeStagedComm(islands.leaders, abort);
    islands.leaders = nullptr;
  }
  comm.islands.reset();
}

}  // namespace infini::ccl::internal::staged
