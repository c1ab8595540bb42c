// ccl_bench: collective microbenchmarks on Google Benchmark, run under
// infini_run. Every process registers the same cases in the same order; each
// Google Benchmark thread is one rank with its own communicator, made before
// timing. Every rank runs exactly --warmup + --iters launches per case (a
// fixed Iterations count, never the adaptive one, which would differ between
// ranks and deadlock them).
//
// Timing (--timing): back_to_back, nccl-tests' method and the default: a
// barrier, then the --iters launches one after another on the rank's stream
// between two events; the time per launch is that span / iters, averaged over
// ranks. per_iteration: a barrier and events around every launch, the
// iteration's time maxed over ranks. Only global rank 0 reports: a table in
// nccl-tests' columns on the console, Google Benchmark's JSON in
// --benchmark_out.
//
//   infini_run --nproc_per_node=4 -- ccl_bench --threads_per_process=2
//       --collectives=all --max_bytes=16M --check --benchmark_out=bench.json
#include <benchmark/benchmark.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "bench_options.h"
#include "bench_world.h"
#include "collective_case.h"
#include "infini/common/one_line.h"
#include "infini/parallel/errors.h"
#include "results_table.h"

namespace infini::bench {
namespace {

// Ranks other than global rank 0 run every case and print nothing.
class NullReporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

bool HasFlag(int argc, char** argv, std::string_view flag) {
  for (int index = 1; index < argc; ++index) {
    const std::string_view argument = argv[index];
    if (argument == flag || argument.substr(0, flag.size() + 1) == std::string(flag) + "=") {
      return true;
    }
  }
  return false;
}

// Google Benchmark flags that would make ranks run different iteration
// counts or case orders, and so deadlock them.
void RefuseRankDivergingFlags(int argc, char** argv) {
  for (std::string_view flag : {"--benchmark_enable_random_interleaving",
                                "--benchmark_min_warmup_time", "--benchmark_min_time"}) {
    if (HasFlag(argc, argv, flag)) {
      throw UsageError(std::string(flag) +
                       " is not supported: every rank must run the same fixed iterations "
                       "(use --iters and --warmup)");
    }
  }
}

// Drops --benchmark_out/--benchmark_out_format on every process but global
// process 0, so that only global rank 0 writes the file.
void DropFileOutputFlags(int* argc, char** argv) {
  int kept = 1;
  for (int index = 1; index < *argc; ++index) {
    const std::string_view argument = argv[index];
    if (argument.rfind("--benchmark_out=", 0) == 0 ||
        argument.rfind("--benchmark_out_format=", 0) == 0) {
      continue;
    }
    argv[kept++] = argv[index];
  }
  *argc = kept;
  argv[kept] = nullptr;
}

[[noreturn]] void FailRank(const RankResources& rank, const std::string& what) {
  std::cout.flush();
  std::cerr << "ccl_bench: rank " << rank.rank.global_rank() << ": " << what << std::endl;
  std::_Exit(1);
}

benchmark::Counter PerCase(double value) {
  // Every thread rank reports the same value; kAvgThreads undoes the sum
  // that Google Benchmark makes over threads.
  return benchmark::Counter(value, benchmark::Counter::kAvgThreads);
}

// One iteration of --timing=per_iteration: barrier, start event, collective,
// stop event. The barrier and both events are on the rank's stream, so on a
// device the time starts when the barrier has released every rank; on a host
// backend the events record host time around the (synchronous) collective.
double TimeOneLaunch(const RankResources& rank, const CollectiveCase& one_case) {
  rank.communicator.Barrier(rank.stream);
  rank.start->Record(rank.stream);
  one_case.Launch();
  rank.stop->Record(rank.stream);
  rank.stop->Synchronize();
  return rank.stop->ElapsedMsSince(*rank.start) / 1e3;
}

// --timing=back_to_back (nccl-tests): barrier, start event, `launches`
// collectives queued one after another, stop event; seconds per launch.
double TimeBackToBack(const RankResources& rank, const CollectiveCase& one_case, int64_t launches) {
  rank.communicator.Barrier(rank.stream);
  rank.start->Record(rank.stream);
  for (int64_t launch = 0; launch < launches; ++launch) one_case.Launch();
  rank.stop->Record(rank.stream);
  rank.stop->Synchronize();
  return rank.stop->ElapsedMsSince(*rank.start) / 1e3 / static_cast<double>(launches);
}

// Seconds per launch of the case, the same value on every rank.
double TimeCase(benchmark::State& state, const RankResources& rank, const CollectiveCase& one_case,
                const BenchOptions& options) {
  double total_seconds = 0;
  int64_t measurements = 0;
  for (auto _ : state) {
    double seconds = 0;
    if (options.timing == Timing::kBackToBack) {
      // One Google Benchmark iteration holds all --iters launches.
      seconds = rank.ReduceOverRanks(TimeBackToBack(rank, one_case, options.iterations),
                                     ccl::ReduceOp::kSum) /
                rank.rank.world_size();
    } else {
      seconds = rank.ReduceOverRanks(TimeOneLaunch(rank, one_case), ccl::ReduceOp::kMax);
    }
    // Google Benchmark divides manual time by iterations × threads; scaled
    // by threads, its Time column is the collective's time, as time_us.
    state.SetIterationTime(seconds * state.threads());
    total_seconds += seconds;
    ++measurements;
  }
  return total_seconds / static_cast<double>(measurements);
}

void RunCase(benchmark::State& state, const CaseSpec& spec, const BenchOptions& options,
             BenchWorld& world, std::atomic<int64_t>* wrong_elements) {
  RankResources& rank = world.rank(state.thread_index());
  try {
    rank.ActivateDevice();
    const CollectiveCase one_case(spec, rank);
    for (int64_t warmup = 0; warmup < options.warmup_iterations; ++warmup) one_case.Launch();
    rank.stream.Synchronize();

    const double seconds_per_launch = TimeCase(state, rank, one_case, options);
    const int world_size = world.world_size();
    const double bytes = static_cast<double>(one_case.plan().bytes);
    const double algbw = bytes / seconds_per_launch / 1e9;
    state.counters["bytes"] = PerCase(bytes);
    state.counters["ranks"] = PerCase(world_size);
    state.counters["launches"] = PerCase(static_cast<double>(options.iterations));
    state.counters["time_us"] = PerCase(seconds_per_launch * 1e6);
    state.counters["algbw_GBps"] = PerCase(algbw);
    state.counters["busbw_GBps"] = PerCase(algbw * BusBandwidthFactor(spec.collective, world_size));

    if (options.check) {
      one_case.FillInputs();
      rank.Synchronize();
      one_case.Launch();
      rank.stream.Synchronize();
      const double wrong = rank.ReduceOverRanks(static_cast<double>(one_case.CountWrongElements()),
                                                ccl::ReduceOp::kSum);
      state.counters["wrong"] = PerCase(wrong);
      if (state.thread_index() == 0) *wrong_elements += std::llround(wrong);
    }
  } catch (const std::exception& error) {
    FailRank(rank, std::string(CaseName(spec, world.world_size())) + ": " + error.what());
  }
}

std::vector<CaseSpec> CasesToRun(const BenchOptions& options, bool report) {
  std::vector<CaseSpec> cases;
  for (Collective collective : options.collectives) {
    if (options.in_place && !ccl::HasInPlaceForm(collective)) {
      if (report) {
        std::cerr << "ccl_bench: " << BenchCollectiveName(collective)
                  << " has no in-place form; skipped under --inplace\n";
      }
      continue;
    }
    for (int64_t bytes : MessageSizes(options.min_bytes, options.max_bytes, options.step_factor)) {
      cases.push_back(
          CaseSpec{collective, bytes, options.dtype, options.op, options.in_place, options.root});
    }
  }
  return cases;
}

// Drops the cases the backend declares it cannot serve (an optional entry it
// lacks, a type or operator it does not support), saying so once.
std::vector<CaseSpec> SupportedCases(const std::vector<CaseSpec>& cases,
                                     const ccl::Capabilities& capabilities, bool report) {
  std::vector<CaseSpec> supported;
  std::string last_skipped;
  for (const CaseSpec& spec : cases) {
    if (capabilities.Supports(spec.collective, spec.dtype, spec.op)) {
      supported.push_back(spec);
      continue;
    }
    const std::string what = std::string(BenchCollectiveName(spec.collective));
    if (report && what != last_skipped) {
      std::cerr << "ccl_bench: " << what << " skipped: the backend does not support it on "
                << ccl::DataTypeName(spec.dtype) << " (ccl_info --capabilities)\n";
    }
    last_skipped = what;
  }
  return supported;
}

int Main(int argc, char** argv) {
  if (HasFlag(argc, argv, "--help") || HasFlag(argc, argv, "-h")) {
    std::cout << BenchUsage();
    return 0;
  }
  const parallel::ProcessTopology topology =
      parallel::ReadProcessTopology(parallel::CurrentEnvironment());
  const bool reports = topology.global_proc_rank == 0;
  RefuseRankDivergingFlags(argc, argv);
  // --benchmark_format=console|json|csv asks for Google Benchmark's own
  // console output instead of the table.
  const bool wants_benchmark_console = HasFlag(argc, argv, "--benchmark_format");
  if (!reports) DropFileOutputFlags(&argc, argv);
  benchmark::Initialize(&argc, argv);

  BenchOptions options;
  if (!ParseBenchCommandLine(argc, argv, &options)) return 0;
  const int world_size = topology.proc_world_size() * options.threads_per_process;
  if (options.root >= world_size) {
    throw UsageError("--root=" + std::to_string(options.root) + ": expected a rank below the " +
                     "world size " + std::to_string(world_size));
  }
  std::vector<CaseSpec> cases = CasesToRun(options, reports);

  std::unique_ptr<BenchWorld> world =
      BenchWorld::Create(options.ccl_backend, options.threads_per_process);
  cases = SupportedCases(cases, world->backend()->capabilities(), reports);
  std::atomic<int64_t> wrong_elements{0};
  std::map<std::string, TableCase> table_cases;
  const size_t element_bytes = ccl::ElementBytes(options.dtype);
  for (const CaseSpec& spec : cases) {
    const std::string name = CaseName(spec, world_size);
    const BufferPlan plan =
        PlanBuffers(spec.collective, spec.requested_bytes, element_bytes, world_size);
    table_cases[name] = TableCase{spec, plan.total_elements};
    benchmark::RegisterBenchmark(
        name.c_str(),
        [spec, &options, &world, &wrong_elements](benchmark::State& state) {
          RunCase(state, spec, options, *world, &wrong_elements);
        })
        ->Threads(options.threads_per_process)
        ->Iterations(options.timing == Timing::kBackToBack ? 1 : options.iterations)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
  }
  if (reports) {
    std::ostringstream title;
    title << "ccl_bench: backend " << world->backend()->info().name << ", " << world_size
          << " ranks = " << topology.proc_world_size() << " processes x "
          << options.threads_per_process << " threads, timing " << TimingName(options.timing)
          << ", " << options.iterations << " launches (+" << options.warmup_iterations
          << " warm-up) per case";
    if (wants_benchmark_console) {
      std::cout << title.str() << std::endl;
      benchmark::RunSpecifiedBenchmarks();
    } else {
      NcclTestsTableReporter table(std::move(table_cases), title.str(), options.check);
      benchmark::RunSpecifiedBenchmarks(&table);
    }
  } else {
    NullReporter silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  // Communicators, streams and buffers go while the backend's runtime is
  // still up (not at static destruction).
  world->Destroy();
  world.reset();
  benchmark::ClearRegisteredBenchmarks();
  benchmark::Shutdown();

  if (options.check && reports) {
    if (wrong_elements > 0) {
      std::cerr << "ccl_bench: --check failed: " << wrong_elements.load()
                << " wrong elements over all cases and ranks (first ones above)" << std::endl;
    } else {
      std::cout << "ccl_bench: --check passed: every case on every rank matches the host "
                   "reference"
                << std::endl;
    }
  }
  // The verdict is global rank 0's: were the other ranks to fail too, the
  // launcher could stop rank 0 before it has printed what was wrong.
  return reports && wrong_elements > 0 ? 1 : 0;
}

}  // namespace
}  // namespace infini::bench

int main(int argc, char** argv) {
  using infini::bench::UsageError;
  try {
    return infini::bench::Main(argc, argv);
  } catch (const UsageError& error) {
    std::cerr << "ccl_bench: " << infini::OneLine(error.what()) << std::endl;
    return 2;
  } catch (const infini::parallel::ParallelConfigError& error) {
    std::cerr << "ccl_bench: " << infini::OneLine(error.what()) << std::endl;
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "ccl_bench: " << infini::OneLine(error.what()) << std::endl;
    return 1;
  }
}
