// ccl_bench's own command line (Google Benchmark's --benchmark_* flags are
// consumed by benchmark::Initialize before this parser sees argv).
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "infini/ccl/ccl.h"
#include "infini/common/command_line.h"

namespace infini::bench {

// A user's mistake (bad flag, value or environment variable): one line on
// stderr and exit code 2.
class UsageError : public cli::UsageError {
 public:
  using cli::UsageError::UsageError;
};

// A case times one of ccl's collectives (infini/ccl/collectives.h says what
// each is: reduces, in-place form). Collective::kSend stands for the
// send/recv ring: each rank sends to the next and receives from the previous.
using ccl::Collective;

// The name a case goes by in flags and tables: ccl's, except "sendrecv"
// (nccl-tests' name) for the ring.
std::string_view BenchCollectiveName(Collective collective);
// What --collectives=all runs, in this order: all_reduce, all_gather,
// reduce_scatter, broadcast, reduce, sendrecv, all_to_all.
const std::vector<Collective>& AllCollectives();

// How a case's time is measured (both: backend events on the rank's stream).
//   kBackToBack (nccl-tests'): a barrier, then --iters launches one after
//     another, timed as a whole; the time per launch is the average.
//   kPerIteration: a barrier before every launch, each launch timed alone
//     and maxed over ranks; adds the barrier's tail to small messages.
enum class Timing { kBackToBack, kPerIteration };
std::string_view TimingName(Timing timing);  // "back_to_back", "per_iteration"

// Which rank's time a line reports (nccl-tests' -a): rank 0's, the mean,
// the minimum or the maximum over ranks.
enum class RankAverage { kRank0, kMean, kMin, kMax };
std::string_view RankAverageName(RankAverage average);  // "rank0", "mean", "min", "max"

// --split (nccl-tests' NCCL_TESTS_SPLIT): each rank's group is a colour made
// from its global rank by one operation; ranks of one colour time their
// collectives together on a sub-communicator, every group at once.
struct SplitRule {
  enum class Operation { kNone, kAnd, kOr, kMod, kDiv };
  Operation operation = Operation::kNone;
  int64_t value = 0;
  std::string text;  // as the user gave it, for lines that name the rule

  bool active() const { return operation != Operation::kNone; }
  int Color(int global_rank) const;
};
// "MOD 2", "%2", "AND 0x7", "&0b101", "OR 7", "|7", "DIV 8", "/8" (the
// operation's case does not matter; the value is decimal, 0x hex or 0b
// binary), as nccl-tests' NCCL_TESTS_SPLIT. Throws UsageError naming `flag`.
SplitRule ParseSplitRule(std::string_view flag, std::string_view text);

struct BenchOptions {
  std::string ccl_backend;  // empty: INFINI_CCL_BACKEND, else "auto"
  std::vector<Collective> collectives{Collective::kAllReduce};
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{1} << 30;
  int64_t step_factor = 4;
  DLDataType dtype = ccl::dtype::kFloat32;
  ccl::ReduceOp op = ccl::ReduceOp::kSum;
  bool in_place = false;
  bool check = false;
  int64_t iterations = 20;
  int64_t warmup_iterations = 5;
  int threads_per_process = 1;
  int root = 0;  // of broadcast and reduce
  Timing timing = Timing::kBackToBack;
  int64_t step_bytes = 0;           // > 0: sizes grow by this many bytes, not by step_factor
  int64_t aggregated_launches = 1;  // launches per timed iteration, in one group (-m)
  int64_t run_cycles = 1;           // times the whole sweep runs and prints (-N)
  int64_t graph_launches = 0;       // > 0: capture the timed loop once, replay it this often (-G)
  bool cpu_time = false;            // host clock around the loop instead of events (-C)
  RankAverage average = RankAverage::kMean;
  // -R, nccl-tests' meanings: 1 comm_register, 2 symmetric window.
  int register_buffers = 0;
  int64_t timeout_s = 0;  // > 0: a case that runs longer ends the run (-T)
  bool memory_report = false;
  std::string json_path;  // -J: nccl-tests' JSON, written by global rank 0
  SplitRule split;
  std::string link = "auto";         // the verdict's link profile (verdict.h), or none
  std::string expect_path;           // a saved -J run to compare with
  double expect_tolerance_pct = 10;  // slower than saved by more: a regression
};

// Parses what is left of argv after benchmark::Initialize. Returns false
// when --help was asked for (the usage is printed). Throws UsageError.
bool ParseBenchCommandLine(int argc, char** argv, BenchOptions* options);
// Without --split, nccl-tests' variables: NCCL_TESTS_SPLIT_MASK=HEX (the
// colour is rank & HEX) before NCCL_TESTS_SPLIT=RULE. `getenv` reads one.
void ApplySplitEnvironment(const std::function<const char*(const char*)>& getenv,
                           BenchOptions* options);
std::string BenchUsage();

// "4096", "64K", "16M", "1G" (binary multiples). Throws UsageError naming
// `flag`.
int64_t ParseByteCount(std::string_view flag, std::string_view text);
// min, min·factor, min·factor², … below max, then max itself.
std::vector<int64_t> MessageSizes(int64_t min_bytes, int64_t max_bytes, int64_t step_factor);
// The sweep the options ask for: by --step_bytes when it is set (nccl-tests'
// -i: min, min+step, …), else by --step_factor; max itself always last.
std::vector<int64_t> SweepSizes(const BenchOptions& options);

}  // namespace infini::bench
