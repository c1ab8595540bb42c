// ccl_conformance: judges every entry of a backend plugin against the host
// reference, under infini_run, in any process × thread layout:
//
//   infini_run --nproc_per_node=2 --ccl_backend=gloo -- ccl_conformance
//   infini_run --nproc_per_node=1 -- ccl_conformance --ccl_backend=/path/libinfini_ccl_x.so
//       --nthread_per_process=2 --json=report.json
//
// Every rank runs the same items in the same order, each bounded by
// --item_timeout_s (a watchdog aborts the communicators of a rank that
// passes it, so a hung item is reported and the next one starts on a new
// communicator). Ranks agree on each verdict through the run's store: an
// item's verdict is the worst of any rank's. Global rank 0 prints the table;
// the exit status is 0 only when no item is FAIL or missing.
#include <gflags/gflags.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <thread>
#include <utility>

#include "infini/common/flags.h"
#include "infini/common/launch_env.h"
#include "infini/conformance/run_store.h"
#include "infini/parallel/env_reader.h"
#include "infini/parallel/errors.h"
#include "infini/parallel/rank.h"
#include "infini/parallel/rank_threads.h"
#include "report.h"
#include "suite.h"
#include "suite_items.h"

DEFINE_string(ccl_backend, "", "Backend: a name or a plugin path (default: $INFINI_CCL_BACKEND)");
DEFINE_int64(nthread_per_process, 0, "Ranks (threads) in each process (default 1)");
DEFINE_int64(threads_per_process, 0, "Another name of --nthread_per_process");
DEFINE_bool(quick, false,
            "Counts 0, 1, 13, 1031 and just past 1 MiB, every root up to 13, and 20 s per "
            "item: for CI");
DEFINE_int64(large_count, 16777219,
             "The largest element count, judged in float32 (default: past 64 MiB); every other "
             "type goes past 4 MiB (--quick: 1 MiB)");
DEFINE_string(victim_of, "", "(internal) the process failure/peer_killed starts and kills");
DEFINE_int64(victim_world, 0, "(internal) its communicator's size");
DEFINE_bool(fail_fast, false, "Stop at the first FAIL or missing item and print the summary");
DEFINE_int64(item_timeout_s, 60, "Seconds an item may take on a rank before it counts as hung");
DEFINE_string(json, "", "Also write the verdicts to this JSON file (global rank 0)");
DEFINE_string(filter, "", "Run only the items whose name contains this text");

namespace infini::conformance {
namespace {

// A user's mistake: one line and exit code 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How long a rank thread may stay blocked after its communicators were
// aborted before the suite gives up on the process.
constexpr std::chrono::seconds kAbortGrace{15};

// The upper bounds of the count flags (see Main).
constexpr int64_t kMaxThreadsPerProcess = 1024;
constexpr int64_t kMaxItemTimeoutSeconds = 7 * 24 * 3600;
constexpr int64_t kMaxLargeCount = int64_t{1} << 30;

void WriteJson(const Report& report, const std::string& path, const std::string& backend,
               int world_size, int processes, int threads) {
  std::ofstream file(path);
  if (!file) throw UsageError("--json='" + path + "': cannot open it for writing");
  std::map<Verdict, int> tally = Tally(report.rows);
  // Ordered: the keys in the order a reader of the file expects them.
  nlohmann::ordered_json items = nlohmann::ordered_json::array();
  for (const Row& row : report.rows) {
    items.push_back({{"name", row.name},
                     {"verdict", VerdictName(row.outcome.verdict)},
                     {"detail", row.outcome.detail}});
  }
  const nlohmann::ordered_json document = {{"backend", backend},
                                           {"world_size", world_size},
                                           {"processes", processes},
                                           {"threads_per_process", threads},
                                           {"summary",
                                            {{"pass", tally[Verdict::kPass]},
                                             {"unsupported", tally[Verdict::kUnsupported]},
                                             {"missing", tally[Verdict::kMissing]},
                                             {"fail", tally[Verdict::kFail]}}},
                                           {"items", std::move(items)}};
  file << document.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
}

// ---- Verdicts over ranks ----------------------------------------------------------

Outcome Fail(std::string detail) { return {Verdict::kFail, std::move(detail), false}; }

std::string EncodeOutcome(const Outcome& outcome) {
  return std::to_string(static_cast<int>(outcome.verdict)) + (outcome.rebuild_world ? "r" : "-") +
         outcome.detail;
}

Outcome DecodeOutcome(const std::string& text) {
  Outcome outcome;
  if (text.size() < 2) return Fail("a rank sent an unreadable verdict");
  outcome.verdict = static_cast<Verdict>(text[0] - '0');
  outcome.rebuild_world = text[1] == 'r';
  outcome.detail = text.substr(2);
  return outcome;
}

// Global rank 0 combines every rank's outcome (the worst wins; its detail
// names the rank when ranks differ) and publishes it; the others read it.
Outcome AgreeOnOutcome(RankContext& context, const std::string& key, const Outcome& mine,
                       std::chrono::milliseconds deadline) {
  context.store->Set(key + "/" + std::to_string(context.rank), EncodeOutcome(mine));
  if (context.rank != 0) {
    context.store->Wait({key + "/all"}, deadline);
    return DecodeOutcome(context.store->Get(key + "/all"));
  }
  std::vector<std::string> keys;
  for (int rank = 0; rank < context.world_size; ++rank) {
    keys.push_back(key + "/" + std::to_string(rank));
  }
  Outcome combined;
  try {
    context.store->Wait(keys, deadline);
    int worst_rank = -1;
    bool details_differ = false;
    std::string first_detail;
    for (int rank = 0; rank < context.world_size; ++rank) {
      const Outcome theirs = DecodeOutcome(context.store->Get(keys[static_cast<size_t>(rank)]));
      if (rank == 0) first_detail = theirs.detail;
      details_differ = details_differ || theirs.detail != first_detail;
      combined.rebuild_world = combined.rebuild_world || theirs.rebuild_world;
      if (worst_rank < 0 || theirs.verdict > combined.verdict) {
        combined.verdict = theirs.verdict;
        combined.detail = theirs.detail;
        worst_rank = rank;
      }
    }
    if (details_differ && combined.verdict == Verdict::kFail) {
      combined.detail = "rank " + std::to_string(worst_rank) + ": " + combined.detail;
    }
  } catch (const rendezvous::StoreError& error) {
    combined = Fail(std::string("not every rank reported a verdict: ") + error.what());
    combined.rebuild_world = true;
  }
  context.store->Set(key + "/all", EncodeOutcome(combined));
  return combined;
}

// ---- One rank's run ---------------------------------------------------------------

Outcome RunItem(RankContext& context, const Item& item) {
  if (item.needs_world && !context.world.valid()) {
    return {Verdict::kMissing, "needs the world communicator: " + context.world_problem, false};
  }
  try {
    context.ActivateDevice();
  } catch (const std::exception&) {
    // runtime/device_count reports it; items still try.
  }
  try {
    return item.run(context);
  } catch (const ccl::Error& error) {
    // A required entry answering "unsupported" is missing, not wrong.
    const Verdict verdict =
        error.code() == infiniCclUnsupported ? Verdict::kMissing : Verdict::kFail;
    return {verdict, error.what(), true};
  } catch (const std::exception& error) {
    return {Verdict::kFail, error.what(), true};
  }
}

void MakeWorld(RankContext& context) {
  context.world = ccl::Communicator();
  try {
    context.ActivateDevice();
  } catch (const std::exception&) {
    // runtime/device_count names the device entries; init may still work.
  }
  try {
    context.world = context.NewCommunicator("world/" + std::to_string(context.world_generation++));
    context.world_problem.clear();
    if (!context.stream.handle()) context.stream = ccl::Stream(context.backend);
  } catch (const std::exception& error) {
    context.world = ccl::Communicator();
    context.world_problem = error.what();
  }
}

void DropWorld(RankContext& context) {
  if (!context.world.valid()) return;
  try {
    if (context.capabilities().abort()) {
      context.world.Abort();
    } else {
      context.world.Destroy();
    }
  } catch (const std::exception&) {
    // A new world follows either way.
  }
  context.world = ccl::Communicator();
}

// ---- A crash is a verdict too ---------------------------------------------------

// The item this process's first rank thread is in, for the crash line of
// any process (a fixed buffer: read from a signal handler).
char g_running_item[160] = "(before the first item)";
std::atomic<size_t> g_running_index{0};
int g_global_rank = 0;
std::atomic<Report*> g_report{nullptr};  // global rank 0's process only
// Where global rank 0 leaves the rows so far for the next attempt, when the
// launcher will restart the run (--max_restarts); "" when it will not.
char g_resume_path[512] = "";

void NoteRunning(const std::string& name, size_t index) {
  std::snprintf(g_running_item, sizeof(g_running_item), "%s", name.c_str());
  g_running_index = index;
}

// A plugin entry that crashes ends the process (it cannot go on); its last
// word is the verdict: global rank 0 prints the rows so far, the item in
// progress as FAIL and the summary; another process names its rank and
// item (then infini_run stops the run, and rank 0 prints its table on the
// SIGTERM). Not async-signal-safe, knowingly: the process is ending either
// way, and a table beats a bare signal.
extern "C" void OnFatalSignal(int signal_number) {
  static std::atomic<bool> reported{false};
  if (reported.exchange(true)) {
    // Another rank thread is reporting; it ends the process when done.
    while (true) pause();
  }
  const std::string what =
      signal_number == SIGTERM
          ? std::string(
                "stopped by SIGTERM in this item (another rank's process ended, or "
                "the run was stopped)")
          : std::string("the process crashed with ") + strsignal(signal_number) +
                " in this item (in a plugin entry it calls, or the suite)";
  if (Report* report = g_report.load(); report != nullptr) {
    report->rows.push_back({g_running_item, Fail(what)});
    if (g_resume_path[0] != '\0') {
      WriteResume(g_resume_path, *report, g_running_index + 1);
      std::fprintf(stderr, "ccl_conformance: the launcher restarts the run; it goes on after %s\n",
                   g_running_item);
    } else {
      PrintTable(*report);
    }
  } else if (signal_number != SIGTERM) {
    std::fprintf(stderr, "ccl_conformance: global rank %d, item %s: %s\n", g_global_rank,
                 g_running_item, what.c_str());
  }
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

void ReportFatalSignals() {
  for (int signal_number : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTERM}) {
    std::signal(signal_number, OnFatalSignal);
  }
}

void RunRank(RankContext& context, const std::vector<Item>& items, size_t first_index,
             Report* report) {
  const auto deadline_after = [&] {
    return std::chrono::steady_clock::now() + context.options.item_timeout;
  };
  const auto agree_deadline = context.options.item_timeout * 2 + kAbortGrace;
  for (size_t index = 0; index < items.size(); ++index) {
    const Item& item = items[index];
    // A resumed attempt makes the world again, then goes on after the crash.
    if (index < first_index) {
      if (item.makes_world) MakeWorld(context);
      continue;
    }
    if (!FLAGS_filter.empty() && item.name.find(FLAGS_filter) == std::string::npos &&
        item.name != "init/world") {
      continue;
    }
    if (report != nullptr) {
      std::lock_guard<std::mutex> lock(report->mutex);
      report->running = item.name;
    }
    if (context.thread_rank == 0) NoteRunning(item.name, index);
    context.item_key = "item/" + std::to_string(index);
    context.watch->Arm(deadline_after());
    if (item.makes_world) MakeWorld(context);
    Outcome outcome;
    {
      Watched watched(*context.watch, context.world);
      outcome = RunItem(context, item);
    }
    context.watch->Disarm();
    if (context.watch->fired()) {
      outcome = Fail("did not finish within " +
                     std::to_string(context.options.item_timeout.count() / 1000) +
                     " s; its communicators were aborted (" + outcome.detail + ")");
      outcome.rebuild_world = true;
    }
    const Outcome agreed =
        AgreeOnOutcome(context, context.item_key + "/verdict", outcome, agree_deadline);
    if (report != nullptr) {
      std::lock_guard<std::mutex> lock(report->mutex);
      report->rows.push_back({item.name, agreed});
      report->running.clear();
    }
    if (FLAGS_fail_fast &&
        (agreed.verdict == Verdict::kFail || agreed.verdict == Verdict::kMissing)) {
      break;  // every rank agreed on this verdict, so every rank stops here
    }
    if (agreed.rebuild_world && (context.world.valid() || context.world_problem.empty())) {
      DropWorld(context);
      context.watch->Arm(deadline_after());
      MakeWorld(context);
      context.watch->Disarm();
    }
  }
  DropWorld(context);
}

// Aborts the communicators of a rank past its item's deadline; ends the
// process when a rank stays blocked even so (printing what global rank 0
// has, when it is here).
void Watchdog(std::vector<std::unique_ptr<HangWatch>>& watches, Report* report,
              const std::atomic<bool>& done) {
  while (!done.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto now = std::chrono::steady_clock::now();
    for (size_t thread = 0; thread < watches.size(); ++thread) {
      if (watches[thread]->Check(now) < kAbortGrace) continue;
      std::cout.flush();
      if (report != nullptr) {
        std::lock_guard<std::mutex> lock(report->mutex);
        report->rows.push_back(
            {report->running,
             Fail("still blocked " + std::to_string(kAbortGrace.count()) +
                  " s after its communicators were aborted (or the plugin cannot abort); the "
                  "suite cannot go on")});
        PrintTable(*report);
      }
      std::cerr << "ccl_conformance: thread rank " << thread
                << " is stuck in an item even after comm_abort; stopping" << std::endl;
      std::_Exit(1);
    }
  }
}

int Main(int argc, char** argv) {
  infini::flags::Parse(
      &argc, &argv, "infini_run [launcher flags] -- ccl_conformance [--quick] [flags]",
      "Judges a backend plugin against the host reference; run under infini_run.\n"
      "  infini_run --nproc_per_node=2 --ccl_backend=gloo -- ccl_conformance --quick");
  if (argc > 1) throw UsageError(std::string("unexpected argument '") + argv[1] + "'");
  if (!FLAGS_victim_of.empty()) {
    return internal::RunVictim(FLAGS_victim_of, static_cast<int>(FLAGS_victim_world),
                               FLAGS_ccl_backend);
  }
  // Each count flag's range, said in its refusal: rank threads as in
  // ccl_bench (each holds a communicator and a store connection), item
  // timeouts up to INFINI_CCL_TIMEOUT_S's week, and element counts whose
  // buffers (count x ranks x 8 bytes) stay far from overflowing a size.
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"nthread_per_process", FLAGS_nthread_per_process},
        {"threads_per_process", FLAGS_threads_per_process}}) {
    if (value < 0 || value > kMaxThreadsPerProcess) {
      throw UsageError("--" + std::string(name) + "=" + std::to_string(value) +
                       ": expected a number of ranks per process in [1, " +
                       std::to_string(kMaxThreadsPerProcess) + "]");
    }
  }
  int threads = static_cast<int>(FLAGS_nthread_per_process > 0 ? FLAGS_nthread_per_process
                                                               : FLAGS_threads_per_process);
  if (threads == 0) threads = 1;
  if (FLAGS_item_timeout_s < 1 || FLAGS_item_timeout_s > kMaxItemTimeoutSeconds) {
    throw UsageError("--item_timeout_s=" + std::to_string(FLAGS_item_timeout_s) +
                     ": expected at least 1 second, at most " +
                     std::to_string(kMaxItemTimeoutSeconds) + " (a week)");
  }
  if (FLAGS_large_count < 2 || FLAGS_large_count > kMaxLargeCount) {
    throw UsageError("--large_count=" + std::to_string(FLAGS_large_count) +
                     ": expected at least 2 elements, at most " + std::to_string(kMaxLargeCount));
  }
  SuiteOptions options;
  options.counts = FLAGS_quick ? std::vector<int64_t>{0, 1, 13, 1031}
                               : std::vector<int64_t>{0, 1, 7, 13, 1031, 65537};
  options.every_root_up_to = FLAGS_quick ? 13 : 1031;
  options.large_bytes = FLAGS_quick ? int64_t{1} << 20 : int64_t{4} << 20;
  options.large_for_every_type = !FLAGS_quick;
  options.largest_float32_count = FLAGS_quick ? 0 : FLAGS_large_count;
  std::string counts_text;
  for (int64_t count : CountsFor(options, ccl::dtype::kFloat32)) {
    counts_text += " " + std::to_string(count);
  }
  options.item_timeout = std::chrono::seconds(
      FLAGS_quick ? std::min<int64_t>(FLAGS_item_timeout_s, 20) : FLAGS_item_timeout_s);

  const parallel::Environment environment = parallel::CurrentEnvironment();
  const parallel::ProcessTopology topology = parallel::ReadProcessTopology(environment);
  const parallel::RuntimeSettings settings = parallel::ReadRuntimeSettings(environment, topology);
  const std::shared_ptr<const ccl::Backend> backend = ccl::Backend::Load(FLAGS_ccl_backend);
  const RunStore run_store(settings, topology, "ccl_conformance");

  const parallel::Rank first(topology, 0, threads);
  const int world_size = first.world_size();

  // Devices: as parallel/ chooses them, unless the plugin cannot say how
  // many it has (a port's first steps); runtime/device_count reports that.
  int visible = 1;
  std::string device_problem;
  try {
    visible = backend->info().device_type == kDLCPU ? 1 : backend->DeviceCount();
  } catch (const std::exception& error) {
    device_problem = error.what();
    visible = first.local_world_size();
  }
  const bool spare_device = backend->info().device_type == kDLCPU || visible > world_size;
  std::vector<Item> items = BuildItems(backend->capabilities(), world_size, threads, spare_device);

  ThreadMeeting meeting(threads);
  std::vector<std::unique_ptr<HangWatch>> watches;
  std::vector<std::unique_ptr<RankContext>> contexts;
  for (int thread = 0; thread < threads; ++thread) {
    const parallel::Rank rank(topology, thread, threads);
    auto context = std::make_unique<RankContext>();
    context->backend = backend;
    context->rank = rank.global_rank();
    context->world_size = world_size;
    context->thread_rank = thread;
    context->threads = threads;
    context->device_problem = device_problem;
    try {
      context->device = parallel::SelectDeviceIndex(
          rank, backend->info().device_type, visible,
          {.allow_sharing = settings.allow_device_sharing,
           .isolated = settings.devices_isolated,
           .visible_devices_variable = backend->info().visible_devices_env});
    } catch (const parallel::ParallelConfigError& error) {
      context->device = parallel::DeviceIndexAmongVisible(rank, settings.devices_isolated);
      context->device_problem = error.what();
    }
    context->run_store = &run_store;
    context->store = run_store.Connect();
    context->meeting = &meeting;
    watches.push_back(std::make_unique<HangWatch>());
    context->watch = watches.back().get();
    context->options = options;
    contexts.push_back(std::move(context));
  }

  const std::vector<std::string> backends =
      AgreeOnItems(items, *contexts.front()->store, "declared_items", topology.global_proc_rank,
                   topology.proc_world_size(), backend->info().name);

  const bool reports = topology.global_proc_rank == 0;
  Report report;
  if (reports) {
    const auto& info = backend->info();
    report.header = "ccl_conformance: backend " + info.name + " (" + info.library_path + ", ABI " +
                    std::to_string(info.abi_version) + ", " + info.version + "), " +
                    std::to_string(world_size) +
                    " ranks = " + std::to_string(topology.proc_world_size()) + " processes x " +
                    std::to_string(threads) + " threads, float32 counts" + counts_text +
                    " (other types up to " + std::to_string(options.large_bytes >> 20) + " MiB" +
                    (FLAGS_quick ? ", float32 only" : "") + "), every root up to " +
                    std::to_string(options.every_root_up_to);
    if (std::any_of(backends.begin(), backends.end(),
                    [&](const std::string& name) { return name != info.name; })) {
      report.header += "; a mixed job: processes on ";
      for (size_t i = 0; i < backends.size(); ++i) {
        report.header += (i > 0 ? ", " : "") + backends[i];
      }
    }
  }
  // A restarted attempt goes on after the item that crashed the last one.
  size_t first_index = 0;
  const std::string resume_path = ResumePath(settings.run_id);
  if (settings.restart_count > 0) {
    const std::string key = "resume_from";
    if (reports) {
      first_index = ReadResume(resume_path, &report);
      contexts.front()->store->Set(key, std::to_string(first_index));
    } else {
      first_index = std::strtoull(contexts.front()->store->Get(key).c_str(), nullptr, 10);
    }
  }
  const char* max_restarts = std::getenv(env::torchrun::kMaxRestarts);
  if (reports && max_restarts != nullptr && settings.restart_count < std::atoi(max_restarts)) {
    std::snprintf(g_resume_path, sizeof(g_resume_path), "%s", resume_path.c_str());
  }
  g_global_rank = first.global_rank();
  if (reports) g_report = &report;
  ReportFatalSignals();
  std::atomic<bool> done{false};
  std::thread watchdog;
  try {
    watchdog =
        std::thread(Watchdog, std::ref(watches), reports ? &report : nullptr, std::cref(done));
  } catch (const std::system_error& error) {
    throw parallel::ThreadStartError(std::string("cannot start the watchdog thread: ") +
                                     error.what());
  }
  // All or none: a rank thread that cannot be made is one line, and the
  // ones made stop before they meet (never std::terminate).
  try {
    parallel::RunOnThreads(
        threads, "the rank threads (--nthread_per_process=" + std::to_string(threads) + ")",
        [&](int thread) {
          RunRank(*contexts[static_cast<size_t>(thread)], items, first_index,
                  reports && thread == 0 ? &report : nullptr);
        });
  } catch (const parallel::ThreadStartError&) {
    done = true;
    watchdog.join();
    throw;
  }
  done = true;
  watchdog.join();
  g_report = nullptr;

  if (!reports) return 0;
  PrintTable(report);
  if (!FLAGS_json.empty()) {
    WriteJson(report, FLAGS_json, backend->info().name, world_size, topology.proc_world_size(),
              threads);
  }
  std::map<Verdict, int> tally = Tally(report.rows);
  const bool failed = tally[Verdict::kFail] + tally[Verdict::kMissing] > 0;
  // Exit 1 restarts the run while restarts remain: those attempts only
  // print this table again, they judge nothing twice.
  if (failed && g_resume_path[0] != '\0') WriteResume(g_resume_path, report, items.size());
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace infini::conformance

int main(int argc, char** argv) {
  try {
    return infini::conformance::Main(argc, argv);
  } catch (const infini::conformance::UsageError& error) {
    std::cerr << "ccl_conformance: " << error.what() << std::endl;
    return 2;
  } catch (const infini::parallel::ParallelConfigError& error) {
    std::cerr << "ccl_conformance: " << error.what() << std::endl;
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "ccl_conformance: " << error.what() << std::endl;
    return 1;
  }
}
