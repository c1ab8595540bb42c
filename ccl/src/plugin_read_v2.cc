// ABI v2, the current version: the exported table checked and copied, so
// that entries an older v2 header lacked read as NULL.
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "infini/ccl/error.h"
#include "plugin_versions.h"
#include "table_checks.h"

namespace infini::ccl::internal {
namespace {

// A unique id travels through the store as one value; beyond this it is a
// corrupt table, not a real id (HCCL's, the largest known, is 4108 bytes).
constexpr size_t kMaxUniqueIdBytes = size_t{1} << 20;

}  // namespace

const infiniCclPlugin_t* ReadV2Table(const void* symbol, const std::string& library_path) {
  const auto& plugin = *static_cast<const infiniCclPlugin_v2_t*>(symbol);
  RequireHeader(library_path, INFINI_CCL_PLUGIN_SYMBOL_V2, INFINI_CCL_PLUGIN_ABI_VERSION_V2,
                plugin.abi_version, plugin.struct_size, INFINI_CCL_PLUGIN_V2_MIN_SIZE);
  // Our own copy: entries past the plugin's struct_size (an older v2 header)
  // are NULL, and entries a newer header added after ours are ignored.
  auto copy = std::make_unique<infiniCclPlugin_v2_t>();
  std::memcpy(copy.get(), &plugin, std::min(plugin.struct_size, sizeof(infiniCclPlugin_v2_t)));
  const infiniCclPlugin_v2_t& table = *copy;
  // Registration comes as a pair: a handle comm_register gives must have a
  // way back.
  if ((table.comm_register == nullptr) != (table.comm_deregister == nullptr)) {
    throw LoadError(library_path + ": " + INFINI_CCL_PLUGIN_SYMBOL_V2 + " has " +
                    (table.comm_register != nullptr ? "comm_register without comm_deregister"
                                                    : "comm_deregister without comm_register") +
                    ": expected both or neither");
  }
  if ((table.comm_window_register == nullptr) != (table.comm_window_deregister == nullptr)) {
    throw LoadError(library_path + ": " + INFINI_CCL_PLUGIN_SYMBOL_V2 + " has " +
                    (table.comm_window_register != nullptr
                         ? "comm_window_register without comm_window_deregister"
                         : "comm_window_deregister without comm_window_register") +
                    ": expected both or neither");
  }
  RequireEntries({Named("name", table.name),
                  Named("get_version", table.get_version),
                  Named("get_error_string", table.get_error_string),
                  Named("get_last_error", table.get_last_error),
                  Named("supports", table.supports),
                  Named("device_vendor", table.device_vendor),
                  Named("device_kind", table.device_kind),
                  Named("get_device_count", table.get_device_count),
                  Named("set_device", table.set_device),
                  Named("get_device", table.get_device),
                  Named("mem_alloc", table.mem_alloc),
                  Named("mem_free", table.mem_free),
                  Named("memcpy_async", table.memcpy_async),
                  Named("memset_async", table.memset_async),
                  Named("stream_create", table.stream_create),
                  Named("stream_destroy", table.stream_destroy),
                  Named("stream_synchronize", table.stream_synchronize),
                  Named("stream_wait_event", table.stream_wait_event),
                  Named("event_create", table.event_create),
                  Named("event_destroy", table.event_destroy),
                  Named("event_record", table.event_record),
                  Named("event_query", table.event_query),
                  Named("event_synchronize", table.event_synchronize),
                  Named("event_elapsed_ms", table.event_elapsed_ms),
                  Named("get_unique_id", table.get_unique_id),
                  Named("comm_destroy", table.comm_destroy),
                  Named("comm_get_async_error", table.comm_get_async_error),
                  Named("comm_count", table.comm_count),
                  Named("comm_user_rank", table.comm_user_rank),
                  Named("all_reduce", table.all_reduce),
                  Named("broadcast", table.broadcast),
                  Named("reduce", table.reduce),
                  Named("all_gather", table.all_gather),
                  Named("reduce_scatter", table.reduce_scatter),
                  Named("send", table.send),
                  Named("recv", table.recv)},
                 library_path, 2);
  if (table.comm_init_rank == nullptr && table.comm_init_ranks == nullptr) {
    throw LoadError("backend plugin " + library_path +
                    " leaves both 'comm_init_rank' and 'comm_init_ranks' empty: expected at least "
                    "one way to create a communicator");
  }
  if (table.unique_id_bytes == 0 || table.unique_id_bytes > kMaxUniqueIdBytes) {
    throw LoadError("backend plugin " + library_path +
                    " declares unique_id_bytes=" + std::to_string(table.unique_id_bytes) +
                    ", expected 1.." + std::to_string(kMaxUniqueIdBytes));
  }
  RequireAllOrNone({Named("group_start", table.group_start), Named("group_end", table.group_end)},
                   library_path);
  RequireAllOrNone({Named("host_register", table.host_register),
                    Named("host_unregister", table.host_unregister)},
                   library_path);
  RequireAllOrNone({Named("host_flag_create", table.host_flag_create),
                    Named("host_flag_destroy", table.host_flag_destroy),
                    Named("stream_wait_host_flag", table.stream_wait_host_flag)},
                   library_path);
  if (table.stream_write_host_flag != nullptr && table.host_flag_create == nullptr) {
    throw LoadError("backend plugin " + library_path +
                    " has stream_write_host_flag without host_flag_create, host_flag_destroy and "
                    "stream_wait_host_flag: expected those three with it");
  }
  RequireDeclaredEntries(table, library_path);
  RequireAllOrNone(
      {Named("stream_begin_capture", table.stream_begin_capture),
       Named("stream_end_capture", table.stream_end_capture),
       Named("graph_launch", table.graph_launch), Named("graph_destroy", table.graph_destroy)},
      library_path);
  // Kept for the life of the process, like the library itself: static
  // destructors may still call through it. Held by a never-destroyed list,
  // so it stays reachable rather than leaked.
  static std::mutex mutex;
  static auto* tables = new std::vector<std::unique_ptr<infiniCclPlugin_v2_t>>();
  std::lock_guard<std::mutex> lock(mutex);
  tables->push_back(std::move(copy));
  return tables->back().get();
}

}  // namespace infini::ccl::internal
