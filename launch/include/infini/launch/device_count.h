// --nproc_per_node=auto|gpu|cpu.
#pragma once

#include <string>

namespace infini::launch {

// CPUs this process may run on (sched_getaffinity).
int CpuCount();

// Runs `<bin_dir>/ccl_info --ccl_backend=<backend> --device_count` and returns
// the device count it prints. Throws LaunchError saying what failed.
int BackendDeviceCount(const std::string& bin_dir, const std::string& ccl_backend);

// Runs `<bin_dir>/ccl_info --ccl_backend=<backend> --device_count`: the
// devices the backend sees here (a host backend has its one); -1 when
// ccl_info is missing or fails (the ranks will say why).
int VisibleDeviceCount(const std::string& bin_dir, const std::string& ccl_backend);

// Runs `<bin_dir>/ccl_info --ccl_backend=<backend> --visibility_variable`:
// the variable that limits the devices a process sees (CUDA_VISIBLE_DEVICES),
// or empty for a host backend or when ccl_info cannot say.
std::string BackendVisibilityVariable(const std::string& bin_dir, const std::string& ccl_backend);

// Resolves "auto" (devices, else CPUs, with a note on stderr), "gpu"
// (devices, or UsageError) and "cpu".
int ResolveProcessesPerNode(const std::string& value, const std::string& bin_dir,
                            const std::string& ccl_backend);

}  // namespace infini::launch
