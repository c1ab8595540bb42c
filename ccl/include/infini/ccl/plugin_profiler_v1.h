/*
 * InfiniCCL profiler interface, version 1: how a backend plugin reports
 * events of its own (the algorithm, protocol and channels it chose for a
 * collective) into the host's communication trace (docs/tracing.md,
 * "Events a plugin reports"; docs/porting.md).
 *
 * Separate from the plugin table (plugin_abi.h) and versioned on its own,
 * as NCCL's profiler plugin is from its net plugin: a plugin that has no
 * events to report exports nothing, and the table's version does not move
 * when this interface does. A plugin that reports exports, beside its
 * table, in the same library:
 *
 *   INFINI_CCL_PLUGIN_EXPORT const infiniCclProfiler_v1_t infiniCclProfiler_v1 = {
 *       .struct_size = sizeof(infiniCclProfiler_v1_t),
 *       .version = INFINI_CCL_PROFILER_VERSION_V1,
 *       .set_callback = &MySetCallback};
 *
 * The host looks the symbol up (dlsym) when it loads the backend, and only
 * while tracing is on (INFINI_CCL_TRACE_DIR) does it call set_callback; a
 * plugin whose callback was never set reports nothing and pays nothing.
 */
#ifndef INFINI_CCL_PLUGIN_PROFILER_V1_H_
#define INFINI_CCL_PLUGIN_PROFILER_V1_H_

#include <stddef.h>
#include <stdint.h>

#include "infini/ccl/plugin_abi_common.h"

#ifdef __cplusplus
extern "C" {
#endif

#define INFINI_CCL_PROFILER_VERSION_V1 1
#define INFINI_CCL_PROFILER_SYMBOL_V1 "infiniCclProfiler_v1"

/* seq's value when the plugin does not number its operations: the host
 * gives the event the number of the communicator's call in progress on the
 * reporting thread (the same as that call's "ccl" span). */
#define INFINI_CCL_PROFILER_SEQ_HOST UINT64_MAX

/* One event. Grows only at its end: the host reads the fields that
 * struct_size covers (INFINI_CCL_STRUCT_SIZE). Strings are the plugin's and
 * need live only during the callback; the host copies them. */
typedef struct {
  size_t struct_size;    /* sizeof(infiniCclProfilerEvent_v1_t) as the plugin was built */
  const char* name;      /* the operation, as the trace names it: "all_reduce", "broadcast" */
  const char* algorithm; /* the plugin's choice ("ring", "tree", "halving_doubling"); NULL: none */
  const char* protocol;  /* ("LL", "LL128", "Simple"); NULL: none */
  int32_t channels;      /* channels (rings, streams) it ran on; -1: not said */
  uint64_t bytes;        /* the bytes the operation moved, the plugin's count; 0: not said */
  int64_t start_ns;      /* the event's start and end: CLOCK_REALTIME, ns since the epoch */
  int64_t end_ns;
  infiniCclComm_t comm; /* the communicator it ran on (the host names its group and rank) */
  uint64_t seq;         /* the plugin's number of the operation on comm, or _SEQ_HOST */
} infiniCclProfilerEvent_v1_t;

/* Called by the plugin, on any of its threads, once per event; returns
 * quickly (the host copies the event into a ring; no I/O) and never calls
 * back into the plugin. */
typedef void (*infiniCclProfilerCallback_v1_t)(void* context,
                                               const infiniCclProfilerEvent_v1_t* event);

typedef struct {
  size_t struct_size; /* sizeof(infiniCclProfiler_v1_t) as the plugin was built */
  int32_t version;    /* INFINI_CCL_PROFILER_VERSION_V1 */
  /* Where events go from now on. Input: callback (NULL: report no more) and
   * the context to pass it. Called by the host once, when it loads the
   * backend, before any communicator is made (plugins are never unloaded:
   * the callback stays valid for the process's life).
   * Output: infiniCclSuccess, or a code when the plugin cannot report (the
   * host then records none of its events and says so once). */
  infiniCclResult_t (*set_callback)(infiniCclProfilerCallback_v1_t callback, void* context);
} infiniCclProfiler_v1_t;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* INFINI_CCL_PLUGIN_PROFILER_V1_H_ */
