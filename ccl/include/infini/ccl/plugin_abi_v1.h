/*
 * InfiniCCL plugin ABI, version 1 (frozen).
 *
 * The first ABI, shaped by NCCL and gloo: a 128-byte unique id, one rank per
 * comm_init_rank call, every collective but all_to_all mandatory. Plugins
 * built against it export
 *
 *   INFINI_CCL_PLUGIN_EXPORT const infiniCclPlugin_v1_t infiniCclPlugin_v1;
 *
 * and still load: the host adapts a v1 table to the current version (see
 * plugin_abi.h). Nothing in this file changes any more; new plugins use v2.
 */
#ifndef INFINI_CCL_PLUGIN_ABI_V1_H_
#define INFINI_CCL_PLUGIN_ABI_V1_H_

#include "infini/ccl/plugin_abi_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INFINI_CCL_PLUGIN_ABI_VERSION_V1 1
#define INFINI_CCL_PLUGIN_SYMBOL_V1 "infiniCclPlugin_v1"

/* Opaque bytes that the group's root makes with get_unique_id and sends to
 * every other rank out of band. Same size as ncclUniqueId. */
#define INFINI_CCL_UNIQUE_ID_BYTES_V1 128
typedef struct {
  char internal[INFINI_CCL_UNIQUE_ID_BYTES_V1];
} infiniCclUniqueId_v1;

/* Communicator options. Callers set struct_size = sizeof(infiniCclConfig_v1_t)
 * so that a plugin built against a newer header can tell which fields exist.
 * Zero-filled fields mean "backend default". */
typedef struct {
  size_t struct_size;
  /* 1 (default): calls return when the operation is enqueued or done.
   * 0: comm_init_rank, comm_split and collectives may return
   * infiniCclInProgress; poll comm_get_async_error until it is not. This is
   * what lets a watchdog abort a hung communicator (NCCL's config.blocking). */
  int blocking;
  /* Milliseconds a host-side wait (connect, a blocking host collective) may
   * take before it fails with infiniCclTimeout. 0 = backend default. */
  int64_t timeout_ms;
  /* For logs only; may be NULL. Copied by the plugin. */
  const char* comm_name;
  /* Nonzero: this process knowingly runs several ranks on one device (for
   * testing communication logic). A backend that cannot share a device fails
   * comm_init_rank with infiniCclInvalidUsage. */
  int allow_device_sharing;
} infiniCclConfig_v1_t;

typedef struct {
  size_t struct_size;   /* sizeof(infiniCclPlugin_v1_t) of the plugin's header */
  uint32_t abi_version; /* INFINI_CCL_PLUGIN_ABI_VERSION_V1 of the plugin's header */
  /* Short backend name, e.g. "nccl". */
  const char* name;

  /* ---- Information and errors ------------------------------------------ */

  /* Version of the vendor library underneath, e.g. "NCCL 2.28.3".
   * Output: *version points at plugin-owned static text. */
  infiniCclResult_t (*get_version)(const char** version);
  /* Static description of a result code; never NULL. */
  const char* (*get_error_string)(infiniCclResult_t result);
  /* Explanation of the last failing call on the calling thread, or "" if
   * none. Valid until the next call on this thread. Never NULL. */
  const char* (*get_last_error)(void);

  /* ---- Device runtime -------------------------------------------------- */
  /* Enough for tests, benchmarks and examples to allocate, copy and time
   * buffers without knowing the vendor. Host backends have one device type,
   * kDLCPU, and implement these on the host. */

  /* The kind of device this backend's buffers live on (kDLCUDA, kDLCPU). */
  DLDeviceType device_type;
  /* Number of devices visible to this process (honours the vendor's
   * visibility variable, e.g. CUDA_VISIBLE_DEVICES). A machine without
   * devices yields 0 and success. */
  infiniCclResult_t (*get_device_count)(int* count);
  /* Make `device` current for the calling thread; later allocations, streams
   * and communicators of this thread use it. */
  infiniCclResult_t (*set_device)(int device);
  infiniCclResult_t (*get_device)(int* device);
  /* Allocate `bytes` on the current device. *ptr = NULL when bytes == 0. */
  infiniCclResult_t (*mem_alloc)(void** ptr, size_t bytes);
  /* Free memory from mem_alloc. NULL is ignored. */
  infiniCclResult_t (*mem_free)(void* ptr);
  /* Copy `bytes`, ordered on `stream`; returns once enqueued. */
  infiniCclResult_t (*memcpy_async)(void* dst, const void* src, size_t bytes,
                                    infiniCclMemcpyKind_t kind, infiniCclStream_t stream);
  /* Set `bytes` bytes to `value`, ordered on `stream`. */
  infiniCclResult_t (*memset_async)(void* ptr, int value, size_t bytes, infiniCclStream_t stream);
  infiniCclResult_t (*stream_create)(infiniCclStream_t* stream);
  infiniCclResult_t (*stream_destroy)(infiniCclStream_t stream);
  /* Block the host until all work on `stream` is done. */
  infiniCclResult_t (*stream_synchronize)(infiniCclStream_t stream);
  /* Make future work on `stream` wait for `event` (no host block). */
  infiniCclResult_t (*stream_wait_event)(infiniCclStream_t stream, infiniCclEvent_t event);
  infiniCclResult_t (*event_create)(infiniCclEvent_t* event);
  infiniCclResult_t (*event_destroy)(infiniCclEvent_t event);
  infiniCclResult_t (*event_record)(infiniCclEvent_t event, infiniCclStream_t stream);
  /* *done = 1 when the work before the recorded point has finished. */
  infiniCclResult_t (*event_query)(infiniCclEvent_t event, int* done);
  infiniCclResult_t (*event_synchronize)(infiniCclEvent_t event);
  /* Milliseconds between two recorded, completed events. */
  infiniCclResult_t (*event_elapsed_ms)(infiniCclEvent_t start, infiniCclEvent_t end, float* ms);

  /* ---- Communicators ---------------------------------------------------- */

  /* Make a new unique id. Called by the group's root rank only; the bytes
   * are sent to the other ranks by the caller (e.g. through a store). */
  infiniCclResult_t (*get_unique_id)(infiniCclUniqueId_v1* unique_id);
  /* Create this rank's communicator in a group of `nranks` ranks identified
   * by `unique_id` (ncclCommInitRankConfig). Collective: every rank of the
   * group must call it. The communicator uses the calling thread's current
   * device. Several threads of one process may each create a rank of the
   * same group concurrently. `config` may be NULL. */
  infiniCclResult_t (*comm_init_rank)(infiniCclComm_t* comm, int nranks,
                                      infiniCclUniqueId_v1 unique_id, int rank,
                                      const infiniCclConfig_v1_t* config);
  /* Collective split (ncclCommSplit): ranks with the same `color` form a
   * new communicator, ordered by `key` then by old rank. color < 0 means
   * "not in any new communicator": *newcomm is set to NULL. */
  infiniCclResult_t (*comm_split)(infiniCclComm_t comm, int color, int key,
                                  infiniCclComm_t* newcomm, const infiniCclConfig_v1_t* config);
  /* Wait for outstanding work, then free the communicator. */
  infiniCclResult_t (*comm_destroy)(infiniCclComm_t comm);
  /* Stop outstanding work without waiting and free the communicator. Safe
   * to call from another thread while a collective on `comm` is blocked: the
   * blocked call then returns an error (infiniCclAborted or a remote error). */
  infiniCclResult_t (*comm_abort)(infiniCclComm_t comm);
  /* Error that happened asynchronously on the communicator (a peer died, a
   * kernel failed, a non-blocking call still in progress). */
  infiniCclResult_t (*comm_get_async_error)(infiniCclComm_t comm, infiniCclResult_t* async_error);
  infiniCclResult_t (*comm_count)(infiniCclComm_t comm, int* nranks);
  infiniCclResult_t (*comm_user_rank)(infiniCclComm_t comm, int* rank);

  /* ---- Grouping (ncclGroupStart/End) ------------------------------------ */
  /* Calls between group_start and group_end on the calling thread are issued
   * together at group_end; needed for send/recv pairs that would otherwise
   * deadlock, and for one thread driving several communicators. Nests. */
  infiniCclResult_t (*group_start)(void);
  infiniCclResult_t (*group_end)(void);

  /* ---- Collectives ------------------------------------------------------- */
  /* Every rank of `comm` calls the same collectives in the same order with
   * the same count, datatype, op and root. Buffers are device pointers of the
   * communicator's device type. sendbuff == recvbuff is in-place, with the
   * in-place layouts NCCL defines. Returns once enqueued on `stream`. */

  /* recvbuff[i] = op over ranks of sendbuff[i], on every rank; count elements. */
  infiniCclResult_t (*all_reduce)(const void* sendbuff, void* recvbuff, size_t count,
                                  DLDataType datatype, infiniCclRedOp_t op, infiniCclComm_t comm,
                                  infiniCclStream_t stream);
  /* Copy root's sendbuff (count elements) to every rank's recvbuff. */
  infiniCclResult_t (*broadcast)(const void* sendbuff, void* recvbuff, size_t count,
                                 DLDataType datatype, int root, infiniCclComm_t comm,
                                 infiniCclStream_t stream);
  /* Like all_reduce, but only root's recvbuff receives the result. */
  infiniCclResult_t (*reduce)(const void* sendbuff, void* recvbuff, size_t count,
                              DLDataType datatype, infiniCclRedOp_t op, int root,
                              infiniCclComm_t comm, infiniCclStream_t stream);
  /* recvbuff[r*sendcount .. (r+1)*sendcount) = sendbuff of rank r. */
  infiniCclResult_t (*all_gather)(const void* sendbuff, void* recvbuff, size_t sendcount,
                                  DLDataType datatype, infiniCclComm_t comm,
                                  infiniCclStream_t stream);
  /* recvbuff (recvcount elements) on rank r = op over ranks of
   * sendbuff[r*recvcount .. (r+1)*recvcount). */
  infiniCclResult_t (*reduce_scatter)(const void* sendbuff, void* recvbuff, size_t recvcount,
                                      DLDataType datatype, infiniCclRedOp_t op,
                                      infiniCclComm_t comm, infiniCclStream_t stream);
  /* Point to point; must be matched by recv on `peer` with the same count
   * and datatype. Inside a group, any number may be outstanding. */
  infiniCclResult_t (*send)(const void* sendbuff, size_t count, DLDataType datatype, int peer,
                            infiniCclComm_t comm, infiniCclStream_t stream);
  infiniCclResult_t (*recv)(void* recvbuff, size_t count, DLDataType datatype, int peer,
                            infiniCclComm_t comm, infiniCclStream_t stream);
  /* Every rank sends sendbuff[p*count .. (p+1)*count) to rank p and receives
   * rank p's block into recvbuff[p*count ..]. May be NULL (unsupported). */
  infiniCclResult_t (*all_to_all)(const void* sendbuff, void* recvbuff, size_t count,
                                  DLDataType datatype, infiniCclComm_t comm,
                                  infiniCclStream_t stream);
  /* Returns (or its stream work completes) once every rank has entered it. */
  infiniCclResult_t (*barrier)(infiniCclComm_t comm, infiniCclStream_t stream);

  /* ---- Optional: stream capture (all four NULL when unsupported) --------- */
  /* Work enqueued on `stream` between begin and end (collectives included) is
   * recorded, not run; graph_launch replays it. This is how small collectives
   * reach latencies that eager launches cannot (CUDA graphs). */
  infiniCclResult_t (*stream_begin_capture)(infiniCclStream_t stream);
  infiniCclResult_t (*stream_end_capture)(infiniCclStream_t stream, infiniCclGraph_t* graph);
  infiniCclResult_t (*graph_launch)(infiniCclGraph_t graph, infiniCclStream_t stream);
  infiniCclResult_t (*graph_destroy)(infiniCclGraph_t graph);
} infiniCclPlugin_v1_t;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* INFINI_CCL_PLUGIN_ABI_V1_H_ */
