#include "verdict.h"

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "infini/common/one_line.h"

namespace infini::bench {

const std::vector<LinkProfile>& LinkProfiles() {
  // Sources: docs/performance.md, "A verdict per line".
  static const auto* profiles = new std::vector<LinkProfile>{
      {"h200_nvlink",
       "H200 NVLink 4 (18 links x 25 GB/s = 450 GB/s per direction); NCCL all_reduce on 8 GPUs "
       "(NVLS) ~480 GB/s busbw, other collectives ~370 GB/s (NVIDIA, nccl-tests#212)",
       450, 480, 8, 370, int64_t{256} << 20},
      {"pcie5_x16",
       "PCIe gen5 x16 (32 GT/s x 16 lanes, 128b/130b = 63 GB/s per direction); ~40 GB/s "
       "busbw for all_reduce on 8 GPUs without NVLink",
       63, 40, 0, 40, int64_t{256} << 20},
      {"loopback_tcp",
       "loopback TCP (gloo, ranks on one host): no line rate; the 'peak' is the best busbw "
       "measured on the 2-core development VM (1.1 GB/s), all_reduce there 0.6 GB/s",
       1.1, 0.6, 0, 0.6, int64_t{8} << 20},
  };
  return *profiles;
}

namespace {

const LinkProfile* FindProfile(std::string_view name) {
  for (const LinkProfile& profile : LinkProfiles()) {
    if (profile.name == name) return &profile;
  }
  return nullptr;
}

// "h200_nvlink" for "NVLink 4 x 18", "pcie5_x16" for "PCIe gen4 x16": the
// table's profile of the same kind of link, or nullptr.
const LinkProfile* ProfileOfKind(std::string_view kind) {
  if (kind.rfind("NVLink", 0) == 0) return FindProfile("h200_nvlink");
  if (kind.rfind("PCIe", 0) == 0) return FindProfile("pcie5_x16");
  return nullptr;
}

std::string GBps(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.0f GB/s", value);
  return text;
}

}  // namespace

std::optional<LinkProfile> ChooseLink(std::string_view link, DLDeviceType device_type,
                                      std::string_view device_vendor, std::string_view backend_name,
                                      int nnodes, bool nvls_off,
                                      const std::optional<ccl::LinkBandwidth>& reported) {
  if (link == "none") return std::nullopt;
  std::string_view chosen = link;
  if (link == "auto") {
    if (nnodes != 1) return std::nullopt;  // the link between nodes is not in the table
    if (device_type == kDLCPU) {
      // loopback_tcp's figures are gloo's: a host backend over shared memory
      // (oneCCL's) is many times faster, another one may be slower.
      chosen = backend_name == "gloo" ? "loopback_tcp" : "";
    } else if (device_vendor == "NVIDIA") {
      chosen = "h200_nvlink";
    } else {
      chosen = "";
    }
  }
  std::optional<LinkProfile> profile;
  if (const LinkProfile* known = FindProfile(chosen)) profile = *known;
  if (link == "auto" && reported && reported->peak_GBps > 0) {
    const LinkProfile* kind = ProfileOfKind(reported->kind);
    const LinkProfile* base = kind != nullptr ? kind : (profile ? &*profile : nullptr);
    if (base != nullptr) {
      const double scale = reported->peak_GBps / base->peak_GBps;
      LinkProfile from_plugin = *base;
      from_plugin.name = "reported";
      from_plugin.peak_GBps = reported->peak_GBps;
      from_plugin.all_reduce_GBps = base->all_reduce_GBps * scale;
      from_plugin.other_GBps = base->other_GBps * scale;
      from_plugin.what = OneLine(reported->kind) + " = " + GBps(reported->peak_GBps) +
                         " per direction, reported by the plugin; what NCCL reaches scaled from " +
                         base->name + " (" + base->what + ")";
      profile = from_plugin;
    }
  } else if (link == "auto" && profile) {
    profile->what += reported ? "; from the table: the plugin could not tell the link (" +
                                    OneLine(reported->kind) + ")"
                              : "; from the table: the plugin reports no link bandwidth";
  }
  if (!profile) {
    if (link == "auto") return std::nullopt;
    std::string names = "auto, none";
    for (const LinkProfile& known : LinkProfiles()) names += ", " + known.name;
    throw UsageError("--link='" + OneLine(link) + "': expected " + names);
  }
  if (nvls_off && profile->all_reduce_ranks > 0) {
    profile->all_reduce_GBps = profile->other_GBps;
    profile->what += "; NCCL_NVLS_ENABLE=0: all_reduce judged as the others";
  }
  return profile;
}

std::string AutoHasNoVerdict(std::string_view link, DLDeviceType device_type,
                             std::string_view backend_name, int nnodes) {
  if (link != "auto") return "";
  if (nnodes != 1) return "no verdict: the link between nodes is not in the table";
  if (device_type == kDLCPU && backend_name != "gloo") {
    return "no verdict: the table's host figure (loopback_tcp) is gloo's, and backend '" +
           OneLine(backend_name) + "' reports no link it can be judged against; --link=NAME " +
           "names a profile";
  }
  return "no verdict: no profile in the table for this device";
}

void JudgeRow(const LinkProfile& link, Collective collective, int ranks, TableRow* row) {
  if (ranks < 2) {  // no link crossed (all_reduce's bus factor is 0 there)
    row->peak_percent = 0;
    row->verdict = "n/a";
    return;
  }
  row->peak_percent = row->busbw_GBps / link.peak_GBps * 100;
  if (row->bytes < link.min_bytes) {
    row->verdict = "latency";  // bandwidth is not what this size measures
    return;
  }
  const bool reference_all_reduce = collective == Collective::kAllReduce &&
                                    (link.all_reduce_ranks == 0 || link.all_reduce_ranks == ranks);
  const double reached = reference_all_reduce ? link.all_reduce_GBps : link.other_GBps;
  row->verdict = row->busbw_GBps >= kHealthyShare * reached ? "healthy" : "LOW";
}

Expectations Expectations::Load(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw UsageError("--expect='" + OneLine(path) + "': cannot read the file");
  std::ostringstream text;
  text << file.rdbuf();
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& error) {
    throw UsageError("--expect='" + OneLine(path) + "': not JSON (" + OneLine(error.what()) + ")");
  }
  const auto results = document.is_object() ? document.find("results") : document.end();
  if (results == document.end() || !results->is_array() || results->empty()) {
    throw UsageError("--expect='" + OneLine(path) +
                     "': expected a -J file of ccl_bench or nccl-tests (no results in it)");
  }
  // A member of a result: its text, its number, or none.
  const auto text_of = [](const nlohmann::json& result, const char* key) {
    const auto found = result.find(key);
    return found != result.end() && found->is_string() ? found->get<std::string>() : std::string();
  };
  const auto number_of = [](const nlohmann::json& object,
                            const char* key) -> std::optional<double> {
    const auto found = object.find(key);
    if (found == object.end() || !found->is_number()) return std::nullopt;
    return found->get<double>();
  };
  Expectations expectations;
  for (const nlohmann::json& result : *results) {
    if (!result.is_object() || text_of(result, "experiment_name").empty()) {
      expectations.by_name_ = false;
    }
  }
  for (const nlohmann::json& result : *results) {
    if (!result.is_object()) continue;
    for (const char* placement : {"out_of_place", "in_place"}) {
      const auto times = result.find(placement);
      if (times == result.end() || !times->is_object()) continue;
      const std::optional<double> time =
          number_of(*times, times->contains("time") ? "time" : "cpu_time");
      if (!time) continue;
      TableRow row;
      row.bytes = std::llround(number_of(result, "size").value_or(0));
      row.type = text_of(result, "type");
      row.redop = text_of(result, "redop");
      row.in_place = std::string_view(placement) == "in_place";
      row.name = text_of(result, "experiment_name");
      row.group = static_cast<int>(std::llround(number_of(result, "group").value_or(-1)));
      expectations.time_us_[expectations.KeyOf(row)] = *time;
    }
  }
  return expectations;
}

std::string Expectations::KeyOf(const TableRow& row) const {
  if (by_name_) return row.name + "|" + std::to_string(row.group);
  // nccl-tests' type names that are not ccl's.
  static const std::map<std::string, std::string> kCclNames = {
      {"float", "float32"}, {"half", "float16"}, {"double", "float64"},
      {"int", "int32"},     {"char", "int8"},    {"bf16", "bfloat16"}};
  const auto renamed = kCclNames.find(row.type);
  const std::string& type = renamed == kCclNames.end() ? row.type : renamed->second;
  return std::to_string(row.bytes) + "|" + type + "|" + row.redop + "|" +
         (row.in_place ? "in" : "out");
}

void Expectations::Compare(double tolerance_percent, TableRow* row) const {
  const auto found = time_us_.find(KeyOf(*row));
  if (found == time_us_.end() || found->second <= 0) {
    row->versus_saved = "new";
    return;
  }
  row->saved_time_us = found->second;
  // Positive: slower than the saved run.
  const double change = (row->time_us / found->second - 1) * 100;
  row->regressed = change > tolerance_percent;
  char text[32];
  std::snprintf(text, sizeof(text), "%+.0f%%%s", change, row->regressed ? "!" : "");
  row->versus_saved = text;
}

}  // namespace infini::bench
