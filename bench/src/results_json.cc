#include "results_json.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "infini/common/json_quoted.h"
#include "infini/common/one_line.h"

extern char** environ;

namespace infini::bench {
namespace {

// A JSON document built in order; nccl-tests' writer has the same shape.
class JsonWriter {
 public:
  JsonWriter& Key(std::string_view name) {
    Separate();
    Quote(name);
    text_ += ':';
    after_key_ = true;
    return *this;
  }
  void String(std::string_view value) {
    Separate();
    Quote(value);
  }
  void Quote(std::string_view value) { text_ += JsonQuoted(value); }
  // nccl-tests' jsonBool writes a string.
  void Bool(bool value) { String(value ? "true" : "false"); }
  void Int(int64_t value) {
    Separate();
    text_ += std::to_string(value);
  }
  void Double(double value) {
    if (std::isnan(value)) return String("nan");
    Separate();
    char number[64];
    std::snprintf(number, sizeof(number), "%lf", value);
    text_ += number;
  }
  void Null() {
    Separate();
    text_ += "null";
  }
  void Open(char bracket) {
    Separate();
    text_ += bracket;
    first_ = true;
  }
  void Close(char bracket) {
    text_ += bracket;
    first_ = false;
  }
  std::string Take() { return std::move(text_); }

 private:
  void Separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_ && !text_.empty()) text_ += ',';
    first_ = false;
  }

  std::string text_;
  bool first_ = true;
  bool after_key_ = false;
};

void WriteTimes(JsonWriter& json, const TableRow& row) {
  json.Open('{');
  json.Key(row.cpu_time ? "cpu_time" : "time").Double(row.time_us);
  json.Key("alg_bw").Double(row.algbw_GBps);
  json.Key("bus_bw").Double(row.busbw_GBps);
  json.Key("nwrong");
  if (row.wrong < 0) {
    json.Null();
  } else {
    json.Double(static_cast<double>(row.wrong));
  }
  json.Close('}');
}

void WritePerIteration(JsonWriter& json, const TableRow& row) {
  const IterationStats& stats = row.per_iteration;
  json.Open('{');
  json.Key("skipped_iterations").Int(0);
  json.Key("min_us").Double(stats.min_us);
  json.Key("max_us").Double(stats.max_us);
  json.Key("avg_us").Double(stats.avg_us);
  json.Key("p50_us").Double(stats.p50_us);
  json.Key("p95_us").Double(stats.p95_us);
  json.Key("p99_us").Double(stats.p99_us);
  json.Key("stdev_us").Double(stats.stdev_us);
  json.Key("cv_pct").Double(stats.cv_pct);
  json.Key("times_us").Open('[');
  for (double time : row.times_us) json.Double(time);
  json.Close(']');
  json.Close('}');
}

void WriteResult(JsonWriter& json, const TableRow& row) {
  json.Open('{');
  json.Key("size").Int(row.bytes);
  json.Key("count").Int(row.count);
  json.Key("type").String(row.type);
  json.Key("redop").String(row.redop);
  char root[32];
  std::snprintf(root, sizeof(root), "%6i", row.root);
  json.Key("root").String(root);
  json.Key("out_of_place");
  if (row.in_place) {
    json.Null();
  } else {
    WriteTimes(json, row);
  }
  json.Key("in_place");
  if (row.in_place) {
    WriteTimes(json, row);
  } else {
    json.Null();
  }
  if (row.per_iteration.samples > 0) {
    json.Key(row.in_place ? "in_place_per_iter" : "out_of_place_per_iter");
    WritePerIteration(json, row);
  }
  if (row.group >= 0) json.Key("group").Int(row.group);
  if (!row.verdict.empty()) {
    json.Key("verdict").Open('{');
    json.Key("peak_percent").Double(row.peak_percent);
    json.Key("judgement").String(row.verdict);
    json.Close('}');
  }
  if (!row.versus_saved.empty()) {
    json.Key("versus_saved").Open('{');
    json.Key("saved_time").Double(row.saved_time_us);
    json.Key("change").String(row.versus_saved);
    json.Key("regressed").Bool(row.regressed);
    json.Close('}');
  }
  json.Key("actual_iterations").Int(row.launches);
  json.Key("experiment_name").String(row.name);
  json.Close('}');
}

void WriteConfig(JsonWriter& json, const JsonRun& run) {
  const BenchOptions& options = run.options;
  json.Open('{');
  // nccl-tests' threads × GPUs per thread: our thread ranks are its GPUs.
  json.Key("nthreads").Int(1);
  json.Key("ngpus").Int(run.threads_per_process);
  json.Key("minimum_bytes").Int(options.min_bytes);
  json.Key("maximum_bytes").Int(options.max_bytes);
  if (options.step_bytes > 0) {
    json.Key("step_bytes").Int(options.step_bytes);
  } else {
    json.Key("step_factor").Int(options.step_factor);
  }
  json.Key("warmup_iters").Int(options.warmup_iterations);
  json.Key("iterations").Int(options.iterations);
  json.Key("aggregated_iterations").Int(options.aggregated_launches);
  json.Key("validation").Int(options.check ? 1 : 0);
  json.Key("graph").Int(options.graph_launches);
  json.Key("blocking_collectives").Bool(options.timing == Timing::kPerIteration);
  json.Key("per_iter_timing").Bool(true);
  json.Key("per_iter_skip").Int(0);
  json.Key("parallel_init").Bool(false);
  json.Key("devices").Open('[');
  for (const JsonDevice& device : run.devices) {
    json.Open('{');
    json.Key("rank").Int(device.rank);
    json.Key("group").Int(device.group);
    json.Key("pid").Int(getpid());
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    json.Key("hostname").String(host);
    json.Key("device").Int(device.device);
    json.Key("device_hex").String("0000:00:00");  // bus ids are the backend's, not ours
    json.Key("device_info").String(device.device_info);
    json.Close('}');
  }
  json.Close(']');
  json.Close('}');
}

}  // namespace

std::string FormatNcclTestsJson(const JsonRun& run) {
  JsonWriter json;
  json.Open('{');
  json.Key("version").Int(3);
  json.Key("start_time").String(run.start_time);
  json.Key("args").Open('[');
  for (const std::string& arg : run.args) json.String(arg);
  json.Close(']');
  json.Key("env").Open('[');
  for (const std::string& variable : run.env) json.String(variable);
  json.Close(']');
  json.Key("nccl_version").Int(run.nccl_version);
  json.Key("ccl_bench").Open('{');
  json.Key("backend").String(run.backend);
  json.Key("ranks").Int(run.world_size);
  json.Key("timing").String(TimingName(run.options.timing));
  json.Key("average").String(RankAverageName(run.options.average));
  json.Close('}');
  json.Key("config");
  WriteConfig(json, run);
  json.Key("results").Open('[');
  int64_t wrong = 0;
  double bus_bandwidth_sum = 0;
  for (const TableRow& row : run.rows) {
    WriteResult(json, row);
    wrong += std::max<int64_t>(row.wrong, 0);
    bus_bandwidth_sum += row.busbw_GBps;
  }
  json.Close(']');
  json.Key("out_of_bounds").Open('{');
  json.Key("count").Int(wrong);
  json.Key("okay").Bool(wrong == 0);
  json.Close('}');
  json.Key("average_bus_bandwidth").Open('{');
  json.Key("bandwidth").Double(run.rows.empty() ? 0.0 : bus_bandwidth_sum / run.rows.size());
  json.Key("okay").String("unchecked");
  json.Close('}');
  json.Key("errors").Open('[');
  json.Close(']');
  json.Key("end_time").String(run.end_time);
  json.Close('}');
  return json.Take() + "\n";
}

int NcclVersionCode(std::string_view version_text) {
  const size_t at = version_text.find("NCCL ");
  if (at == std::string_view::npos) return 0;
  int parts[3] = {0, 0, 0};
  const char* cursor = version_text.data() + at + 5;
  const char* end = version_text.data() + version_text.size();
  for (int index = 0; index < 3; ++index) {
    const auto [next, error] = std::from_chars(cursor, end, parts[index]);
    if (error != std::errc()) return 0;
    cursor = next;
    if (index < 2) {
      if (cursor == end || *cursor != '.') return 0;
      ++cursor;
    }
  }
  return parts[0] * 10000 + parts[1] * 100 + parts[2];
}

std::string NowAsNcclTestsTime() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[64];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

std::vector<std::string> RunEnvironment() {
  std::vector<std::string> kept;
  for (char** variable = environ; *variable != nullptr; ++variable) {
    const std::string_view text = *variable;
    const std::string_view name = text.substr(0, text.find('='));
    bool secret = false;
    for (std::string_view word : {"TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL"}) {
      secret = secret || name.find(word) != std::string_view::npos;
    }
    if (secret) continue;  // a run token must not travel with a results file
    for (std::string_view prefix :
         {"NCCL_", "INFINI_", "CUDA_VISIBLE_DEVICES=", "OMP_NUM_THREADS=", "GLOO_"}) {
      if (text.rfind(prefix, 0) == 0) {
        kept.emplace_back(text);
        break;
      }
    }
  }
  return kept;
}

std::string WriteNewFile(const std::string& path, const std::string& text) {
  std::string candidate = path;
  int fd = -1;
  for (int attempt = 0; (fd = open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644)) < 0;
       ++attempt) {
    if (errno != EEXIST || attempt > 1000) {
      throw UsageError("-J/--json='" + OneLine(path) + "': cannot create " + candidate + " (" +
                       std::strerror(errno) + ")");
    }
    candidate = path + "." + std::to_string(attempt);
  }
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t got = write(fd, text.data() + written, text.size() - written);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      close(fd);
      throw UsageError("-J/--json: cannot write " + candidate + " (" + std::strerror(errno) + ")");
    }
    written += static_cast<size_t>(got);
  }
  close(fd);
  return candidate;
}

}  // namespace infini::bench
