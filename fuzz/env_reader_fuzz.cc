// libFuzzer harness: the rank layer's environment readers (our variables,
// torchrun's, Slurm's, Open MPI's, PMI's). The input is NAME=VALUE lines;
// a name byte below 0x20 picks one of the known variables. Whatever the
// environment, reading it must give a topology that holds together or a
// ParallelConfigError naming a variable: never a crash or another exception.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "infini/parallel/env_reader.h"
#include "infini/parallel/errors.h"

namespace {

constexpr const char* kKnownVariables[] = {"INFINI_RUN_ID",
                                           "NNODES",
                                           "NPROC_PER_NODE",
                                           "GLOBAL_PROC_RANK",
                                           "LOCAL_PROC_RANK",
                                           "PROC_WORLD_SIZE",
                                           "RANK",
                                           "LOCAL_RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_WORLD_SIZE",
                                           "GROUP_RANK",
                                           "MASTER_ADDR",
                                           "MASTER_PORT",
                                           "SLURM_PROCID",
                                           "SLURM_LOCALID",
                                           "SLURM_NTASKS",
                                           "SLURM_NNODES",
                                           "SLURM_NODEID",
                                           "OMPI_COMM_WORLD_RANK",
                                           "OMPI_COMM_WORLD_SIZE",
                                           "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "OMPI_COMM_WORLD_LOCAL_SIZE",
                                           "PMI_RANK",
                                           "PMI_SIZE",
                                           "INFINI_STORE_ADDR",
                                           "INFINI_STORE_PORT",
                                           "INFINI_CCL_TIMEOUT_S",
                                           "INFINI_CCL_DEBUG",
                                           "TORCHELASTIC_RESTART_COUNT",
                                           "INFINI_RESTART_COUNT",
                                           "INFINI_CCL_ALLOW_DEVICE_SHARING",
                                           "TORCHELASTIC_RUN_ID",
                                           "INFINI_CCL_STORE_CONNECT_TIMEOUT_S",
                                           "INFINI_RUN_WAITING_NOTE_S"};
constexpr size_t kKnownCount = sizeof(kKnownVariables) / sizeof(kKnownVariables[0]);

infini::parallel::Environment Parse(const uint8_t* data, size_t size) {
  infini::parallel::Environment environment;
  std::string line;
  auto finish = [&] {
    const size_t equals = line.find('=');
    if (equals == std::string::npos) return;
    std::string name = line.substr(0, equals);
    if (name.size() == 1 && static_cast<unsigned char>(name[0]) < 0x20) {
      name = kKnownVariables[static_cast<unsigned char>(name[0]) % kKnownCount];
    }
    environment[name] = line.substr(equals + 1);
  };
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == '\n') {
      finish();
      line.clear();
    } else {
      line.push_back(static_cast<char>(data[i]));
    }
  }
  finish();
  return environment;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const infini::parallel::Environment environment = Parse(data, size);
  try {
    const infini::parallel::ProcessTopology topology =
        infini::parallel::ReadProcessTopology(environment);
    if (topology.nnodes < 1 || topology.processes_per_node < 1) std::abort();
    const long long processes =
        static_cast<long long>(topology.nnodes) * topology.processes_per_node;
    if (processes > (1LL << 31) - 1) std::abort();
    if (topology.global_proc_rank < 0 || topology.global_proc_rank >= processes) {
      std::abort();
    }
    infini::parallel::ReadRuntimeSettings(environment, topology);
  } catch (const infini::parallel::ParallelConfigError&) {
  }
  return 0;
}
