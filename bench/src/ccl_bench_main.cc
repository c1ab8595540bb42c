// ccl_bench: collective microbenchmarks on Google Benchmark, run under
// infini_run. Every process registers the same cases in the same order; each
// Google Benchmark thread is one rank with its own communicator, made before
// timing. Every rank runs exactly --warmup + --iters launches per case (a
// fixed Iterations count, never the adaptive one, which would differ between
// ranks and deadlock them).
//
// How a case is timed: case_timer.h. Only global rank 0 reports: a table in
// nccl-tests' columns and the tail latencies on the console, nccl-tests' JSON
// in -J, Google Benchmark's JSON in --benchmark_out.
//
//   infini_run --nproc_per_node=4 -- ccl_bench --threads_per_process=2
//       --collectives=all --max_bytes=16M --check --benchmark_out=bench.json
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bench_options.h"
#include "bench_world.h"
#include "case_timer.h"
#include "collective_case.h"
#include "infini/common/one_line.h"
#include "infini/parallel/errors.h"
#include "results_json.h"
#include "results_table.h"
#include "verdict.h"

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

// -T/--timeout: a case that runs longer ends the run, naming it (a hung
// collective otherwise waits for the launcher's own timeout, if any).
class CaseWatchdog {
 public:
  explicit CaseWatchdog(int64_t timeout_s) : timeout_s_(timeout_s) {
    if (timeout_s_ > 0) thread_ = std::thread([this] { Watch(); });
  }
  ~CaseWatchdog() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }
  void Start(std::string name, int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    name_ = std::move(name);
    rank_ = rank;
    started_ = std::chrono::steady_clock::now();
  }
  void Stop() {
    std::lock_guard<std::mutex> lock(mutex_);
    name_.clear();
  }

 private:
  void Watch() {
    while (!done_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard<std::mutex> lock(mutex_);
      if (name_.empty() ||
          std::chrono::steady_clock::now() - started_ < std::chrono::seconds(timeout_s_)) {
        continue;
      }
      std::cout.flush();
      std::cerr << "ccl_bench: rank " << rank_ << ": " << name_ << " did not finish within -T "
                << timeout_s_ << " s (--timeout)" << std::endl;
      std::_Exit(1);
    }
  }

  const int64_t timeout_s_;
  std::atomic<bool> done_{false};
  std::mutex mutex_;
  std::string name_;
  int rank_ = 0;
  std::chrono::steady_clock::time_point started_;
  std::thread thread_;
};

// What the cases share beyond the options: sinks only global rank 0's first
// thread writes, read by the reporter after each case.
struct RunState {
  std::atomic<int64_t> wrong_elements{0};
  std::atomic<int64_t> most_buffer_bytes{0};  // -M: the largest case's buffers on one rank
  IterationTimes iteration_times;
  GroupResults group_results;
  std::vector<int> group_colors;  // --split: the colour of each group, in group order
  std::unique_ptr<CaseWatchdog> watchdog;
};

// --split: every group's figures of the case, to every rank (each group's
// rank 0 fills its slot of a list summed over the world).
std::vector<GroupResult> GatherGroups(const RankResources& rank, const CaseTiming& timing,
                                      int64_t group_wrong, const std::vector<int>& colors) {
  constexpr size_t kFields = 7;
  std::vector<double> slots(static_cast<size_t>(rank.group_count) * kFields, 0.0);
  if (rank.case_rank() == 0) {
    const IterationStats tails = ComputeIterationStats(timing.iteration_us);
    const double fields[kFields] = {timing.seconds_per_launch * 1e6,
                                    tails.min_us,
                                    tails.p50_us,
                                    tails.p99_us,
                                    tails.max_us,
                                    static_cast<double>(tails.samples),
                                    static_cast<double>(group_wrong)};
    std::copy(fields, fields + kFields,
              slots.begin() + static_cast<ptrdiff_t>(rank.group_index * kFields));
  }
  slots = ReduceListOverRanks(rank, rank.communicator, std::move(slots), ccl::ReduceOp::kSum);
  std::vector<GroupResult> groups;
  for (int group = 0; group < rank.group_count; ++group) {
    const double* field = slots.data() + static_cast<size_t>(group) * kFields;
    GroupResult result;
    result.color = colors.at(static_cast<size_t>(group));
    result.time_us = field[0];
    result.tails.min_us = field[1];
    result.tails.p50_us = field[2];
    result.tails.p99_us = field[3];
    result.tails.max_us = field[4];
    result.tails.samples = std::llround(field[5]);
    result.wrong = std::llround(field[6]);
    groups.push_back(result);
  }
  return groups;
}

void RunCase(benchmark::State& state, const CaseSpec& spec, const BenchOptions& options,
             BenchWorld& world, RunState* run) {
  RankResources& rank = world.rank(state.thread_index());
  const std::string name = CaseName(spec, world.case_world_size());
  const bool first_thread = state.thread_index() == 0;
  try {
    if (first_thread) run->watchdog->Start(name, rank.rank.global_rank());
    rank.ActivateDevice();
    const CollectiveCase one_case(spec, rank);
    if (first_thread) {
      int64_t seen = run->most_buffer_bytes.load();
      while (seen < one_case.buffer_bytes() &&
             !run->most_buffer_bytes.compare_exchange_weak(seen, one_case.buffer_bytes())) {
      }
    }
    for (int64_t warmup = 0; warmup < options.warmup_iterations; ++warmup) {
      LaunchIteration(rank, one_case, options.aggregated_launches);
    }
    rank.stream.Synchronize();

    const bool reporting_rank = first_thread && rank.rank.global_rank() == 0;
    CaseTiming timing;
    for (auto _ : state) {
      timing = TimeCase(rank, one_case, options);
      // Google Benchmark divides manual time by iterations × threads; scaled
      // by threads, its Time column is the collective's time, as time_us.
      state.SetIterationTime(timing.seconds_per_launch * state.threads());
    }
    const double seconds_per_launch = timing.seconds_per_launch;
    if (reporting_rank) run->iteration_times[name] = timing.iteration_us;
    const int world_size = world.case_world_size();
    const double bytes = static_cast<double>(one_case.plan().bytes);
    const double algbw = bytes / seconds_per_launch / 1e9;
    state.counters["bytes"] = PerCase(bytes);
    state.counters["ranks"] = PerCase(world_size);
    state.counters["launches"] =
        PerCase(static_cast<double>(options.iterations * options.aggregated_launches *
                                    std::max<int64_t>(1, options.graph_launches)));
    state.counters["time_us"] = PerCase(seconds_per_launch * 1e6);
    state.counters["algbw_GBps"] = PerCase(algbw);
    state.counters["busbw_GBps"] = PerCase(algbw * BusBandwidthFactor(spec.collective, world_size));
    if (options.cpu_time) state.counters["cpu_time"] = PerCase(1);

    int64_t group_wrong = -1;
    if (options.check) {
      one_case.FillInputs();
      rank.Synchronize();
      one_case.Launch();
      rank.stream.Synchronize();
      const double wrong = rank.ReduceOverRanks(static_cast<double>(one_case.CountWrongElements()),
                                                ccl::ReduceOp::kSum);
      state.counters["wrong"] = PerCase(wrong);
      if (first_thread) run->wrong_elements += std::llround(wrong);
      group_wrong = std::llround(rank.ReduceOverGroup(
          static_cast<double>(one_case.CountWrongElements()), ccl::ReduceOp::kSum));
    }
    if (rank.group_count > 1) {
      std::vector<GroupResult> groups = GatherGroups(rank, timing, group_wrong, run->group_colors);
      if (reporting_rank) run->group_results[name] = std::move(groups);
    }
    if (first_thread) run->watchdog->Stop();
  } catch (const std::exception& error) {
    FailRank(rank, name + ": " + error.what());
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
    for (int64_t bytes : SweepSizes(options)) {
      cases.push_back(CaseSpec{collective, bytes, options.dtype, options.op, options.in_place,
                               options.root, options.register_buffers});
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

// The plugin's word on the link of this process's first device, for the
// verdict; a failing entry counts as "cannot tell", with its reason.
std::optional<ccl::LinkBandwidth> ReportedLink(const ccl::Backend& backend) {
  if (!backend.capabilities().link_bandwidth() || backend.DeviceCount() == 0) return std::nullopt;
  try {
    return backend.GetLinkBandwidth(0);
  } catch (const ccl::Error& error) {
    return ccl::LinkBandwidth{0, std::string("unknown: ") + error.what()};
  }
}

// Refuses what this backend cannot do with the options, before any case.
void RefuseUnsupportedOptions(const BenchOptions& options, const ccl::Backend& backend,
                              bool wants_benchmark_console) {
  const std::string name = backend.info().name;
  if (options.graph_launches > 0 && backend.info().device_type == kDLCPU) {
    throw UsageError("-G/--graph_launches=" + std::to_string(options.graph_launches) +
                     ": graph replay needs a device backend (CUDA graphs); " + name +
                     " runs on the host");
  }
  if (options.graph_launches > 0 && !backend.capabilities().capture()) {
    throw UsageError("-G/--graph_launches: the backend " + name +
                     " cannot capture a stream (its plugin has no stream_begin_capture)");
  }
  if (options.graph_launches > 0 && options.timing == Timing::kPerIteration) {
    throw UsageError(
        "-G/--graph_launches: graphs replay the loop back to back; drop -z 1 "
        "(--timing=per_iteration)");
  }
  if (options.register_buffers == 1 && !backend.capabilities().register_buffers()) {
    throw UsageError("-R/--register=1: the backend " + name +
                     " offers no buffer registration (its plugin has no comm_register)");
  }
  if (options.register_buffers == 2 && !backend.capabilities().register_windows()) {
    throw UsageError("-R/--register=2: the backend " + name +
                     " offers no window registration (its plugin has no comm_window_register; "
                     "NCCL has it from 2.27)");
  }
  if (!options.json_path.empty() && wants_benchmark_console) {
    throw UsageError(
        "-J/--json: not with --benchmark_format (the JSON comes from ccl_bench's "
        "table)");
  }
}

// "2.00 MB", as nccl-tests' -M prints amounts.
std::string MemoryText(int64_t bytes) {
  double amount = static_cast<double>(bytes);
  const char* unit = " B";
  for (const char* larger : {" KB", " MB", " GB"}) {
    if (amount < 1024.0) break;
    amount /= 1024.0;
    unit = larger;
  }
  char text[64];
  std::snprintf(text, sizeof(text),
                amount < 10    ? "%.2f%s"
                : amount < 100 ? "%.1f%s"
                               : "%.0f%s",
                amount, unit);
  return text;
}

int Main(int argc, char** argv) {
  if (HasFlag(argc, argv, "--help") || HasFlag(argc, argv, "-h")) {
    std::cout << BenchUsage();
    return 0;
  }
  const std::vector<std::string> original_args(argv, argv + argc);
  const std::string start_time = NowAsNcclTestsTime();
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
  ApplySplitEnvironment([](const char* name) { return std::getenv(name); }, &options);
  const int total_ranks = topology.proc_world_size() * options.threads_per_process;
  if (options.root >= total_ranks) {
    throw UsageError("--root=" + std::to_string(options.root) + ": expected a rank below the " +
                     "world size " + std::to_string(total_ranks));
  }
  std::vector<CaseSpec> cases = CasesToRun(options, reports);

  std::unique_ptr<BenchWorld> world =
      BenchWorld::Create(options.ccl_backend, options.threads_per_process);
  const ccl::Backend& backend = *world->backend();
  RefuseUnsupportedOptions(options, backend, wants_benchmark_console);
  RunState run;
  if (options.split.active()) {
    world->SplitGroups(options.split);
    std::set<int> colors;
    for (int rank = 0; rank < total_ranks; ++rank) colors.insert(options.split.Color(rank));
    run.group_colors.assign(colors.begin(), colors.end());
  }
  // A case's ranks: its group's under --split.
  const int world_size = world->case_world_size();
  if (options.root >= world_size) {
    throw UsageError("--root=" + std::to_string(options.root) + ": expected a rank below the " +
                     "group size " + std::to_string(world_size) + " of --split='" +
                     OneLine(options.split.text) + "'");
  }
  cases = SupportedCases(cases, backend.capabilities(), reports);
  const char* nvls = std::getenv("NCCL_NVLS_ENABLE");
  const std::optional<LinkProfile> link = ChooseLink(
      options.link, backend.info().device_type, backend.info().device_vendor, backend.info().name,
      topology.nnodes, nvls != nullptr && std::string_view(nvls) == "0", ReportedLink(backend));
  std::optional<Expectations> expectations;
  if (!options.expect_path.empty()) expectations = Expectations::Load(options.expect_path);
  run.watchdog = std::make_unique<CaseWatchdog>(options.timeout_s);
  std::map<std::string, TableCase> table_cases;
  const size_t element_bytes = ccl::ElementBytes(options.dtype);
  // -N: the whole sweep again, each cycle printed.
  for (int64_t cycle = 0; cycle < options.run_cycles; ++cycle) {
    for (const CaseSpec& spec : cases) {
      const std::string name = CaseName(spec, world_size);
      const BufferPlan plan =
          PlanBuffers(spec.collective, spec.requested_bytes, element_bytes, world_size);
      table_cases[name] = TableCase{spec, plan.total_elements};
      benchmark::RegisterBenchmark(name.c_str(),
                                   [spec, &options, &world, &run](benchmark::State& state) {
                                     RunCase(state, spec, options, *world, &run);
                                   })
          ->Threads(options.threads_per_process)
          ->Iterations(1)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
  std::vector<TableRow> rows;
  if (reports) {
    std::ostringstream title;
    title << "ccl_bench: backend " << backend.info().name << ", " << total_ranks
          << " ranks = " << topology.proc_world_size() << " processes x "
          << options.threads_per_process << " threads, timing " << TimingName(options.timing)
          << ", " << options.iterations << " launches (+" << options.warmup_iterations
          << " warm-up) per case";
    if (options.aggregated_launches > 1) title << " x " << options.aggregated_launches << " agg";
    if (options.graph_launches > 0) title << ", graph replayed " << options.graph_launches << "x";
    if (options.register_buffers == 1) title << ", buffers registered (-R 1)";
    if (options.register_buffers == 2) title << ", buffers in symmetric windows (-R 2)";
    if (link) title << "\n# verdict against " << link->name << ": " << link->what;
    const std::string no_verdict = link ? ""
                                        : AutoHasNoVerdict(options.link, backend.info().device_type,
                                                           backend.info().name, topology.nnodes);
    if (!no_verdict.empty()) title << "\n# " << no_verdict;
    if (options.split.active()) {
      title << "\n# split '" << options.split.text << "': " << run.group_colors.size()
            << " groups of " << world_size
            << " ranks, timed at once; a row per group, 'group' is its colour";
    }
    if (wants_benchmark_console) {
      std::cout << title.str() << std::endl;
      benchmark::RunSpecifiedBenchmarks();
    } else {
      ReportSinks sinks;
      sinks.times = &run.iteration_times;
      sinks.groups = &run.group_results;
      sinks.rows = &rows;
      sinks.extra.verdict = link.has_value();
      sinks.extra.expect = expectations.has_value();
      sinks.judge = [&](Collective collective, int ranks, TableRow* row) {
        if (link) JudgeRow(*link, collective, ranks, row);
        if (expectations) expectations->Compare(options.expect_tolerance_pct, row);
      };
      NcclTestsTableReporter table(std::move(table_cases), title.str(), options.check, sinks);
      benchmark::RunSpecifiedBenchmarks(&table);
    }
  } else {
    NullReporter silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  }
  if (reports && options.memory_report) {
    const std::string used = MemoryText(run.most_buffer_bytes.load());
    std::cout << "# GPU memory usage     : User-Allocated " << used << " | Total  " << used
              << " (per rank, the largest case's buffers)" << std::endl;
  }
  JsonRun json;
  if (reports && !options.json_path.empty()) {
    json.backend = backend.info().name;
    json.nccl_version = NcclVersionCode(backend.info().version);
    json.world_size = total_ranks;
    json.threads_per_process = options.threads_per_process;
    for (int thread = 0; thread < world->threads_per_process(); ++thread) {
      const RankResources& rank = world->rank(thread);
      json.devices.push_back(JsonDevice{rank.rank.global_rank(),
                                        options.split.Color(rank.rank.global_rank()),
                                        rank.device_index, backend.info().name});
    }
  }
  // Communicators, streams and buffers go while the backend's runtime is
  // still up (not at static destruction).
  run.watchdog.reset();
  world->Destroy();
  world.reset();
  benchmark::ClearRegisteredBenchmarks();
  benchmark::Shutdown();

  if (reports && !options.json_path.empty()) {
    json.start_time = start_time;
    json.end_time = NowAsNcclTestsTime();
    json.args = original_args;
    json.env = RunEnvironment();
    json.options = options;
    json.rows = std::move(rows);
    const std::string written = WriteNewFile(options.json_path, FormatNcclTestsJson(json));
    std::cout << "# Writing JSON output to " << written << std::endl;
  }
  const int64_t wrong_elements = run.wrong_elements.load();
  int64_t regressions = 0;
  for (const TableRow& row : json.rows.empty() ? rows : json.rows) regressions += row.regressed;
  if (reports && expectations) {
    if (regressions > 0) {
      std::cerr << "ccl_bench: --expect: " << regressions << " line(s) slower than "
                << options.expect_path << " by more than " << options.expect_tolerance_pct
                << "% (marked '!')" << std::endl;
    } else {
      std::cout << "ccl_bench: --expect: no line slower than " << options.expect_path
                << " by more than " << options.expect_tolerance_pct << "%" << std::endl;
    }
  }
  if (options.check && reports) {
    if (wrong_elements > 0) {
      std::cerr << "ccl_bench: --check failed: " << wrong_elements
                << " wrong elements over all cases and ranks (first ones above)" << std::endl;
    } else {
      std::cout << "ccl_bench: --check passed: every case on every rank matches the host "
                   "reference"
                << std::endl;
    }
  }
  // The verdict is global rank 0's: were the other ranks to fail too, the
  // launcher could stop rank 0 before it has printed what was wrong.
  return reports && (wrong_elements > 0 || regressions > 0) ? 1 : 0;
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
