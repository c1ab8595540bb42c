#include "bench_options.h"

#include <cctype>
#include <charconv>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>

#include "infini/common/command_line.h"
#include "infini/common/one_line.h"
#include "infini/common/usage.h"

namespace infini::bench {
namespace {

// The collectives ccl_bench times; what each is, ccl's table says.
constexpr Collective kBenchCollectives[] = {Collective::kAllReduce,     Collective::kAllGather,
                                            Collective::kReduceScatter, Collective::kBroadcast,
                                            Collective::kReduce,        Collective::kSend,
                                            Collective::kAllToAll};

std::string CollectiveNameList() {
  std::string names;
  for (Collective collective : kBenchCollectives) {
    names += std::string(names.empty() ? "" : ", ") + std::string(BenchCollectiveName(collective));
  }
  return names;
}

// Iterations per case (--iters, --warmup) stop at a billion: past that a
// case of the smallest message runs for hours, and every count stays far
// from an int overflow in the libraries that take it.
constexpr int64_t kMaxIterations = 1'000'000'000;

[[noreturn]] void Refuse(std::string_view flag, std::string_view value, std::string_view expected) {
  throw UsageError(flags::BadValueMessage(flag, value, expected));
}

int64_t ParseInteger(std::string_view flag, std::string_view text, int64_t min_value,
                     int64_t max_value) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < min_value ||
      value > max_value) {
    Refuse(flag, text,
           "an integer from " + std::to_string(min_value) + " to " + std::to_string(max_value));
  }
  return value;
}

bool ParseBool(std::string_view flag, std::string_view text) {
  if (text == "true" || text == "1" || text == "yes") return true;
  if (text == "false" || text == "0" || text == "no") return false;
  Refuse(flag, text, "true or false");
}

std::vector<Collective> ParseCollectives(std::string_view flag, std::string_view text) {
  if (text == "all") return AllCollectives();
  std::vector<Collective> collectives;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string_view word = text.substr(begin, comma - begin);
    bool known = false;
    for (Collective collective : kBenchCollectives) {
      if (BenchCollectiveName(collective) == word) {
        collectives.push_back(collective);
        known = true;
      }
    }
    if (!known) Refuse(flag, text, "'all' or a comma list of " + CollectiveNameList());
    begin = comma + 1;
  }
  return collectives;
}

// One flag: whether it takes a value, and what to do with the text.
struct FlagSpec {
  bool is_bool = false;
  std::string help;
  std::function<void(std::string_view flag, std::string_view value, BenchOptions*)> apply;
};

const std::map<std::string, FlagSpec, std::less<>>& FlagTable() {
  static const auto* table = new std::map<std::string, FlagSpec, std::less<>>{
      {"ccl_backend",
       {false, "backend name or plugin path (default: $INFINI_CCL_BACKEND, else auto)",
        [](auto, auto value, BenchOptions* o) { o->ccl_backend = value; }}},
      {"collectives",
       {false, "'all' or a comma list of " + CollectiveNameList(),
        [](auto flag, auto value, BenchOptions* o) {
          o->collectives = ParseCollectives(flag, value);
        }}},
      {"min_bytes",
       {false, "smallest message, e.g. 8, 64K, 1M",
        [](auto flag, auto value, BenchOptions* o) {
          o->min_bytes = ParseByteCount(flag, value);
        }}},
      {"max_bytes",
       {false, "largest message",
        [](auto flag, auto value, BenchOptions* o) {
          o->max_bytes = ParseByteCount(flag, value);
        }}},
      {"step_factor",
       {false, "size multiplier between steps",
        [](auto flag, auto value, BenchOptions* o) {
          o->step_factor = ParseInteger(flag, value, 2, 1024);
          o->step_bytes = 0;  // of --step_bytes and --step_factor, the last one given
        }}},
      {"dtype",
       {false, "float32, float64, float16, bfloat16, int8, uint8, int32, int64, ...",
        [](auto flag, auto value, BenchOptions* o) {
          try {
            o->dtype = ccl::ParseDataType(value);
          } catch (const std::invalid_argument&) {
            Refuse(flag, value, "a dtype name such as float32, bfloat16, int32");
          }
        }}},
      {"op",
       {false, "sum, prod, max, min or avg",
        [](auto flag, auto value, BenchOptions* o) {
          try {
            o->op = ccl::ParseReduceOp(value);
          } catch (const std::invalid_argument&) {
            Refuse(flag, value, "sum, prod, max, min or avg");
          }
        }}},
      {"inplace",
       {true, "in-place (recv buffer = send buffer) instead of out-of-place",
        [](auto flag, auto value, BenchOptions* o) { o->in_place = ParseBool(flag, value); }}},
      {"check",
       {true, "after timing, run each case once more and verify against a host reference",
        [](auto flag, auto value, BenchOptions* o) { o->check = ParseBool(flag, value); }}},
      {"iters",
       {false, "timed iterations per case, the same on every rank",
        [](auto flag, auto value, BenchOptions* o) {
          o->iterations = ParseInteger(flag, value, 1, kMaxIterations);
        }}},
      {"warmup",
       {false, "untimed iterations before timing",
        [](auto flag, auto value, BenchOptions* o) {
          o->warmup_iterations = ParseInteger(flag, value, 0, kMaxIterations);
        }}},
      {"threads_per_process",
       {false, "ranks per process, each a Google Benchmark thread",
        [](auto flag, auto value, BenchOptions* o) {
          o->threads_per_process = static_cast<int>(ParseInteger(flag, value, 1, 1024));
        }}},
      {"timing",
       {false,
        "back_to_back (nccl-tests: a barrier, then --iters launches timed together, the "
        "average per launch) or per_iteration (a barrier and events around each launch, max "
        "over ranks)",
        [](auto flag, auto value, BenchOptions* o) {
          if (value == "back_to_back") {
            o->timing = Timing::kBackToBack;
          } else if (value == "per_iteration") {
            o->timing = Timing::kPerIteration;
          } else {
            Refuse(flag, value, "back_to_back or per_iteration");
          }
        }}},
      {"root",
       {false, "root rank of broadcast and reduce",
        [](auto flag, auto value, BenchOptions* o) {
          o->root = static_cast<int>(ParseInteger(flag, value, 0, 1 << 30));
        }}},
      {"step_bytes",
       {false, "grow sizes by this many bytes instead of by --step_factor (the last given wins)",
        [](auto flag, auto value, BenchOptions* o) {
          o->step_bytes = ParseByteCount(flag, value);
        }}},
      {"agg_iters",
       {false, "launches per timed iteration, in one group where the backend has groups",
        [](auto flag, auto value, BenchOptions* o) {
          o->aggregated_launches = ParseInteger(flag, value, 1, 1 << 20);
        }}},
      {"run_cycles",
       {false, "run and print the whole sweep this many times",
        [](auto flag, auto value, BenchOptions* o) {
          o->run_cycles = ParseInteger(flag, value, 1, 1 << 20);
        }}},
      {"graph_launches",
       {false,
        "capture the timed loop as a CUDA graph once and replay it N times (device backends; "
        "0: no graph)",
        [](auto flag, auto value, BenchOptions* o) {
          o->graph_launches = ParseInteger(flag, value, 0, 1 << 20);
        }}},
      {"cpu_time",
       {true, "time the loop with the host clock (stream drained) instead of backend events",
        [](auto flag, auto value, BenchOptions* o) { o->cpu_time = ParseBool(flag, value); }}},
      {"average",
       {false, "the time a line reports over ranks: rank0, mean, min or max",
        [](auto flag, auto value, BenchOptions* o) {
          for (RankAverage average :
               {RankAverage::kRank0, RankAverage::kMean, RankAverage::kMin, RankAverage::kMax}) {
            if (RankAverageName(average) == value) {
              o->average = average;
              return;
            }
          }
          Refuse(flag, value, "rank0, mean, min or max");
        }}},
      {"register",
       {false,
        "register the send and receive buffers with the communicator, as nccl-tests: 1 local "
        "(comm_register), 2 symmetric window (comm_window_register); 0: none",
        [](auto flag, auto value, BenchOptions* o) {
          o->register_buffers = static_cast<int>(ParseInteger(flag, value, 0, 2));
        }}},
      {"timeout",
       {false, "seconds a case may run before the run stops, naming it (0: none)",
        [](auto flag, auto value, BenchOptions* o) {
          o->timeout_s = ParseInteger(flag, value, 0, 1 << 30);
        }}},
      {"memory_report",
       {true, "print the bytes of buffers each rank allocated",
        [](auto flag, auto value, BenchOptions* o) { o->memory_report = ParseBool(flag, value); }}},
      {"split",
       {false,
        "time on sub-communicators, a group per colour of the global rank: 'MOD 2', 'AND 0x7', "
        "'DIV 8', 'OR 0x7' (nccl-tests' NCCL_TESTS_SPLIT, read when this is not given)",
        [](auto flag, auto value, BenchOptions* o) { o->split = ParseSplitRule(flag, value); }}},
      {"link",
       {false,
        "the link a line's busbw is judged against: auto, none, h200_nvlink, pcie5_x16, "
        "loopback_tcp (auto: by backend, one node only)",
        [](auto, auto value, BenchOptions* o) { o->link = value; }}},
      {"expect",
       {false,
        "a saved -J run (ours or nccl-tests'): each line's time against it; slower "
        "beyond --expect_tolerance is a regression (exit 1)",
        [](auto flag, auto value, BenchOptions* o) {
          if (value.empty()) Refuse(flag, value, "a file path");
          o->expect_path = value;
        }}},
      {"expect_tolerance",
       {false, "percent slower than the saved run that is still no regression",
        [](auto flag, auto value, BenchOptions* o) {
          o->expect_tolerance_pct = static_cast<double>(ParseInteger(flag, value, 0, 1000));
        }}},
      {"json",
       {false, "write the results to FILE in nccl-tests' JSON (its -J)",
        [](auto flag, auto value, BenchOptions* o) {
          if (value.empty()) Refuse(flag, value, "a file path");
          o->json_path = value;
        }}},
  };
  return *table;
}

// nccl-tests' one-letter flags, each with its meaning, as one of ours: the
// letter, our flag, and how its value becomes ours.
struct ShortFlag {
  std::string_view long_name;
  std::function<std::string(std::string_view value)> translate;
};

std::string SameValue(std::string_view value) { return std::string(value); }

// nccl-tests' 0/1 switches (-c, -C, -M); -c counts check iterations, any
// positive count checks once.
std::string ZeroOrPositive(std::string_view value) {
  if (value == "0") return "false";
  int64_t count = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), count);
  if (error == std::errc() && end == value.data() + value.size() && count > 0) return "true";
  return std::string(value);  // refused by our flag, naming the value
}

// nccl-tests' type names that are not ccl's.
std::string NcclTestsTypeName(std::string_view value) {
  static const std::map<std::string_view, std::string_view> kNames = {
      {"char", "int8"},     {"int", "int32"},      {"half", "float16"},
      {"float", "float32"}, {"double", "float64"}, {"bf16", "bfloat16"}};
  const auto found = kNames.find(value);
  return std::string(found == kNames.end() ? value : found->second);
}

const std::map<char, ShortFlag>& ShortFlagTable() {
  static const auto* table = new std::map<char, ShortFlag>{
      {'b', {"min_bytes", SameValue}},
      {'e', {"max_bytes", SameValue}},
      {'i', {"step_bytes", SameValue}},
      {'f', {"step_factor", SameValue}},
      {'o', {"op", SameValue}},
      {'d', {"dtype", NcclTestsTypeName}},
      {'r', {"root", SameValue}},
      {'n', {"iters", SameValue}},
      {'w', {"warmup", SameValue}},
      {'m', {"agg_iters", SameValue}},
      {'N', {"run_cycles", SameValue}},
      {'c', {"check", ZeroOrPositive}},
      {'z',
       {"timing",
        [](std::string_view value) -> std::string {
          if (value == "0") return "back_to_back";
          if (value == "1") return "per_iteration";
          throw UsageError("-z '" + OneLine(value) +
                           "': expected 0 (launches back to back) or 1 (a barrier before "
                           "each launch)");
        }}},
      {'G', {"graph_launches", SameValue}},
      {'C', {"cpu_time", ZeroOrPositive}},
      {'a',
       {"average",
        [](std::string_view value) -> std::string {
          constexpr std::string_view kNames[] = {"rank0", "mean", "min", "max"};
          if (value.size() == 1 && value[0] >= '0' && value[0] <= '3') {
            return std::string(kNames[value[0] - '0']);
          }
          throw UsageError("-a '" + OneLine(value) +
                           "': expected 0 (rank 0), 1 (mean), 2 (min) or 3 (max)");
        }}},
      {'R', {"register", SameValue}},
      {'T', {"timeout", SameValue}},
      {'M', {"memory_report", ZeroOrPositive}},
      {'J', {"json", SameValue}},
      {'g', {"threads_per_process", SameValue}},
  };
  return *table;
}

// "1G" for 1 << 30: a byte count as ParseByteCount reads it.
std::string ByteText(int64_t bytes) {
  for (const auto& [suffix, unit] :
       {std::pair{"G", int64_t{1} << 30}, std::pair{"M", int64_t{1} << 20},
        std::pair{"K", int64_t{1} << 10}}) {
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + suffix;
  }
  return std::to_string(bytes);
}

// What --help shows as `name`'s default: BenchOptions' own (bench_options.h),
// the one place it is written; empty for none.
std::string DefaultText(std::string_view name, const BenchOptions& o) {
  const std::map<std::string_view, std::string> shown = {
      {"collectives", std::string(BenchCollectiveName(o.collectives.front()))},
      {"min_bytes", ByteText(o.min_bytes)},
      {"max_bytes", ByteText(o.max_bytes)},
      {"step_factor", std::to_string(o.step_factor)},
      {"dtype", ccl::DataTypeName(o.dtype)},
      {"op", std::string(ccl::ReduceOpName(o.op))},
      {"inplace", o.in_place ? "true" : "false"},
      {"check", o.check ? "true" : "false"},
      {"iters", std::to_string(o.iterations)},
      {"warmup", std::to_string(o.warmup_iterations)},
      {"threads_per_process", std::to_string(o.threads_per_process)},
      {"timing", std::string(TimingName(o.timing))},
      {"root", std::to_string(o.root)},
      {"step_bytes", std::to_string(o.step_bytes)},
      {"agg_iters", std::to_string(o.aggregated_launches)},
      {"run_cycles", std::to_string(o.run_cycles)},
      {"graph_launches", std::to_string(o.graph_launches)},
      {"cpu_time", o.cpu_time ? "true" : "false"},
      {"average", std::string(RankAverageName(o.average))},
      {"register", std::to_string(o.register_buffers)},
      {"timeout", std::to_string(o.timeout_s)},
      {"memory_report", o.memory_report ? "true" : "false"},
      {"link", o.link},
      {"expect_tolerance", std::to_string(static_cast<int64_t>(o.expect_tolerance_pct))},
  };
  const auto found = shown.find(name);
  return found == shown.end() ? "" : found->second;
}

// The one parser's table (infini/common/command_line.h): each of our flags
// with its help and meaning, and nccl-tests' letter where it has one. The
// flags apply in command-line order (--step_bytes and --step_factor: the
// last one wins).
cli::CommandLine BenchCommandLine(BenchOptions* options) {
  std::vector<cli::Flag> flags;
  for (const auto& [name, spec] : FlagTable()) {
    cli::Flag flag;
    flag.name = name;
    flag.type = spec.is_bool ? cli::FlagType::kSwitch : cli::FlagType::kText;
    // Shown in --help only; BenchOptions already holds it.
    flag.default_value = DefaultText(name, BenchOptions{});
    flag.show_default = !flag.default_value.empty();
    flag.help = spec.help;
    flag.on_set = [name, apply = spec.apply, options](const std::string& value) {
      apply(name, value, options);
    };
    for (const auto& [letter, alias] : ShortFlagTable()) {
      if (alias.long_name != name) continue;
      flag.letter = letter;
      flag.letter_value = alias.translate;
    }
    flags.push_back(std::move(flag));
  }
  cli::Program program;
  program.name = "ccl_bench";
  program.usage_line = "infini_run [launcher flags] -- ccl_bench [flags] [--benchmark_* flags]";
  program.description =
      "Times collectives with every rank running the same fixed iterations; rank 0\n"
      "prints a table in nccl-tests' columns (size, count, type, redop, root, time,\n"
      "algbw, busbw, #wrong); the JSON counters are time_us, algbw_GBps, busbw_GBps.";
  program.epilogue =
      "nccl-tests' letters mean what they mean there (shown beside each flag); -d takes its\n"
      "type names too (float, half, ...); -c, -C and -M take 0/1; -z 0 back_to_back, 1\n"
      "per_iteration; -a 0 rank0, 1 mean, 2 min, 3 max; '-b 8' or '-b8'.\n"
      "Google Benchmark's own flags work too (--benchmark_out=FILE.json,\n"
      "--benchmark_filter=REGEX, --benchmark_repetitions=N); only global rank 0 writes.";
  return cli::CommandLine(std::move(program), std::move(flags));
}

}  // namespace

std::string_view BenchCollectiveName(Collective collective) {
  return collective == Collective::kSend ? "sendrecv" : ccl::CollectiveName(collective);
}

const std::vector<Collective>& AllCollectives() {
  static const auto* all =
      new std::vector<Collective>(std::begin(kBenchCollectives), std::end(kBenchCollectives));
  return *all;
}

std::string_view RankAverageName(RankAverage average) {
  switch (average) {
    case RankAverage::kRank0:
      return "rank0";
    case RankAverage::kMin:
      return "min";
    case RankAverage::kMax:
      return "max";
    case RankAverage::kMean:
      break;
  }
  return "mean";
}

std::string_view TimingName(Timing timing) {
  return timing == Timing::kBackToBack ? "back_to_back" : "per_iteration";
}

int64_t ParseByteCount(std::string_view flag, std::string_view text) {
  int64_t multiplier = 1;
  std::string_view digits = text;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K':
      case 'k':
        multiplier = int64_t{1} << 10;
        break;
      case 'M':
      case 'm':
        multiplier = int64_t{1} << 20;
        break;
      case 'G':
      case 'g':
        multiplier = int64_t{1} << 30;
        break;
      default:
        break;
    }
    if (multiplier != 1) digits.remove_suffix(1);
  }
  int64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  constexpr int64_t kMaxBytes = int64_t{1} << 40;
  if (digits.empty() || error != std::errc() || end != digits.data() + digits.size() || value < 1 ||
      value > kMaxBytes / multiplier) {
    Refuse(flag, text, "a byte count from 1 to 1T, optionally with K, M or G (e.g. 8, 64K, 1G)");
  }
  return value * multiplier;
}

std::vector<int64_t> MessageSizes(int64_t min_bytes, int64_t max_bytes, int64_t step_factor) {
  std::vector<int64_t> sizes;
  for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= step_factor) {
    sizes.push_back(bytes);
    if (bytes > max_bytes / step_factor) break;
  }
  // The largest size asked for is always measured (8 B ×4 steps miss 1 GiB).
  if (sizes.back() < max_bytes) sizes.push_back(max_bytes);
  return sizes;
}

std::vector<int64_t> SweepSizes(const BenchOptions& options) {
  if (options.step_bytes <= 0) {
    return MessageSizes(options.min_bytes, options.max_bytes, options.step_factor);
  }
  std::vector<int64_t> sizes;
  for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes += options.step_bytes) {
    sizes.push_back(bytes);
    if (bytes > options.max_bytes - options.step_bytes) break;
  }
  if (sizes.back() < options.max_bytes) sizes.push_back(options.max_bytes);
  return sizes;
}

std::string BenchUsage() {
  BenchOptions unused;
  return BenchCommandLine(&unused).Usage();
}

bool ParseBenchCommandLine(int argc, char** argv, BenchOptions* options) {
  cli::CommandLine line = BenchCommandLine(options);
  try {
    if (!line.ParseArgv(argc, argv)) {
      std::cout << line.Usage();
      return false;
    }
  } catch (const UsageError&) {
    throw;
  } catch (const cli::UsageError& error) {
    throw UsageError(error.what());
  }
  if (options->min_bytes > options->max_bytes) {
    if (line.Given("max_bytes")) {
      throw UsageError("--min_bytes=" + std::to_string(options->min_bytes) +
                       " is larger than --max_bytes=" + std::to_string(options->max_bytes));
    }
    options->max_bytes = options->min_bytes;
  }
  return true;
}

}  // namespace infini::bench
