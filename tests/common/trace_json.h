// For the tests of the communication trace (docs/tracing.md): trace.json
// read by nlohmann/json (proving it is JSON) into a tree that is easy to
// walk in assertions (a missing member reads as null).
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace infini::testing {

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  double number = 0;
  std::string text;
  std::vector<Json> items;
  std::map<std::string, Json> members;
  const Json& operator[](const std::string& name) const {
    static const Json kMissing;
    const auto found = members.find(name);
    return found == members.end() ? kMissing : found->second;
  }
};

// `value` (parsed by nlohmann/json) in the shape these tests walk.
inline Json FromParsed(const nlohmann::json& value) {
  Json out;
  if (value.is_object()) {
    out.kind = Json::kObject;
    for (const auto& [name, member] : value.items()) out.members[name] = FromParsed(member);
  } else if (value.is_array()) {
    out.kind = Json::kArray;
    for (const nlohmann::json& item : value) out.items.push_back(FromParsed(item));
  } else if (value.is_string()) {
    out.kind = Json::kString;
    out.text = value.get<std::string>();
  } else if (value.is_boolean()) {
    out.kind = Json::kBool;
    out.number = value.get<bool>() ? 1 : 0;
  } else if (value.is_number()) {
    out.kind = Json::kNumber;
    out.number = value.get<double>();
  }
  return out;
}

// The file as one JSON value; a test failure naming the file when it is not.
inline Json ReadJsonFile(const std::string& path) {
  std::ifstream file(path);
  const nlohmann::json parsed = nlohmann::json::parse(file, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(parsed.is_discarded()) << path << ": not JSON";
  return parsed.is_discarded() ? Json() : FromParsed(parsed);
}

// A span of trace.json, in µs from the first event.
struct TraceSpan {
  double begin_us = 0, end_us = 0;
  const Json* event = nullptr;
};

// Every "X" event of category `category`, by lane (tid), in file order.
inline std::map<int, std::vector<TraceSpan>> SpansOf(const Json& trace,
                                                     const std::string& category) {
  std::map<int, std::vector<TraceSpan>> spans;
  for (const Json& event : trace["traceEvents"].items) {
    if (event["ph"].text != "X" || event["cat"].text != category) continue;
    spans[static_cast<int>(event["tid"].number)].push_back(
        {event["ts"].number, event["ts"].number + event["dur"].number, &event});
  }
  return spans;
}

// The "ccl" span of `lane` with the same group and seq as `span`, or nullptr.
inline const TraceSpan* HostSpanOf(const std::map<int, std::vector<TraceSpan>>& host, int lane,
                                   const TraceSpan& span) {
  const auto found = host.find(lane);
  if (found == host.end()) return nullptr;
  for (const TraceSpan& candidate : found->second) {
    if ((*candidate.event)["args"]["seq"].number == (*span.event)["args"]["seq"].number &&
        (*candidate.event)["args"]["group"].text == (*span.event)["args"]["group"].text) {
      return &candidate;
    }
  }
  return nullptr;
}

// Each device span (lane device_lane_base + R) has rank R's host span of the
// same call, starts no earlier than that call began (less `slack_us`: the
// anchor's launch latency) and lasts more than nothing; with
// `ends_inside`, it also ends by the call's end (a host backend's call runs
// inline). Returns how many device spans rank `rank` has.
inline size_t ExpectDeviceSpansInsideTheirCalls(const Json& trace, int rank, int device_lane_base,
                                                double slack_us, bool ends_inside) {
  const auto host = SpansOf(trace, "ccl");
  const auto device = SpansOf(trace, "device");
  const auto lane = device.find(device_lane_base + rank);
  if (lane == device.end()) return 0;
  for (const TraceSpan& span : lane->second) {
    const TraceSpan* call = HostSpanOf(host, rank, span);
    EXPECT_NE(call, nullptr) << "a device span of rank " << rank << " with no call, seq "
                             << (*span.event)["args"]["seq"].number;
    if (call == nullptr) continue;
    EXPECT_EQ((*span.event)["name"].text, (*call->event)["name"].text);
    EXPECT_GE(span.begin_us, call->begin_us - slack_us)
        << "seq " << (*span.event)["args"]["seq"].number;
    EXPECT_GT(span.end_us, span.begin_us) << "seq " << (*span.event)["args"]["seq"].number;
    if (ends_inside) {
      EXPECT_LE(span.end_us, call->end_us + slack_us);
    }
  }
  return lane->second.size();
}

// The watchdog's and the recovery's events named `name` ("shrink", "timeout"),
// points and spans alike, by lane (tid), in file order.
inline std::map<int, std::vector<const Json*>> FaultEventsOf(const Json& trace,
                                                             const std::string& name) {
  std::map<int, std::vector<const Json*>> events;
  for (const Json& event : trace["traceEvents"].items) {
    const std::string& category = event["cat"].text;
    if ((category != "watchdog" && category != "recovery") || event["name"].text != name) continue;
    events[static_cast<int>(event["tid"].number)].push_back(&event);
  }
  return events;
}

// "lane 2: shrink recovery ..., " for a failure message: every such event.
inline std::string DescribeFaultEvents(const Json& trace) {
  std::string text;
  for (const Json& event : trace["traceEvents"].items) {
    const std::string& category = event["cat"].text;
    if (category != "watchdog" && category != "recovery") continue;
    text += "lane " + std::to_string(static_cast<int>(event["tid"].number)) + ": " + category +
            "/" + event["name"].text + " (" + event["ph"].text + ") args:";
    for (const auto& [key, value] : event["args"].members) {
      text += " " + key + "=" +
              (value.kind == Json::kString  ? value.text
               : value.kind == Json::kArray ? "[" + std::to_string(value.items.size()) + " items]"
                                            : std::to_string(value.number));
    }
    text += "\n";
  }
  return text;
}

}  // namespace infini::testing
