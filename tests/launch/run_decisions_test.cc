// The launcher's decision table (launch/src/run_decisions.cc) without
// sockets or processes: one case per mode x event, each asserting the
// action the user relies on, written here independently of the table; the
// table has exactly one row for every supported combination and a refused
// mode is never decided; the state machine's transitions.
#include "infini/launch/run_decisions.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <tuple>

#include "infini/launch/options.h"

namespace infini::launch::decisions {
namespace {

std::string ModeText(const Mode& mode) {
  return std::string(mode.membership == Membership::kElastic ? "Elastic" : "Fixed") +
         (mode.on_failure == OnFailure::kShrink ? "Shrink" : "Restart") +
         (mode.meeting == Meeting::kEtcd ? "Etcd" : "Tcp");
}

// What infini_run does, as docs/launcher.md promises it, per mode and event.
Decision Expected(const Mode& mode, Event event, bool restarts_left) {
  const bool elastic = mode.membership == Membership::kElastic;
  const bool shrink = mode.on_failure == OnFailure::kShrink;
  const bool etcd = mode.meeting == Meeting::kEtcd;
  const Decision go_on{Action::kGoOn, Status::kNone, false};
  const Decision wait{Action::kWait, Status::kNone, false};
  const Decision new_round{Action::kNewRound, Status::kNone, false};
  const Decision shrink_in_place{Action::kShrinkInPlace, Status::kNone, false};
  const auto stop = [](Status status) { return Decision{Action::kStop, status, false}; };
  const auto restart_or_stop = [&](Status spent) {
    return restarts_left ? Decision{Action::kRestartAll, Status::kNone, true} : stop(spent);
  };
  // A lost node: elastic meets again, shrink goes on, a fixed world stops.
  const Decision node_lost = elastic  ? new_round
                             : shrink ? shrink_in_place
                                      : stop(Status::kLauncher);
  switch (event) {
    case Event::kNodeArrived:
      return elastic ? new_round : go_on;
    case Event::kRoundClosed:
      return go_on;
    case Event::kOwnKeepAliveMissed:
      return stop(Status::kLauncher);
    case Event::kNodeLostWhileJoining:
      return elastic ? new_round : stop(Status::kLauncher);
    case Event::kNodeLost:
      return node_lost;
    case Event::kConnectionClosed:
      return etcd ? go_on : node_lost;
    case Event::kRankFailed:
      return elastic ? wait : shrink ? shrink_in_place : restart_or_stop(Status::kRankExit);
    case Event::kRankFailedAlone:
      return shrink ? stop(Status::kRankExit) : restart_or_stop(Status::kRankExit);
    case Event::kPeerFailed:
      return stop(Status::kPeerExit);
    case Event::kRestartRequested:
      return restart_or_stop(Status::kPeerExit);
    case Event::kStoreLost:
      return stop(Status::kLauncher);
    case Event::kRanksSucceeded:
      return wait;
    case Event::kEveryNodeSucceeded:
      return stop(Status::kSuccess);
    case Event::kNodeLostOthersDone:
      return elastic ? stop(Status::kSuccess) : shrink ? shrink_in_place : stop(Status::kLauncher);
    case Event::kSignalled:
      return stop(Status::kSignal);
  }
  return {};
}

class DecisionTest : public ::testing::TestWithParam<std::tuple<Mode, Event>> {};

TEST_P(DecisionTest, DecidesWhatTheDocsPromise) {
  const auto& [mode, event] = GetParam();
  for (bool restarts_left : {true, false}) {
    const Decision expected = Expected(mode, event, restarts_left);
    const Decision decided = Decide(mode, event, restarts_left);
    EXPECT_EQ(ActionName(decided.action), std::string(ActionName(expected.action)))
        << "restarts left: " << restarts_left;
    EXPECT_EQ(StatusName(decided.status), std::string(StatusName(expected.status)));
    EXPECT_EQ(decided.counts_as_restart, expected.counts_as_restart);
  }
}

std::vector<std::tuple<Mode, Event>> SupportedCombinations() {
  std::vector<std::tuple<Mode, Event>> combinations;
  for (const Mode& mode : AllModes()) {
    if (RefusedMode(mode)) continue;
    for (Event event : AllEvents()) combinations.emplace_back(mode, event);
  }
  return combinations;
}

INSTANTIATE_TEST_SUITE_P(EveryModeAndEvent, DecisionTest,
                         ::testing::ValuesIn(SupportedCombinations()),
                         [](const ::testing::TestParamInfo<std::tuple<Mode, Event>>& param_info) {
                           std::string event = EventName(std::get<1>(param_info.param));
                           for (char& c : event) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return ModeText(std::get<0>(param_info.param)) + "_" +
                                  std::to_string(param_info.index) + "_" + event;
                         });

TEST(DecisionTable, HasExactlyOneRowForEverySupportedCombinationAndNoDecisionForARefusedMode) {
  ASSERT_EQ(AllModes().size(), 8u);  // {N, MIN:MAX} x {restart, shrink} x {TCP, etcd}
  std::set<Event> events_in_rows;
  for (const Mode& mode : AllModes()) {
    for (Event event : AllEvents()) {
      int matching = 0;
      for (const Row& row : Table()) {
        events_in_rows.insert(row.event);
        if (row.event == event && (!row.membership || *row.membership == mode.membership) &&
            (!row.on_failure || *row.on_failure == mode.on_failure) &&
            (!row.meeting || *row.meeting == mode.meeting)) {
          ++matching;
        }
      }
      if (RefusedMode(mode)) {
        // Refused at the start: never decided, whatever rows of "any" say.
        EXPECT_THROW(Decide(mode, event, true), std::logic_error) << ModeText(mode);
        continue;
      }
      EXPECT_EQ(matching, 1) << ModeText(mode) << " / " << EventName(event);
    }
  }
  EXPECT_EQ(events_in_rows.size(), AllEvents().size());
}

TEST(DecisionTable, RefusesOnlyElasticWithShrinkNamingBothFlags) {
  for (const Mode& mode : AllModes()) {
    const bool elastic_shrink =
        mode.membership == Membership::kElastic && mode.on_failure == OnFailure::kShrink;
    ASSERT_EQ(RefusedMode(mode).has_value(), elastic_shrink) << ModeText(mode);
    if (elastic_shrink) {
      EXPECT_NE(RefusedMode(mode)->find("--on_failure=shrink"), std::string::npos);
      EXPECT_NE(RefusedMode(mode)->find("--nnodes=MIN:MAX"), std::string::npos);
      EXPECT_THROW(Decide(mode, Event::kNodeLost, true), std::logic_error);
    }
  }
}

TEST(DecisionTable, ModeOfReadsTheOptions) {
  LaunchOptions options;
  options.nnodes = 4;
  options.min_nnodes = 2;
  options.rendezvous_on_etcd = true;
  EXPECT_EQ(ModeOf(options), (Mode{Membership::kElastic, OnFailure::kRestart, Meeting::kEtcd}));
  options.min_nnodes = 4;
  options.shrink_on_failure = true;
  options.rendezvous_on_etcd = false;
  EXPECT_EQ(ModeOf(options), (Mode{Membership::kFixed, OnFailure::kShrink, Meeting::kTcp}));
}

TEST(DecisionTable, TheLauncherPageHoldsTheTableAsTheCodePrintsIt) {
  std::ifstream page(LAUNCHER_DOC_PATH);
  ASSERT_TRUE(page) << LAUNCHER_DOC_PATH;
  const std::string text((std::istreambuf_iterator<char>(page)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find(TableAsMarkdown()), std::string::npos)
      << "docs/launcher.md, \"Run states and decisions\", should hold:\n"
      << TableAsMarkdown();
}

TEST(DecisionTable, PrintsOneMarkdownLinePerRow) {
  const std::string text = TableAsMarkdown();
  size_t lines = 0;
  for (char c : text) lines += c == '\n';
  EXPECT_EQ(lines, Table().size() + 2);
}

TEST(RunStates, FollowTorchrunsWorkerStates) {
  const Mode fixed{Membership::kFixed, OnFailure::kRestart, Meeting::kTcp};
  const Mode elastic{Membership::kElastic, OnFailure::kRestart, Meeting::kTcp};
  const auto next = [](RunState state, const Mode& mode, Event event, int status = 1) {
    return NextState(state, event, Decide(mode, event, true), status);
  };
  EXPECT_EQ(next(RunState::kInitial, fixed, Event::kRoundClosed), RunState::kHealthy);
  EXPECT_EQ(next(RunState::kHealthy, fixed, Event::kRankFailed), RunState::kStopped);
  EXPECT_EQ(next(RunState::kStopped, fixed, Event::kRoundClosed), RunState::kHealthy);
  EXPECT_EQ(next(RunState::kHealthy, elastic, Event::kRankFailed), RunState::kUnhealthy);
  EXPECT_EQ(next(RunState::kUnhealthy, elastic, Event::kNodeLost), RunState::kStopped);
  EXPECT_EQ(next(RunState::kHealthy, fixed, Event::kRanksSucceeded), RunState::kHealthy);
  EXPECT_EQ(next(RunState::kHealthy, fixed, Event::kEveryNodeSucceeded, 0), RunState::kSucceeded);
  EXPECT_EQ(next(RunState::kHealthy, fixed, Event::kPeerFailed, 3), RunState::kFailed);
  EXPECT_EQ(next(RunState::kHealthy, fixed, Event::kSignalled, 130), RunState::kFailed);
  const Mode shrink{Membership::kFixed, OnFailure::kShrink, Meeting::kTcp};
  EXPECT_EQ(next(RunState::kHealthy, shrink, Event::kNodeLost), RunState::kHealthy);
  // Final states stay.
  EXPECT_EQ(next(RunState::kSucceeded, fixed, Event::kRoundClosed), RunState::kSucceeded);
  EXPECT_EQ(next(RunState::kFailed, fixed, Event::kRoundClosed), RunState::kFailed);
}

}  // namespace
}  // namespace infini::launch::decisions
