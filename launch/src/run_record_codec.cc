// The run record as JSON: what the meeting point holds. Decoding trusts
// nothing: a record is written by other launchers (of another version, or
// broken), so every field is checked for presence and type, and the first
// that is wrong is named in one line.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "infini/launch/run_record.h"

namespace infini::launch {
namespace {

using Json = nlohmann::json;

int64_t Millis(WallTime time) { return time.time_since_epoch().count(); }

Json EncodeMember(const RunMember& member) {
  return {{"owner", member.owner},
          {"host", member.host},
          {"slot", member.slot},
          {"hosts_store", member.hosts_store},
          {"requested_slot", member.requested_slot},
          {"ready", member.ready},
          {"done", member.done},
          {"left", member.left}};
}

[[noreturn]] void Refuse(const std::string& where, const char* expected) {
  throw RunRecordError("run record: '" + where + "': expected " + expected);
}

const Json& Field(const Json& object, const std::string& where, const char* name) {
  const auto found = object.find(name);
  if (found == object.end()) Refuse(where + name, "a field (it is missing)");
  return *found;
}

int64_t Integer(const Json& object, const std::string& where, const char* name, int64_t least) {
  const Json& value = Field(object, where, name);
  if (!value.is_number_integer()) Refuse(where + name, "an integer");
  const int64_t number = value.get<int64_t>();
  if (number < least || number > INT32_MAX) {
    Refuse(where + name, least < 0 ? "an integer from -1" : "a non-negative integer");
  }
  return number;
}

// A version, or a time as milliseconds since the epoch.
int64_t Count(const Json& object, const std::string& where, const char* name) {
  const Json& value = Field(object, where, name);
  if (!value.is_number_integer() || value.get<int64_t>() < 0) {
    Refuse(where + name, "a non-negative 64-bit integer");
  }
  return value.get<int64_t>();
}

bool Boolean(const Json& object, const std::string& where, const char* name) {
  const Json& value = Field(object, where, name);
  if (!value.is_boolean()) Refuse(where + name, "true or false");
  return value.get<bool>();
}

std::string Text(const Json& object, const std::string& where, const char* name) {
  const Json& value = Field(object, where, name);
  if (!value.is_string()) Refuse(where + name, "a string");
  return value.get<std::string>();
}

const Json& Array(const Json& object, const char* name) {
  const Json& value = Field(object, "", name);
  if (!value.is_array()) Refuse(name, "an array");
  return value;
}

// "members[2]." for the fields of an array's element.
std::string Element(const char* array, size_t index, const Json& element) {
  const std::string where = std::string(array) + "[" + std::to_string(index) + "]";
  if (!element.is_object()) Refuse(where, "an object");
  return where + ".";
}

std::vector<RunMember> DecodeMembers(const Json& object, const char* name) {
  std::vector<RunMember> members;
  const Json& array = Array(object, name);
  for (size_t i = 0; i < array.size(); ++i) {
    const std::string where = Element(name, i, array[i]);
    RunMember member;
    member.owner = Text(array[i], where, "owner");
    member.host = Text(array[i], where, "host");
    member.slot = static_cast<int>(Integer(array[i], where, "slot", -1));
    member.hosts_store = Boolean(array[i], where, "hosts_store");
    member.requested_slot = static_cast<int>(Integer(array[i], where, "requested_slot", -1));
    member.ready = Boolean(array[i], where, "ready");
    member.done = Boolean(array[i], where, "done");
    member.left = Boolean(array[i], where, "left");
    members.push_back(std::move(member));
  }
  return members;
}

RunOutcome DecodeOutcome(const std::string& text) {
  for (RunOutcome outcome : {RunOutcome::kRunning, RunOutcome::kSucceeded, RunOutcome::kFailed}) {
    if (text == OutcomeName(outcome)) return outcome;
  }
  Refuse("outcome", "running, succeeded or failed");
}

}  // namespace

std::string EncodeRunRecord(const RunRecord& record) {
  Json members = Json::array();
  for (const RunMember& member : record.members) members.push_back(EncodeMember(member));
  Json waiting = Json::array();
  for (const RunMember& member : record.waiting) waiting.push_back(EncodeMember(member));
  Json lost = Json::array();
  for (const LostSlot& slot : record.lost)
    lost.push_back({{"slot", slot.slot}, {"owner", slot.owner}});
  Json replaced = Json::array();
  for (const ReplacedSlot& slot : record.replaced) {
    replaced.push_back(
        {{"slot", slot.slot}, {"lost_owner", slot.lost_owner}, {"owner", slot.owner}});
  }
  const Json json = {{"version", record.version},
                     {"round", record.round},
                     {"round_closed", record.round_closed},
                     {"members", members},
                     {"waiting", waiting},
                     {"reopened_for", record.reopened_for},
                     {"reopen_reason", record.reopen_reason},
                     {"attempt", record.attempt},
                     {"failure_restarts", record.failure_restarts},
                     {"attempt_started", record.attempt_started},
                     {"lost", lost},
                     {"replaced", replaced},
                     {"outcome", OutcomeName(record.outcome)},
                     {"exit_status", record.exit_status},
                     {"failed_node", record.failed_node},
                     {"message", record.message},
                     {"join_deadline_ms", Millis(record.join_deadline)},
                     {"last_call_deadline_ms", Millis(record.last_call_deadline)}};
  // A message or host name that is not UTF-8 is written with U+FFFD where
  // its bad bytes were, not refused.
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

RunRecord DecodeRunRecord(const std::string& text) {
  const Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    throw RunRecordError("run record: expected a JSON object, got " + std::to_string(text.size()) +
                         " bytes that are not one");
  }
  RunRecord record;
  const std::string top;
  record.version = Count(json, top, "version");
  record.round = static_cast<int>(Integer(json, top, "round", 0));
  record.round_closed = Boolean(json, top, "round_closed");
  record.members = DecodeMembers(json, "members");
  record.waiting = DecodeMembers(json, "waiting");
  record.reopened_for = static_cast<int>(Integer(json, top, "reopened_for", -1));
  record.reopen_reason = Text(json, top, "reopen_reason");
  record.attempt = static_cast<int>(Integer(json, top, "attempt", 0));
  record.failure_restarts = static_cast<int>(Integer(json, top, "failure_restarts", 0));
  record.attempt_started = Boolean(json, top, "attempt_started");
  const Json& lost = Array(json, "lost");
  for (size_t i = 0; i < lost.size(); ++i) {
    const std::string where = Element("lost", i, lost[i]);
    record.lost.push_back(
        {static_cast<int>(Integer(lost[i], where, "slot", 0)), Text(lost[i], where, "owner")});
  }
  const Json& replaced = Array(json, "replaced");
  for (size_t i = 0; i < replaced.size(); ++i) {
    const std::string where = Element("replaced", i, replaced[i]);
    record.replaced.push_back({static_cast<int>(Integer(replaced[i], where, "slot", 0)),
                               Text(replaced[i], where, "lost_owner"),
                               Text(replaced[i], where, "owner")});
  }
  record.outcome = DecodeOutcome(Text(json, top, "outcome"));
  record.exit_status = static_cast<int>(Integer(json, top, "exit_status", 0));
  record.failed_node = static_cast<int>(Integer(json, top, "failed_node", -1));
  record.message = Text(json, top, "message");
  record.join_deadline = WallTime(std::chrono::milliseconds(Count(json, top, "join_deadline_ms")));
  record.last_call_deadline =
      WallTime(std::chrono::milliseconds(Count(json, top, "last_call_deadline_ms")));
  return record;
}

}  // namespace infini::launch
