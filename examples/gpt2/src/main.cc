// gpt2: data-parallel training of a small GPT-2 on the host.
//
//   gpt2 --steps=20                                             one process
//   infini_run --ccl_backend=gloo --nproc_per_node=2 gpt2       two ranks on the CPU
//   gpt2 --ccl_backend=nccl --model=d12 --dtype=bfloat16        one GPU
//   infini_run --ccl_backend=nccl --nproc_per_node=8 gpt2       eight GPUs, one process each
//   infini_run --ccl_backend=nccl --nproc_per_node=1 gpt2 --nthread_per_process=8
//                                                               eight GPUs, one thread each
//
// Exit codes: 0 done, 2 a bad flag, 1 anything else (one line on stderr).
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "data_parallel.h"
#include "infini/common/one_line.h"
#include "infini/parallel/rank_threads.h"
#include "options.h"
#include "trainer.h"

namespace {

using infini::examples::gpt2::DataParallelGroup;
using infini::examples::gpt2::TrainOptions;

std::string ExecutableDirectory() {
  char path[4096];
  const ssize_t length = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (length <= 0) return ".";
  return std::filesystem::path(std::string(path, static_cast<size_t>(length)))
      .parent_path()
      .string();
}

// The tiny corpus the build converts beside the program (share/ in the build
// tree and in an install).
void UseBundledCorpus(TrainOptions* options) {
  if (!options->train_data.empty()) return;
  const std::filesystem::path share =
      std::filesystem::path(ExecutableDirectory()) / ".." / "share" / "infini_ccl" / "gpt2";
  const std::filesystem::path train = share / "tiny_corpus_train.bin";
  if (!std::filesystem::exists(train)) {
    throw infini::examples::gpt2::UsageError(
        "--train_data not given and the bundled corpus " + train.lexically_normal().string() +
        " is missing; pass --train_data=FILE.bin (make one with make_token_bin)");
  }
  options->train_data = train.lexically_normal().string();
  if (options->val_data.empty()) {
    options->val_data = (share / "tiny_corpus_val.bin").lexically_normal().string();
  }
}

}  // namespace

int main(int argc, char** argv) {
  TrainOptions options;
  try {
    options =
        infini::examples::gpt2::ParseTrainOptions(std::vector<std::string>(argv + 1, argv + argc));
    if (options.help) {
      std::cout << infini::examples::gpt2::TrainUsage();
      return 0;
    }
    UseBundledCorpus(&options);
  } catch (const infini::examples::gpt2::UsageError& error) {
    std::fprintf(stderr, "gpt2: %s\n", infini::OneLine(error.what()).c_str());
    return 2;
  }
  // One rank per thread (--nthread_per_process); the first failure decides
  // the exit code, and every failing rank says why on one line.
  std::mutex failure_mutex;
  int exit_code = 0;
  // A refusal of the whole process (a thread layout the backend does not
  // allow) reaches every thread alike: said once, not once per thread.
  std::set<std::string> said;
  const auto run_rank = [&](int thread_rank) {
    std::string where = "gpt2";
    int code = 0;
    std::string line;
    try {
      std::unique_ptr<DataParallelGroup> group =
          DataParallelGroup::Create(options.ccl_backend, thread_rank, options.nthread_per_process);
      if (group->world_size() > 1) where += " rank " + std::to_string(group->rank());
      infini::examples::gpt2::Train(options, *group, std::cout);
      return;
    } catch (const infini::examples::gpt2::UsageError& error) {
      line = where + ": " + infini::OneLine(error.what());
      code = 2;
    } catch (const std::exception& error) {
      line = where + ": " + infini::OneLine(error.what());
      code = 1;
    }
    const std::lock_guard<std::mutex> lock(failure_mutex);
    if (said.insert(line).second) std::fprintf(stderr, "%s\n", line.c_str());
    if (exit_code == 0) exit_code = code;
  };
  if (options.nthread_per_process == 1) {
    run_rank(0);
    return exit_code;
  }
  // All or none: a rank thread that cannot be made is one line, and the
  // ones made stop before they meet the others.
  try {
    infini::parallel::RunOnThreads(options.nthread_per_process,
                                   "the rank threads (--nthread_per_process=" +
                                       std::to_string(options.nthread_per_process) + ")",
                                   run_rank);
  } catch (const infini::parallel::ThreadStartError& error) {
    std::fprintf(stderr, "gpt2: %s\n", infini::OneLine(error.what()).c_str());
    return 1;
  }
  return exit_code;
}
