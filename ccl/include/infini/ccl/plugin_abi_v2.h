/*
 * InfiniCCL plugin ABI, version 2.
 * Longer than 600 lines: one versioned table, which a porter reads whole.
 *
 * Shaped by the libraries a port wraps (NCCL, RCCL, HCCL, CNCL, BKCL, MCCL,
 * oneCCL), not by NCCL alone. What v2 adds over v1, and why:
 *  - unique_id_bytes: the plugin declares its id's size (HcclRootInfo is
 *    4108 bytes, cnclCliqueId 136, ncclUniqueId 128).
 *  - comm_init_ranks: several of this process's ranks, one per device, in
 *    one call (cnclInitComms, HcclCommInitAll, bkcl_comm_init_all,
 *    ncclCommInitAll). Some libraries cannot create the ranks of one process
 *    from concurrent threads; they leave INFINI_CCL_FEATURE_CONCURRENT_INIT
 *    unset and the host uses this entry instead.
 *  - features and supports(): what the plugin can do, asked before calling,
 *    so a missing average or bf16 is one clear refusal, not a failure deep
 *    inside a vendor library.
 *  - a bootstrap: the host lends the plugin the run's key-value store, so a
 *    plugin never has to start a server of its own (oneCCL's KVS, gloo).
 *  - a config whose unset fields are explicitly undefined, and an extension
 *    chain for vendor options (HCCL buffer size, NCCL CTA limits).
 *  - a device description: vendor, DLPack device type (kDLExtDev for chips
 *    DLPack has no code for) and the vendor's visibility variable.
 *  - asynchronous errors with text; optional v-collectives, gather, scatter.
 *  - optional comm_shrink and comm_revoke (appended): a new communicator
 *    without lost ranks, and outstanding work ended rather than hung.
 *  - optional comm_register and comm_deregister (appended after them):
 *    buffers registered with a communicator (ncclCommRegister).
 *  - optional comm_window_register and comm_window_deregister (appended
 *    after them): collective window registration (ncclCommWindowRegister).
 *  - optional get_link_bandwidth (appended after them): the peak bandwidth
 *    of the link between this backend's devices, for ccl_bench's verdict.
 *  - optional host_register and host_unregister (appended after it): host
 *    memory page-locked for the device's copies (cudaHostRegister), so a
 *    communicator staged through the host copies at the link's speed.
 *
 * Rules (unchanged from v1): plain C only; every call returns an
 * infiniCclResult_t and keeps a one-line explanation for get_last_error();
 * strings returned by the plugin are the plugin's; names and semantics follow
 * NCCL where a call exists there. An entry marked "Optional" may be NULL; the
 * host then refuses the call (naming the backend and the call) without
 * calling the plugin. Every other entry is required.
 */
#ifndef INFINI_CCL_PLUGIN_ABI_V2_H_
#define INFINI_CCL_PLUGIN_ABI_V2_H_

#include "infini/ccl/plugin_abi_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INFINI_CCL_PLUGIN_ABI_VERSION_V2 2
#define INFINI_CCL_PLUGIN_SYMBOL_V2 "infiniCclPlugin_v2"

/* ---- Collective kinds (for supports(), logs and the host's tables) ------- */
typedef enum {
  infiniCclCollAllReduce = 0,
  infiniCclCollBroadcast = 1,
  infiniCclCollReduce = 2,
  infiniCclCollAllGather = 3,
  infiniCclCollReduceScatter = 4,
  infiniCclCollSend = 5,
  infiniCclCollRecv = 6,
  infiniCclCollAllToAll = 7,
  infiniCclCollBarrier = 8,
  infiniCclCollAllToAllV = 9,
  infiniCclCollAllGatherV = 10,
  infiniCclCollReduceScatterV = 11,
  infiniCclCollGather = 12,
  infiniCclCollScatter = 13,
  infiniCclNumCollectives = 14
} infiniCclCollective_t;

/* constexpr in C++, so that the host's table of collectives
 * (infini/ccl/collectives.h) is checked against it at compile time. */
#ifdef __cplusplus
#define INFINI_CCL_ABI_INLINE static constexpr inline
#else
#define INFINI_CCL_ABI_INLINE static inline
#endif

/* 1 when `collective` takes a reduction operator, else 0 (also for a value
 * this header does not know). A plugin's supports() asks it, so that it
 * judges only the type, and the operator for reductions:
 *   if (infiniCclCollectiveReduces(collective)) return reducible(dtype, op);
 *   return movable(dtype);
 * A new collective is one value above and, when it reduces, one case here. */
INFINI_CCL_ABI_INLINE int infiniCclCollectiveReduces(infiniCclCollective_t collective) {
  switch (collective) {
    case infiniCclCollAllReduce:
    case infiniCclCollReduce:
    case infiniCclCollReduceScatter:
    case infiniCclCollReduceScatterV:
      return 1;
    default:
      return 0;
  }
}

/* ---- Behaviour that no entry's presence can tell (infiniCclPlugin_v2_t.features) */
/* Non-blocking communicators (config.blocking = 0): init, split and
 * collectives may return infiniCclInProgress (ncclConfig_t.blocking). */
#define INFINI_CCL_FEATURE_NONBLOCKING (1ull << 0)
/* Threads of one process may call comm_init_rank concurrently for ranks of
 * the same group (NCCL, gloo). Without it, the host creates all of a
 * process's ranks of a group with one comm_init_ranks call. */
#define INFINI_CCL_FEATURE_CONCURRENT_INIT (1ull << 1)
/* comm_abort called from another thread makes a collective blocked on the
 * communicator return (infiniCclAborted or a remote error). */
#define INFINI_CCL_FEATURE_ABORT_UNBLOCKS (1ull << 2)
/* Several ranks of one group may share a device when
 * config.allow_device_sharing = 1 (testing only). */
#define INFINI_CCL_FEATURE_DEVICE_SHARING (1ull << 3)
/* The library allows at most one rank per process (oneCCL's CPU build, MPI
 * without MPI_THREAD_MULTIPLE): the host never asks it for a second rank in
 * a process, refuses thread layouts naming the backend, and the conformance
 * suite reports them unsupported instead of missing. */
#define INFINI_CCL_FEATURE_ONE_RANK_PER_PROCESS (1ull << 4)

/* ---- Communicator configuration ------------------------------------------ */

/* "Unset": the backend chooses (NCCL_CONFIG_UNDEF_INT). Zero is a value. */
#define INFINI_CCL_CONFIG_UNDEF_INT INT32_MIN
#define INFINI_CCL_CONFIG_UNDEF_INT64 INT64_MIN

/* Extensions hang off a config as a chain (PJRT_Extension_Base). A plugin
 * skips an extension whose type it does not know. */
typedef enum { infiniCclExtensionVendorOptions = 1 } infiniCclExtensionType_t;

typedef struct infiniCclExtension {
  size_t struct_size; /* of the whole extension struct */
  infiniCclExtensionType_t type;
  const struct infiniCclExtension* next; /* NULL ends the chain */
} infiniCclExtension_t;

/* Options for one backend, as text key/value pairs (e.g. nccl: "max_ctas" =
 * "16"; hccl: "buffer_size_mb" = "200"). A plugin whose name equals `backend`
 * applies them and refuses an unknown key or a bad value with
 * infiniCclInvalidUsage naming both; other plugins skip them. The host keeps
 * the strings alive for the duration of the call only. */
typedef struct {
  infiniCclExtension_t base; /* type = infiniCclExtensionVendorOptions */
  const char* backend;
  size_t count;
  const char* const* keys;
  const char* const* values;
} infiniCclVendorOptions_t;

typedef struct {
  size_t struct_size; /* sizeof(infiniCclConfig_t) of the caller's header */
  /* 1: calls return when the work is enqueued or done. 0: init, split and
   * collectives may return infiniCclInProgress (needs
   * INFINI_CCL_FEATURE_NONBLOCKING); poll comm_get_async_error until it is
   * not. UNDEF: the backend's default, which must be blocking. */
  int32_t blocking;
  /* Milliseconds a host-side wait (connect, a blocking host collective) may
   * take before failing with infiniCclTimeout. UNDEF: backend default. */
  int64_t timeout_ms;
  /* For logs only; NULL = none. Copied by the plugin. */
  const char* comm_name;
  /* 1: this process knowingly runs several ranks on one device (needs
   * INFINI_CCL_FEATURE_DEVICE_SHARING); otherwise a plugin that detects
   * sharing fails init with infiniCclInvalidUsage. UNDEF = 0. */
  int32_t allow_device_sharing;
  /* Priority of the streams the communicator creates for itself, in the
   * vendor's convention (CUDA: lower is more urgent). UNDEF: default. */
  int32_t stream_priority;
  /* Vendor options and future extensions; NULL = none. */
  const infiniCclExtension_t* extensions;
} infiniCclConfig_t;

#define INFINI_CCL_CONFIG_INITIALIZER                                                            \
  {                                                                                              \
    sizeof(infiniCclConfig_t), INFINI_CCL_CONFIG_UNDEF_INT, INFINI_CCL_CONFIG_UNDEF_INT64, NULL, \
        INFINI_CCL_CONFIG_UNDEF_INT, INFINI_CCL_CONFIG_UNDEF_INT, NULL                           \
  }

/* ---- Bootstrap: the run's key-value store, lent by the host --------------- */

/* Keys are relative to a prefix the host gives each group (and its
 * generation), so a plugin never sees other groups' or runs' keys. Values
 * are bytes. Every entry may be called from any thread. The host keeps a
 * bootstrap (and its context) valid until every communicator made with it,
 * and every communicator split from those, is destroyed or aborted. */
typedef struct infiniCclBootstrap {
  size_t struct_size;
  void* context; /* the host's; passed back on every call */
  /* Input: key (NUL-terminated), value of `bytes` bytes. Wakes waiters. */
  infiniCclResult_t (*set)(void* context, const char* key, const void* value, size_t bytes);
  /* Waits until `key` exists (timeout_ms < 0: the host's default deadline;
   * infiniCclTimeout after it), then copies min(capacity, size) bytes to
   * `value` and sets *bytes = the value's full size (so a caller whose
   * buffer was too small can call again with a larger one). */
  infiniCclResult_t (*get)(void* context, const char* key, void* value, size_t capacity,
                           size_t* bytes, int64_t timeout_ms);
  /* Adds `delta` to the integer at `key` (missing = 0); *value = the result. */
  infiniCclResult_t (*add)(void* context, const char* key, int64_t delta, int64_t* value);
  /* Waits until every key exists, as get. */
  infiniCclResult_t (*wait)(void* context, const char* const* keys, size_t nkeys,
                            int64_t timeout_ms);
  /* Why the last failing call on this thread failed; never NULL. */
  const char* (*get_last_error)(void* context);
  /* As get, but never waits: when `key` is absent it returns success with
   * *found = 0 (a KVS's "absent -> empty"); otherwise *found = 1 and the
   * value is copied as by get. Added after the first v2 release: a plugin
   * reads it only when struct_size >= INFINI_CCL_BOOTSTRAP_TRY_GET_SIZE. */
  infiniCclResult_t (*try_get)(void* context, const char* key, void* value, size_t capacity,
                               size_t* bytes, int* found);
} infiniCclBootstrap_t;

#define INFINI_CCL_BOOTSTRAP_TRY_GET_SIZE INFINI_CCL_STRUCT_SIZE(infiniCclBootstrap_t, try_get)

/* ---- Process-wide setup, before any other call ---------------------------- */

/* What the host hands a plugin's init entry: the vendor options meant for
 * this backend (infiniCclVendorOptions_t's pairs whose backend is the
 * plugin's name, from the program and from INFINI_CCL_VENDOR_OPTIONS) and
 * the process's place in the run as the launcher described it (-1 where the
 * environment does not say). A library that reads process-wide settings
 * once (oneCCL's CCL_* variables, HCCL's buffer sizes) applies them here.
 * Valid for the duration of the call only. */
typedef struct {
  size_t struct_size; /* sizeof(infiniCclPluginInit_t) of the host's header */
  size_t option_count;
  const char* const* option_keys;
  const char* const* option_values;
  int32_t process_rank;       /* this process among all processes of the run */
  int32_t process_count;      /* processes in the run */
  int32_t local_process_rank; /* this process among those of its node */
  int32_t local_process_count;
} infiniCclPluginInit_t;

/* ---- Link description (get_link_bandwidth) -------------------------------- */

/* What get_link_bandwidth fills. The host sets struct_size; a plugin writes
 * no field its header's struct_size does not reach beyond the host's. */
typedef struct {
  size_t struct_size; /* sizeof(infiniCclLinkBandwidth_t) of the host's header */
  /* Peak bandwidth per direction between the device and its peers, in
   * GB/s (1e9 bytes per second): the sum over the links it uses (NVLink:
   * active links × per-link rate). 0: unknown (then `kind` says why). */
  double peak_GBps;
  /* One line, NUL-terminated: "NVLink 4 x 18", "PCIe gen5 x16", or
   * "unknown: <why>". */
  char kind[96];
} infiniCclLinkBandwidth_t;

/* comm_window_register's flags. */
#define INFINI_CCL_WINDOW_DEFAULT 0
/* Symmetric memory: every rank registers a buffer of the same size, which
 * collectives may address on the peers directly (NCCL_WIN_COLL_SYMMETRIC). */
#define INFINI_CCL_WINDOW_SYMMETRIC 1

/* ---- The plugin's table --------------------------------------------------- */

typedef struct {
  size_t struct_size;   /* sizeof(infiniCclPlugin_v2_t) of the plugin's header */
  uint32_t abi_version; /* INFINI_CCL_PLUGIN_ABI_VERSION_V2 */
  /* Short backend name, e.g. "nccl"; the NAME of libinfini_ccl_NAME.so. */
  const char* name;

  /* ---- Information and errors ------------------------------------------ */

  /* Version of the vendor library underneath, e.g. "NCCL 2.28.3".
   * Output: *version points at plugin-owned static text. */
  infiniCclResult_t (*get_version)(const char** version);
  /* Static description of a result code; never NULL. */
  const char* (*get_error_string)(infiniCclResult_t result);
  /* Explanation of the last failing call on the calling thread, or "".
   * Valid until the next call on this thread. Never NULL. */
  const char* (*get_last_error)(void);

  /* ---- Capabilities ------------------------------------------------------ */

  /* INFINI_CCL_FEATURE_* bits. What an optional entry offers is said by the
   * entry being non-NULL, not here. */
  uint64_t features;
  /* 1 when `collective` works on `datatype` (and, for reductions, with
   * `op`; ignored otherwise), else 0. Pure and cheap: the host asks once per
   * combination when the plugin loads and keeps the answers. */
  int (*supports)(infiniCclCollective_t collective, DLDataType datatype, infiniCclRedOp_t op);

  /* ---- Device description ------------------------------------------------ */

  /* DLPack device type of this backend's buffers: kDLCUDA, kDLROCM, kDLCPU,
   * or kDLExtDev for chips DLPack has no code for. */
  DLDeviceType device_type;
  /* "NVIDIA", "Huawei", "Cambricon", ...; "host" for CPU backends. */
  const char* device_vendor;
  /* What one device is called: "GPU", "NPU", "MLU", "XPU", "CPU". */
  const char* device_kind;
  /* Environment variable that restricts the devices a process sees
   * ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES",
   * "MLU_VISIBLE_DEVICES", ...), or NULL when there is none. */
  const char* visible_devices_env;

  /* ---- Device runtime (as v1) ---------------------------------------------- */

  /* Number of visible devices; 0 and success on a machine without any. */
  infiniCclResult_t (*get_device_count)(int* count);
  /* Make `device` current for the calling thread. */
  infiniCclResult_t (*set_device)(int device);
  infiniCclResult_t (*get_device)(int* device);
  /* Allocate `bytes` on the current device; *ptr = NULL when bytes == 0. */
  infiniCclResult_t (*mem_alloc)(void** ptr, size_t bytes);
  infiniCclResult_t (*mem_free)(void* ptr); /* NULL is ignored */
  /* Copy `bytes`, ordered on `stream`; returns once enqueued. */
  infiniCclResult_t (*memcpy_async)(void* dst, const void* src, size_t bytes,
                                    infiniCclMemcpyKind_t kind, infiniCclStream_t stream);
  infiniCclResult_t (*memset_async)(void* ptr, int value, size_t bytes, infiniCclStream_t stream);
  infiniCclResult_t (*stream_create)(infiniCclStream_t* stream);
  infiniCclResult_t (*stream_destroy)(infiniCclStream_t stream);
  infiniCclResult_t (*stream_synchronize)(infiniCclStream_t stream);
  /* Future work on `stream` waits for `event` (no host block). */
  infiniCclResult_t (*stream_wait_event)(infiniCclStream_t stream, infiniCclEvent_t event);
  infiniCclResult_t (*event_create)(infiniCclEvent_t* event);
  infiniCclResult_t (*event_destroy)(infiniCclEvent_t event);
  infiniCclResult_t (*event_record)(infiniCclEvent_t event, infiniCclStream_t stream);
  /* *done = 1 when the work before the recorded point has finished. */
  infiniCclResult_t (*event_query)(infiniCclEvent_t event, int* done);
  infiniCclResult_t (*event_synchronize)(infiniCclEvent_t event);
  /* Milliseconds between two recorded, completed events. */
  infiniCclResult_t (*event_elapsed_ms)(infiniCclEvent_t start, infiniCclEvent_t end, float* ms);

  /* ---- Communicators ------------------------------------------------------- */

  /* Size of this backend's unique id in bytes (> 0). The host moves ids as
   * opaque byte strings of exactly this size. */
  size_t unique_id_bytes;
  /* Make a new unique id; called by the group's root rank only.
   * Input: `bootstrap`, the store the group's ranks will also be given at
   * init, or NULL when the host has none (the plugin must then carry what
   * the ranks need in the id itself, as NCCL does).
   * Output: unique_id_bytes bytes at `unique_id` (caller's buffer). */
  infiniCclResult_t (*get_unique_id)(void* unique_id, const infiniCclBootstrap_t* bootstrap);
  /* Create this rank's communicator in a group of `nranks` ranks
   * (ncclCommInitRankConfig), on the calling thread's current device.
   * Collective over the group. `unique_id` is unique_id_bytes bytes from the
   * root's get_unique_id. `config` and `bootstrap` may be NULL; when the
   * root passed a bootstrap to get_unique_id, every rank passes one (the
   * same store, the same prefix). Optional when comm_init_ranks exists. */
  infiniCclResult_t (*comm_init_rank)(infiniCclComm_t* comm, int nranks, const void* unique_id,
                                      int rank, const infiniCclConfig_t* config,
                                      const infiniCclBootstrap_t* bootstrap);
  /* Create `ncomms` ranks of one group in this process, comms[i] being rank
   * ranks[i] on device devices[i], in one call (cnclInitComms,
   * HcclCommInitAll, ncclCommInitAll when all ranks are local). Collective:
   * every process holding ranks of the group calls it once for all of its
   * ranks. Leaves the calling thread's current device unspecified. Each
   * comms[i] may afterwards be driven by a different thread.
   * Optional when comm_init_rank exists. */
  infiniCclResult_t (*comm_init_ranks)(infiniCclComm_t* comms, int ncomms, const int* devices,
                                       const int* ranks, int nranks, const void* unique_id,
                                       const infiniCclConfig_t* config,
                                       const infiniCclBootstrap_t* bootstrap);
  /* Collective split (ncclCommSplit): ranks with the same `color` form a new
   * communicator, ordered by `key` then by old rank; color < 0 sets
   * *newcomm = NULL. The child may use the parent's bootstrap. Optional. */
  infiniCclResult_t (*comm_split)(infiniCclComm_t comm, int color, int key,
                                  infiniCclComm_t* newcomm, const infiniCclConfig_t* config);
  /* Wait for outstanding work, then free the communicator. */
  infiniCclResult_t (*comm_destroy)(infiniCclComm_t comm);
  /* Stop outstanding work without waiting and free the communicator; safe
   * from another thread (see INFINI_CCL_FEATURE_ABORT_UNBLOCKS). Optional:
   * without it a hung communicator can only be left to the process's end. */
  infiniCclResult_t (*comm_abort)(infiniCclComm_t comm);
  /* The communicator's asynchronous state (a peer died, a kernel failed, a
   * non-blocking call still in progress).
   * Output: *async_error; and, when `message` is not NULL, *message = a
   * one-line explanation ("" when none), owned by the communicator and valid
   * until the next call on it or its destruction. */
  infiniCclResult_t (*comm_get_async_error)(infiniCclComm_t comm, infiniCclResult_t* async_error,
                                            const char** message);
  infiniCclResult_t (*comm_count)(infiniCclComm_t comm, int* nranks);
  infiniCclResult_t (*comm_user_rank)(infiniCclComm_t comm, int* rank);

  /* ---- Grouping (ncclGroupStart/End). Optional, both or neither ----------- */
  /* Calls between group_start and group_end on the calling thread are issued
   * together at group_end (send/recv pairs, one thread driving several
   * communicators). Nests. Without them the host orders point-to-point
   * calls so that blocking ones cannot deadlock. */
  infiniCclResult_t (*group_start)(void);
  infiniCclResult_t (*group_end)(void);

  /* ---- Collectives ------------------------------------------------------- */
  /* As v1: every rank calls the same collectives in the same order with the
   * same counts, types, ops and roots; buffers are device pointers;
   * sendbuff == recvbuff is in-place as NCCL defines; each returns once the
   * work is enqueued on `stream`. Counts are in elements. */

  infiniCclResult_t (*all_reduce)(const void* sendbuff, void* recvbuff, size_t count,
                                  DLDataType datatype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                  infiniCclStream_t stream);
  infiniCclResult_t (*broadcast)(const void* sendbuff, void* recvbuff, size_t count,
                                 DLDataType datatype, int root, infiniCclComm_t comm,
                                 infiniCclStream_t stream);
  infiniCclResult_t (*reduce)(const void* sendbuff, void* recvbuff, size_t count,
                              DLDataType datatype, infiniCclRedOp_t op, int root,
                              infiniCclComm_t comm, infiniCclStream_t stream);
  /* recvbuff[r*sendcount .. (r+1)*sendcount) = sendbuff of rank r. */
  infiniCclResult_t (*all_gather)(const void* sendbuff, void* recvbuff, size_t sendcount,
                                  DLDataType datatype, infiniCclComm_t comm,
                                  infiniCclStream_t stream);
  /* recvbuff on rank r = op over ranks of sendbuff[r*recvcount ..). */
  infiniCclResult_t (*reduce_scatter)(const void* sendbuff, void* recvbuff, size_t recvcount,
                                      DLDataType datatype, infiniCclRedOp_t op,
                                      infiniCclComm_t comm, infiniCclStream_t stream);
  infiniCclResult_t (*send)(const void* sendbuff, size_t count, DLDataType datatype, int peer,
                            infiniCclComm_t comm, infiniCclStream_t stream);
  infiniCclResult_t (*recv)(void* recvbuff, size_t count, DLDataType datatype, int peer,
                            infiniCclComm_t comm, infiniCclStream_t stream);

  /* Optional. Rank r's block p (count elements) goes to rank p's block r. */
  infiniCclResult_t (*all_to_all)(const void* sendbuff, void* recvbuff, size_t count,
                                  DLDataType datatype, infiniCclComm_t comm,
                                  infiniCclStream_t stream);
  /* Optional. Returns (or its stream work completes) once every rank has
   * entered it. Without it the host uses a one-element all_reduce. */
  infiniCclResult_t (*barrier)(infiniCclComm_t comm, infiniCclStream_t stream);

  /* ---- Optional variable-size collectives, gather and scatter ------------- */
  /* Count and displacement arrays are host memory of comm_count entries, in
   * elements, valid during the call only (HcclAlltoAllV, MPI_Alltoallv). */

  /* Rank r sends sendcounts[p] elements from sendbuff + sdispls[p] to rank
   * p, and receives recvcounts[p] elements from rank p at recvbuff +
   * rdispls[p]. */
  infiniCclResult_t (*all_to_all_v)(const void* sendbuff, const size_t* sendcounts,
                                    const size_t* sdispls, void* recvbuff, const size_t* recvcounts,
                                    const size_t* rdispls, DLDataType datatype,
                                    infiniCclComm_t comm, infiniCclStream_t stream);
  /* Rank r contributes sendcount (== recvcounts[r]) elements; every rank
   * receives rank p's at recvbuff + rdispls[p]. */
  infiniCclResult_t (*all_gather_v)(const void* sendbuff, size_t sendcount, void* recvbuff,
                                    const size_t* recvcounts, const size_t* rdispls,
                                    DLDataType datatype, infiniCclComm_t comm,
                                    infiniCclStream_t stream);
  /* Rank r receives recvcount (== sendcounts[r]) elements: op over ranks of
   * their sendbuff + sdispls[r]. */
  infiniCclResult_t (*reduce_scatter_v)(const void* sendbuff, const size_t* sendcounts,
                                        const size_t* sdispls, void* recvbuff, size_t recvcount,
                                        DLDataType datatype, infiniCclRedOp_t op,
                                        infiniCclComm_t comm, infiniCclStream_t stream);
  /* Root's recvbuff[r*count ..) = sendbuff of rank r; recvbuff is ignored
   * elsewhere. */
  infiniCclResult_t (*gather)(const void* sendbuff, void* recvbuff, size_t count,
                              DLDataType datatype, int root, infiniCclComm_t comm,
                              infiniCclStream_t stream);
  /* Rank r's recvbuff = root's sendbuff[r*count ..); sendbuff is ignored
   * elsewhere. */
  infiniCclResult_t (*scatter)(const void* sendbuff, void* recvbuff, size_t count,
                               DLDataType datatype, int root, infiniCclComm_t comm,
                               infiniCclStream_t stream);

  /* ---- Optional stream capture (all four or none) ------------------------- */
  /* Work enqueued on `stream` between begin and end is recorded, not run;
   * graph_launch replays it (CUDA graphs). */
  infiniCclResult_t (*stream_begin_capture)(infiniCclStream_t stream);
  infiniCclResult_t (*stream_end_capture)(infiniCclStream_t stream, infiniCclGraph_t* graph);
  infiniCclResult_t (*graph_launch)(infiniCclGraph_t graph, infiniCclStream_t stream);
  infiniCclResult_t (*graph_destroy)(infiniCclGraph_t graph);

  /* ---- Optional process-wide setup (appended; older v2 tables end above) -- */
  /* Called once per process, right after the table is accepted and before
   * any other entry (get_version included). A failure refuses the plugin
   * with get_last_error()'s text, naming the plugin. An unknown option key
   * is infiniCclInvalidUsage naming the key. */
  infiniCclResult_t (*init)(const infiniCclPluginInit_t* init);

  /* ---- Optional fault tolerance (appended; older v2 tables end above) ----- */
  /* Model: MPI ULFM's MPI_Comm_revoke/MPI_Comm_shrink, NCCL's
   * ncclCommRevoke/ncclCommShrink. The survivors of a loss agree on who was
   * lost before calling (the launcher publishes it); the host checks the
   * list and the new communicator's rank and size, never the plugin's word. */

  /* A new communicator of the ranks of `comm` not listed (ncclCommShrink),
   * ranks renumbered in their old order to fill the gaps.
   * Called by every rank NOT in the list, each with the same list; listed
   * ranks do not call it (they may be dead). Collective over the survivors.
   * Input: `excluded_ranks`, `excluded_count` ranks of `comm`, sorted,
   * distinct, each in [0, comm_count), not the caller's (the host
   * normalises and checks them); 0 ranks makes a copy of `comm`. `config`
   * may be NULL (the parent's settings). `flags`: 0, or
   * INFINI_CCL_SHRINK_ABORT to end the parent's outstanding work first
   * (calls blocked on it return an error): use it when a peer is dead, as
   * without it a call waiting for that peer would hold the shrink.
   * Output: *new_comm, owned by the caller (comm_destroy/comm_abort).
   * `comm` stays the caller's to free: still comm_destroy or comm_abort,
   * and after INFINI_CCL_SHRINK_ABORT it serves no more work. With
   * config.blocking = 0 it may return infiniCclInProgress as comm_split.
   * A new communicator may use the parent's bootstrap. Optional. */
  infiniCclResult_t (*comm_shrink)(infiniCclComm_t comm, const int32_t* excluded_ranks,
                                   int32_t excluded_count, const infiniCclConfig_t* config,
                                   int32_t flags, infiniCclComm_t* new_comm);
  /* Ends the outstanding work of `comm` (ncclCommRevoke): calls blocked on
   * it, here or on another thread, return an error; later calls on it are
   * refused; comm_shrink, comm_destroy and comm_abort still work.
   * Not collective: each rank that learns of a loss calls it for itself
   * (usually every survivor). May return before the work has stopped, with
   * comm_get_async_error saying infiniCclInProgress until it has.
   * Safe from another thread. Optional. */
  infiniCclResult_t (*comm_revoke)(infiniCclComm_t comm);

  /* ---- Buffer registration (appended after comm_revoke) ------------------
   * Model: ncclCommRegister/ncclCommDeregister (NCCL >= 2.19: user-buffer
   * registration, so collectives on the buffer skip NCCL's own staging
   * copies and may run zero-copy or with fewer channels).
   * Registers `bytes` bytes at `buffer` (memory of this rank's device from
   * mem_alloc or the vendor's allocator) with `comm`; *handle is what
   * comm_deregister takes. Not collective (NCCL's local registration); a
   * buffer may be registered with several communicators. The buffer must
   * stay allocated until deregistered. The host deregisters every handle
   * before comm_destroy of a healthy communicator; a handle still
   * registered at comm_abort, or at comm_destroy of a revoked
   * communicator (where deregistering could wait for a lost peer), is the
   * plugin's to free with the communicator, as NCCL does. A collective on
   * unregistered memory stays correct: registration only makes it faster.
   * comm_register and comm_deregister are both set or both NULL.
   * Optional. */
  infiniCclResult_t (*comm_register)(infiniCclComm_t comm, void* buffer, size_t bytes,
                                     void** handle);
  infiniCclResult_t (*comm_deregister)(infiniCclComm_t comm, void* handle);

  /* ---- Window registration (appended after comm_deregister) --------------
   * Model: ncclCommWindowRegister/ncclCommWindowDeregister (NCCL >= 2.27).
   * As comm_register, but collective: every rank of `comm` calls it, in the
   * same order, with a buffer of the same `bytes`; comm_window_deregister
   * is collective too. `flags`: INFINI_CCL_WINDOW_* (SYMMETRIC: NCCL's
   * symmetric kernels may then run). The buffer comes from mem_alloc (NCCL
   * needs cuMem memory, which the nccl plugin's mem_alloc gives). Same
   * lifetime rules as comm_register. Both set or both NULL. Optional. */
  infiniCclResult_t (*comm_window_register)(infiniCclComm_t comm, void* buffer, size_t bytes,
                                            uint32_t flags, void** handle);
  infiniCclResult_t (*comm_window_deregister)(infiniCclComm_t comm, void* handle);

  /* ---- Link description (appended after comm_window_deregister) ----------
   * The peak bandwidth of the link between `device` (an index as
   * set_device takes) and its peers, and the link's kind. A plugin that
   * cannot tell fills peak_GBps = 0 and says why in `kind`, and succeeds.
   * Not on a hot path: may load a vendor management library at call time.
   * Optional. */
  infiniCclResult_t (*get_link_bandwidth)(int device, infiniCclLinkBandwidth_t* link);

  /* ---- Host memory for the device's copies (appended after get_link_bandwidth)
   * Model: cudaHostRegister/cudaHostUnregister (hipHostRegister on ROCm).
   * Page-locks `bytes` bytes of host memory at `ptr` (memory the caller
   * allocated: malloc, mmap, a shared segment) so that memcpy_async to and
   * from it runs at the link's full speed and truly asynchronously, for
   * every device of this backend in this process. Ranges do not overlap a
   * range already registered. host_unregister takes the `ptr` given to
   * host_register; the caller unregisters before it frees or unmaps the
   * memory. A copy to or from registered memory gives the same bytes as to
   * or from pageable memory: registration only makes it faster. The host
   * uses it for the staging buffers of staged communicators (and goes on
   * with pageable memory when it fails). Both set or both NULL. Optional. */
  infiniCclResult_t (*host_register)(void* ptr, size_t bytes);
  infiniCclResult_t (*host_unregister)(void* ptr);

  /* ---- Streams that wait for the host (appended after host_unregister) ---
   * Model: cuStreamWaitValue32 with CU_STREAM_WAIT_VALUE_GEQ on host memory
   * mapped for the device (hipStreamWaitValue32 on ROCm).
   * host_flag_create: *flag = a 32-bit word of host memory, zero, that any
   * host thread may write (an atomic release store) and that every device
   * of this backend in this process can read. host_flag_destroy frees it,
   * once no stream waits on it any more.
   * stream_wait_host_flag: work enqueued on `stream` after this call runs
   * only once (int32_t)(*flag - value) >= 0 (a cyclic comparison, so a
   * counter may wrap), without blocking the calling thread; a stream may
   * wait on a flag that another thread writes later.
   * The host uses them so that a staged collective returns as soon as it
   * is enqueued: a thread of the communicator runs the host part and
   * releases the caller's stream by writing the flag. All three or none.
   * Optional: without them a staged call returns after its host part. */
  infiniCclResult_t (*host_flag_create)(uint32_t** flag);
  infiniCclResult_t (*host_flag_destroy)(uint32_t* flag);
  infiniCclResult_t (*stream_wait_host_flag)(infiniCclStream_t stream, const uint32_t* flag,
                                             uint32_t value);

  /* ---- Streams that signal the host (appended after stream_wait_host_flag)
   * Model: cuStreamWriteValue32 on host memory mapped for the device, with
   * its default memory barrier (hipStreamWriteValue32 on ROCm).
   * Once the work enqueued on `stream` before this call is done, the device
   * stores `value` into *flag (a flag from host_flag_create), and every byte
   * that work wrote to host memory is visible to a host thread that reads
   * the flag with an acquire load and sees `value`. The device runs to that
   * point by itself: no host call on the stream, its events or its device is
   * needed for the store to happen.
   * The host uses it so that a staged collective's thread never calls the
   * device runtime: it polls words the stream writes when the collective's
   * input has reached host memory, and releases the stream with
   * stream_wait_host_flag. Set only with the three entries above.
   * Optional: without it a staged call returns after its host part. */
  infiniCclResult_t (*stream_write_host_flag)(infiniCclStream_t stream, uint32_t* flag,
                                              uint32_t value);
} infiniCclPlugin_v2_t;

/* comm_shrink's flags. */
#define INFINI_CCL_SHRINK_DEFAULT 0
/* End the parent's outstanding work first (NCCL_SHRINK_ABORT): for a
 * parent whose peer is dead. */
#define INFINI_CCL_SHRINK_ABORT 1

/* A table has comm_shrink and comm_revoke only when its struct_size
 * reaches them (the host reads shorter tables as NULL there). */
#define INFINI_CCL_PLUGIN_V2_REVOKE_SIZE INFINI_CCL_STRUCT_SIZE(infiniCclPlugin_v2_t, comm_revoke)

/* A table has comm_register and comm_deregister only when its struct_size
 * reaches them. The host refuses to load a table with one but not the
 * other. */
#define INFINI_CCL_PLUGIN_V2_REGISTER_SIZE \
  INFINI_CCL_STRUCT_SIZE(infiniCclPlugin_v2_t, comm_deregister)

/* Likewise comm_window_register and comm_window_deregister. */
#define INFINI_CCL_PLUGIN_V2_WINDOW_SIZE \
  INFINI_CCL_STRUCT_SIZE(infiniCclPlugin_v2_t, comm_window_deregister)

/* Likewise get_link_bandwidth. */
#define INFINI_CCL_PLUGIN_V2_LINK_SIZE \
  INFINI_CCL_STRUCT_SIZE(infiniCclPlugin_v2_t, get_link_bandwidth)

/* Likewise host_register and host_unregister. */
#define INFINI_CCL_PLUGIN_V2_HOST_REGISTER_SIZE \
  INFINI_CCL_STRUCT_SIZE(infiniCclPlugin_v2_t, host_unregister)

/* Likewise host_flag_create, host_flag_destroy and stream_wait_host_flag. */
#define INFINI_CCL_PLUGIN_V2_HOST_FLAG_SIZE \
  INFINI_CCL_STRUCT_SIZE(infiniCclPlugin_v2_t, stream_wait_host_flag)

/* A table has stream_write_host_flag only when its struct_size reaches it;
 * the host refuses it without the three host flag entries. */
#define INFINI_CCL_PLUGIN_V2_HOST_FLAG_WRITE_SIZE \
  INFINI_CCL_STRUCT_SIZE(infiniCclPlugin_v2_t, stream_write_host_flag)

/* The smallest v2 table the host accepts: up to the last required entry.
 * Entries after it that an older v2 plugin's table lacks count as NULL. */
#define INFINI_CCL_PLUGIN_V2_MIN_SIZE INFINI_CCL_STRUCT_SIZE(infiniCclPlugin_v2_t, recv)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* INFINI_CCL_PLUGIN_ABI_V2_H_ */
