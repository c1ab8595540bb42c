// infini_run's flags (flag_definitions.cc): the one table the parser
// (command_line.cc) reads and --help lists.
#pragma once

#include "infini/common/command_line.h"

namespace infini::launch {

// infini_run's command line over its table: every flag with its default
// and help, torchrun's letters (-r redirects, -t tee, -m module), and
// torchrun's PET_<FLAG> (PET_NPROC_PER_NODE, as Kubeflow's PyTorchJob and
// TrainJob set them) as each flag's default; the first word that is not a
// flag starts the program.
cli::CommandLine LaunchCommandLine();

}  // namespace infini::launch
