// libFuzzer harness: the run record as another launcher may have written it
// (launch/src/run_record_codec.cc) and the transitions applied to it
// (run_record.cc). The first byte picks the mode the transitions run in,
// the rest is the record's text. Decoding ends in a record or one
// RunRecordError line; a decoded record encodes to itself; every transition
// on it returns or refuses with RunRecordError: never a crash, a hang or
// another exception.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "infini/launch/run_record.h"

namespace {

using infini::launch::RunMember;
using infini::launch::RunRecord;
using infini::launch::RunRecordError;
using infini::launch::RunRules;
using infini::launch::WallTime;
namespace decisions = infini::launch::decisions;
namespace record = infini::launch::record;

// Every supported mode (elastic with shrink is refused before any decision).
RunRules RulesFor(uint8_t byte) {
  RunRules rules;
  rules.mode.on_failure =
      (byte & 1) ? decisions::OnFailure::kShrink : decisions::OnFailure::kRestart;
  rules.mode.membership =
      (byte & 2) && !(byte & 1) ? decisions::Membership::kElastic : decisions::Membership::kFixed;
  rules.mode.meeting = (byte & 4) ? decisions::Meeting::kEtcd : decisions::Meeting::kTcp;
  rules.min_nodes = 1 + (byte >> 3) % 3;
  rules.max_nodes = rules.mode.membership == decisions::Membership::kElastic ? rules.min_nodes + 2
                                                                             : rules.min_nodes;
  rules.max_restarts = 1;
  return rules;
}

template <typename Step>
void Apply(const Step& step) {
  try {
    step();
  } catch (const RunRecordError&) {
    // a refusal in one line: allowed
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const RunRules rules = RulesFor(data[0]);
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  RunRecord decoded;
  try {
    decoded = infini::launch::DecodeRunRecord(text);
  } catch (const RunRecordError&) {
    return 0;
  }
  if (!(infini::launch::DecodeRunRecord(infini::launch::EncodeRunRecord(decoded)) == decoded)) {
    std::abort();  // the codec lost something
  }
  const WallTime now{std::chrono::milliseconds(1'700'000'000'000)};
  RunMember arrival;
  arrival.owner = "fuzz:1";
  arrival.requested_slot = static_cast<int>(data[0] % 4) - 1;
  const std::string member = decoded.members.empty() ? "none" : decoded.members.front().owner;
  Apply([&] { record::Join(decoded, rules, arrival, now); });
  Apply([&] { record::CloseRound(decoded, rules, now); });
  Apply([&] { record::Ready(decoded, rules, member); });
  Apply([&] { record::NodeLost(decoded, rules, member, data[0] & 8, "lost", now); });
  Apply([&] { record::Restart(decoded, rules, decoded.attempt, data[0] & 16); });
  Apply([&] { record::Finish(decoded, rules, member); });
  Apply([&] { record::Fail(decoded, rules, 1, 143, "signalled"); });
  Apply([&] { record::Settle(decoded, rules); });
  Apply([&] { record::Leave(decoded, member); });
  return 0;
}
