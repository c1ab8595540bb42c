/*
 * InfiniCCL plugin ABI: what every version shares.
 *
 * Result codes, reduction operators, opaque handles and the struct-size
 * macro. Never changes incompatibly: a value added here is added at the end.
 * See plugin_abi.h for the rules of the ABI and the current version.
 */
#ifndef INFINI_CCL_PLUGIN_ABI_COMMON_H_
#define INFINI_CCL_PLUGIN_ABI_COMMON_H_

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Put before the definition of an exported table:
 *   INFINI_CCL_PLUGIN_EXPORT const infiniCclPlugin_v2_t infiniCclPlugin_v2 = {...};
 * In C++ a namespace-scope const has internal linkage unless declared
 * extern, and plugins are built with hidden visibility: this spells both. */
#ifdef __cplusplus
#define INFINI_CCL_PLUGIN_EXPORT extern "C" __attribute__((visibility("default")))
#else
#define INFINI_CCL_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* Bytes of `type` up to and including `last_field` (PJRT_STRUCT_SIZE). A
 * struct that grows only at its end can be read by a host or plugin built
 * against an older header: each side compares struct_size with this for the
 * last field it needs. */
#define INFINI_CCL_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/* Result codes say whose fault a failure is, as NCCL's do. */
typedef enum {
  infiniCclSuccess = 0,
  infiniCclUnhandledDeviceError = 1, /* the device runtime (e.g. CUDA) failed */
  infiniCclSystemError = 2,          /* a system call or the network failed */
  infiniCclInternalError = 3,        /* a bug in the plugin or vendor library */
  infiniCclInvalidArgument = 4,      /* the caller's arguments are wrong */
  infiniCclInvalidUsage = 5,         /* the user's configuration is wrong */
  infiniCclRemoteError = 6,          /* a peer failed or went away */
  infiniCclInProgress = 7,           /* non-blocking operation not finished */
  infiniCclTimeout = 8,              /* a wait exceeded its deadline */
  infiniCclAborted = 9,              /* the communicator was aborted */
  infiniCclUnsupported = 10,         /* not implemented by this backend */
  infiniCclNumResults = 11
} infiniCclResult_t;

/* Reduction operators; values match ncclRedOp_t. */
typedef enum {
  infiniCclSum = 0,
  infiniCclProd = 1,
  infiniCclMax = 2,
  infiniCclMin = 3,
  infiniCclAvg = 4,
  infiniCclNumOps = 5
} infiniCclRedOp_t;

/* DLPack 1.1 type codes for types Debian's dlpack 0.6 header lacks. */
#define INFINI_CCL_DL_BOOL 6
#define INFINI_CCL_DL_FLOAT8_E4M3FN 10
#define INFINI_CCL_DL_FLOAT8_E5M2 12

typedef struct infiniCclComm* infiniCclComm_t;     /* a communicator */
typedef struct infiniCclStream* infiniCclStream_t; /* backend stream, NULL = default */
typedef struct infiniCclEvent* infiniCclEvent_t;   /* backend event */
typedef struct infiniCclGraph* infiniCclGraph_t;   /* captured stream work */

typedef enum {
  infiniCclMemcpyHostToHost = 0,
  infiniCclMemcpyHostToDevice = 1,
  infiniCclMemcpyDeviceToHost = 2,
  infiniCclMemcpyDeviceToDevice = 3
} infiniCclMemcpyKind_t;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* INFINI_CCL_PLUGIN_ABI_COMMON_H_ */
