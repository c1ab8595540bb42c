/*
 * InfiniCCL plugin ABI: the header a vendor plugin includes.
 *
 * A vendor backend is one shared library, libinfini_ccl_<name>.so, that
 * exports one symbol per ABI version it implements, a struct of function
 * pointers that begins with `struct_size` and `abi_version`:
 *
 *   INFINI_CCL_PLUGIN_EXPORT const infiniCclPlugin_v2_t infiniCclPlugin_v2 = {...};
 *
 * The host looks for the newest symbol it knows (v2), then older ones (v1).
 * It only ever works with the newest table: an older plugin's table is
 * adapted to it by one adapter per older version (ccl/src/plugin_versions.h),
 * as NCCL's core does for its net and tuner plugins. A plugin may export
 * several versions. The host refuses, with one line saying which versions it
 * found and which it supports, a plugin it cannot read.
 *
 * Versions: plugin_abi_v1.h (frozen), plugin_abi_v2.h (current). Shared
 * types: plugin_abi_common.h. docs/porting.md maps every entry to the calls
 * of NCCL, RCCL, HCCL, CNCL, BKCL, MCCL and oneCCL.
 */
#ifndef INFINI_CCL_PLUGIN_ABI_H_
#define INFINI_CCL_PLUGIN_ABI_H_

#include "infini/ccl/plugin_abi_common.h"
#include "infini/ccl/plugin_abi_v1.h"
#include "infini/ccl/plugin_abi_v2.h"

/* The version this header describes, and what a new plugin implements. */
#define INFINI_CCL_PLUGIN_ABI_VERSION INFINI_CCL_PLUGIN_ABI_VERSION_V2
#define INFINI_CCL_PLUGIN_SYMBOL INFINI_CCL_PLUGIN_SYMBOL_V2

#ifdef __cplusplus
extern "C" {
#endif
/* The current table, by a name that does not change with the version: the
 * host's code uses it, so a new version is one edit here. A plugin names
 * the version it implements (infiniCclPlugin_v2_t). */
typedef infiniCclPlugin_v2_t infiniCclPlugin_t;
#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* INFINI_CCL_PLUGIN_ABI_H_ */
