// shrink_check: a training-like loop of all-reduces that survives lost ranks
// under infini_run --on_failure=shrink (gloo). Each step every rank adds
// (RANK + 1) × step over the world group and over its DP group; a rank
// checks the sum against the survivors it knows of. On PeerLostError it
// calls Context::RecoverFromLoss and redoes the step. Faults:
//   --kill_rank=R --kill_at_step=S  rank R (RANK) SIGKILLs itself at step S,
//       after a pause in which the others are already inside the all-reduce
//       (--kill_inside) or just before its collective (default);
//   --second_kill_rank / --second_kill_at_step  another loss, later;
//   --slow_rank=R --slow_ms=M  rank R sleeps M ms at each step (a straggler);
//   --tensor_parallel=T  its layout DP × T (a loss may leave no whole TP group);
//   --joiner_at_step=S  at step S launch rank 0 plays a joining node's
//       launcher (infini/common/loss_notice.h, "Joins"): it writes a join
//       notice and starts a copy of this program as the joiner, which every
//       rank admits at a step boundary (Context::AdmitJoiners);
//   --reordered_world_group  also a group of the whole world in reverse
//       order, which an admission must refuse (exit 3) rather than reorder;
//   --reducer  also a GradientReducer of two buckets on the world group,
//       alive until the end and reduced once a step (its buckets'
//       registrations follow the world's communicator through recoveries).
// Values travel in the backend's memory, so a device backend (kvtest) runs
// it too.
// Prints "rank L: recovered ..." per recovery, "rank L: admitted ..." per
// admission and "rank L: done ..." at the end.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/common/launch_env.h"
#include "infini/common/loss_notice.h"
#include "infini/parallel/context.h"
#include "infini/parallel/errors.h"
#include "infini/parallel/gradient_reducer.h"
#include "infini/parallel/layout.h"
#include "infini/parallel/process_group.h"

namespace {

using infini::parallel::Context;
using infini::parallel::Layout;
using infini::parallel::PeerLostError;
using infini::parallel::ProcessGroup;

struct Options {
  int steps = 8;
  int kill_rank = -1, kill_at_step = -1;
  int second_kill_rank = -1, second_kill_at_step = -1;
  bool kill_inside = false;
  int slow_rank = -1, slow_ms = 0;
  int tensor_parallel = 1;
  int joiner_at_step = -1;
  int run_tag = 0;  // unused: names the test that started this process (pgrep)
  bool reordered_world_group = false;
  bool reducer = false;
};

int IntFlag(const std::string& argument, const std::string& name, int* value) {
  const std::string prefix = "--" + name + "=";
  if (argument.rfind(prefix, 0) != 0) return 0;
  *value = std::stoi(argument.substr(prefix.size()));
  return 1;
}

Options Parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string argument = argv[i];
    if (argument == "--kill_inside") {
      options.kill_inside = true;
      continue;
    }
    if (argument == "--reordered_world_group") {
      options.reordered_world_group = true;
      continue;
    }
    if (argument == "--reducer") {
      options.reducer = true;
      continue;
    }
    const int known = IntFlag(argument, "steps", &options.steps) +
                      IntFlag(argument, "kill_rank", &options.kill_rank) +
                      IntFlag(argument, "kill_at_step", &options.kill_at_step) +
                      IntFlag(argument, "second_kill_rank", &options.second_kill_rank) +
                      IntFlag(argument, "second_kill_at_step", &options.second_kill_at_step) +
                      IntFlag(argument, "slow_rank", &options.slow_rank) +
                      IntFlag(argument, "slow_ms", &options.slow_ms) +
                      IntFlag(argument, "tensor_parallel", &options.tensor_parallel) +
                      IntFlag(argument, "joiner_at_step", &options.joiner_at_step) +
                      IntFlag(argument, "run_tag", &options.run_tag);
    if (known == 0) {
      std::fprintf(stderr, "shrink_check: unknown argument '%s'\n", argument.c_str());
      std::exit(2);
    }
  }
  return options;
}

// Sum of (r + 1) × step over `ranks`.
double Expected(const std::vector<int>& ranks, int step) {
  double sum = 0;
  for (int rank : ranks) sum += (rank + 1) * step;
  return sum;
}

// `value` in a buffer of the group's backend, `collective` on it, and back.
template <typename Collective>
double OnBackend(ProcessGroup& group, double value, const Collective& collective) {
  const infini::ccl::DeviceBuffer buffer(group.backend(), sizeof(value));
  buffer.CopyFromHost(&value, sizeof(value));
  const infini::ccl::FlatTensor tensor = buffer.AsTensor(infini::ccl::dtype::kFloat64, 1);
  collective(tensor.dl());
  buffer.CopyToHost(&value, sizeof(value));
  return value;
}

double BroadcastFromRankZero(ProcessGroup& group, double value) {
  return OnBackend(group, value,
                   [&](const DLTensor& tensor) { group.Broadcast(tensor, tensor, 0); });
}

double AllReduceSum(ProcessGroup& group, double value) {
  return OnBackend(group, value, [&](const DLTensor& tensor) {
    group.AllReduce(tensor, tensor, infini::ccl::ReduceOp::kSum);
  });
}

// What infini_run does for a node that joins (one rank per node): takes the
// next launch rank, writes the join notice, starts the rank with the
// variables of a node numbered after every other.
pid_t StartJoiner(Context& context, char** argv) {
  namespace notice = infini::loss_notice;
  namespace env = infini::env;
  const int start_world = std::atoi(std::getenv(env::torchrun::kWorldSize));
  const int64_t taken = context.store().Add(notice::kJoinNextRankKey, 1);
  const int launch_rank = start_world + static_cast<int>(taken) - 1;
  const int64_t number = context.store().Add(notice::kJoinCountKey, 1);
  context.store().Set(notice::JoinNoticeKey(number),
                      notice::Format({{launch_rank}, 0, "shrink_check's test joiner"}));
  const pid_t pid = fork();
  if (pid != 0) return pid;
  const std::string world = std::to_string(start_world + taken);
  const std::string rank = std::to_string(launch_rank);
  for (const char* name :
       {env::torchrun::kWorldSize, env::torchrun::kGroupWorldSize, env::torchrun::kRoleWorldSize,
        env::infinitrain::kNnodes, env::infinitrain::kProcessWorldSize}) {
    setenv(name, world.c_str(), 1);
  }
  for (const char* name : {env::torchrun::kRank, env::torchrun::kGroupRank,
                           env::torchrun::kRoleRank, env::infinitrain::kGlobalProcessRank}) {
    setenv(name, rank.c_str(), 1);
  }
  // A node of one rank.
  for (const char* name : {env::torchrun::kLocalRank, env::infinitrain::kLocalProcessRank}) {
    setenv(name, "0", 1);
  }
  for (const char* name : {env::torchrun::kLocalWorldSize, env::infinitrain::kProcessesPerNode}) {
    setenv(name, "1", 1);
  }
  setenv(env::kJoining, std::to_string(number).c_str(), 1);
  execv("/proc/self/exe", argv);
  _exit(127);
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = Parse(argc, argv);
  std::shared_ptr<Context> context = Context::Create();
  const int me = context->rank().launch_global_rank();
  const bool joiner = context->joining();
  if (joiner) {
    const infini::parallel::GrownWorld admitted = context->WaitToBeAdmitted();
    std::printf("rank %d: joined: world %d ranks, rank %d, generation %d\n", me,
                admitted.world_size, admitted.global_rank, admitted.generation);
    std::fflush(stdout);
  }
  // Who is in the world and in my DP group, in the launcher's numbering.
  std::vector<int> world_ranks = context->launch_ranks();
  Layout layout = Layout::ForWorld(context->rank().world_size(), options.tensor_parallel, 1);
  std::unique_ptr<ProcessGroup> world = context->NewWorldGroup();
  std::unique_ptr<ProcessGroup> data_parallel =
      context->NewLayoutGroup(layout, infini::parallel::Axis::kData);
  // A group of the last rank alone: the others hold it as non-members, and a
  // recovery renumbers its member for them too.
  // (A joiner was not there when it was made.)
  const int last_rank = context->rank().world_size() - 1;
  std::unique_ptr<ProcessGroup> last = joiner ? nullptr : context->NewGroup("last", {last_rank});
  // Two 64-byte buckets; destroyed before the groups (declared after them).
  std::unique_ptr<infini::parallel::GradientReducer> reducer;
  if (options.reducer) {
    reducer = std::make_unique<infini::parallel::GradientReducer>(
        *world,
        std::vector<infini::parallel::GradientSpec>{{"a", infini::ccl::dtype::kFloat32, 16},
                                                    {"b", infini::ccl::dtype::kFloat32, 16}},
        infini::parallel::GradientReducerOptions{.bucket_bytes = 64});
  }
  std::unique_ptr<ProcessGroup> reordered;
  if (options.reordered_world_group) {
    std::vector<int> backwards;
    for (int r = context->rank().world_size() - 1; r >= 0; --r) backwards.push_back(r);
    reordered = context->NewGroup("reordered", backwards);
  }
  const auto members_in_launch_numbering = [&](const ProcessGroup& group) {
    std::vector<int> ranks;
    for (int member : group.members()) ranks.push_back(world_ranks[static_cast<size_t>(member)]);
    return ranks;
  };
  int recoveries = 0;
  pid_t joiner_pid = -1;
  // Rank 0's step, everywhere: a joiner learns there where the others are.
  const auto agree_on_step = [&](int step) {
    return static_cast<int>(BroadcastFromRankZero(*world, step));
  };
  int step = 1;
  if (joiner) step = agree_on_step(0);
  while (step <= options.steps) {
    try {
      if (me == 0 && step == options.joiner_at_step && joiner_pid < 0) {
        joiner_pid = StartJoiner(*context, argv);
      }
      std::optional<infini::parallel::GrownWorld> grown;
      try {
        grown = context->AdmitJoiners(*world);
      } catch (const infini::parallel::ParallelError& refused) {
        if (dynamic_cast<const PeerLostError*>(&refused) != nullptr) throw;
        std::printf("rank %d: admission refused: %s\n", me, refused.what());
        std::fflush(stdout);
        if (joiner_pid > 0) {  // it waits for an admission that will not come
          kill(joiner_pid, SIGKILL);
          waitpid(joiner_pid, nullptr, 0);
        }
        return 3;
      }
      if (grown) {
        world_ranks = context->launch_ranks();
        layout = Layout::ForWorld(grown->world_size, options.tensor_parallel, 1);
        step = agree_on_step(step);
        std::printf("rank %d: admitted %d at step %d; world now %d ranks, rank %d, generation %d\n",
                    me, grown->joined_ranks.at(0), step, grown->world_size, grown->global_rank,
                    grown->generation);
        std::fflush(stdout);
        continue;  // the joiner's first step begins at this boundary
      }
      if (me == options.slow_rank)
        std::this_thread::sleep_for(std::chrono::milliseconds(options.slow_ms));
      if ((me == options.kill_rank && step == options.kill_at_step) ||
          (me == options.second_kill_rank && step == options.second_kill_at_step)) {
        // --kill_inside: the others are inside the all-reduce by now.
        if (options.kill_inside) std::this_thread::sleep_for(std::chrono::milliseconds(500));
        kill(getpid(), SIGKILL);
      }
      const double sum = AllReduceSum(*world, (me + 1) * step);
      const double dp_sum = AllReduceSum(*data_parallel, (me + 1) * step);
      if (sum != Expected(world_ranks, step) ||
          dp_sum != Expected(members_in_launch_numbering(*data_parallel), step)) {
        std::printf("rank %d: WRONG at step %d: world sum %g, dp sum %g\n", me, step, sum, dp_sum);
        return 1;
      }
      if (reducer) {  // one reduction of its buckets a step (traced as "bucket" spans)
        const auto compute = infini::ccl::Stream::Default(context->backend());
        for (size_t i = 0; i < reducer->size(); ++i) reducer->MarkReady(i, compute);
        reducer->WaitAll(compute);
        compute.Synchronize();
      }
      ++step;
    } catch (const PeerLostError& error) {
      const infini::parallel::RecoveredWorld recovered = context->RecoverFromLoss();
      ++recoveries;
      std::vector<int> survivors;
      for (int r : world_ranks) {
        bool lost = false;
        for (int l : recovered.lost_ranks) lost = lost || l == r;
        if (!lost) survivors.push_back(r);
      }
      world_ranks = survivors;
      try {
        layout = layout.ForSurvivors(recovered.world_size);
      } catch (const infini::parallel::ParallelConfigError& refused) {
        std::printf("rank %d: layout refused: %s\n", me, refused.what());
        return 3;
      }
      std::string lost;
      for (int r : recovered.newly_lost_ranks)
        lost += (lost.empty() ? "" : ",") + std::to_string(r);
      std::printf(
          "rank %d: recovered at step %d: lost %s; world now %d ranks, rank %d, dp=%d, generation "
          "%d\n",
          me, step, lost.c_str(), recovered.world_size, recovered.global_rank,
          layout.data_parallel_size(), recovered.generation);
      std::fflush(stdout);
    }
  }
  if (joiner_pid > 0) {
    int status = 0;
    if (waitpid(joiner_pid, &status, 0) != joiner_pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      std::printf("rank %d: WRONG: the joiner ended with status %d\n", me, status);
      return 1;
    }
  }
  const bool last_survived =
      std::find(world_ranks.begin(), world_ranks.end(), last_rank) != world_ranks.end();
  if (last != nullptr && last_survived &&
      world_ranks.at(static_cast<size_t>(last->members().at(0))) != last_rank) {
    std::printf("rank %d: WRONG: group 'last' holds rank %d, not launch rank %d\n", me,
                last->members().at(0), last_rank);
    return 1;
  }
  std::printf("rank %d: done world=%d rank=%d steps=%d recoveries=%d\n", me,
              context->rank().world_size(), context->rank().global_rank(), options.steps,
              recoveries);
  return 0;
}
