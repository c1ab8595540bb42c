// What a process that cannot reach its run's store says, without waiting for
// a real deadline: the reporter's schedule and line, the connect deadline
// and how it is named. The whole wait of a real rank is in launch_test.cc.
#include "infini/parallel/store_access.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "common/unused_port.h"
#include "infini/rendezvous/store.h"

namespace infini::parallel {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

RuntimeSettings LauncherStoreSettings() {
  RuntimeSettings settings;
  settings.store.kind = StoreLocation::Kind::kLauncher;
  settings.store.host = "127.0.0.1";
  settings.timeout = seconds(600);
  return settings;
}

// The line for a wait 5 s into a deadline of `connect_timeout`.
std::string LineAfterFiveSeconds(const RuntimeSettings& settings, milliseconds connect_timeout) {
  rendezvous::ConnectWait wait;
  wait.endpoint = "10.0.0.1:29500";
  wait.since = std::chrono::system_clock::now();
  wait.waited = seconds(5);
  wait.left = connect_timeout - seconds(5);
  wait.last_failure = "Connection refused";
  ::testing::internal::CaptureStderr();
  StoreWaitReporter(settings, "[rank 1] ").report(wait);
  return ::testing::internal::GetCapturedStderr();
}

// By default a rank says it waits after 5 s, then every 30 s, and names the
// deadline as INFINI_CCL_TIMEOUT_S plus the store's margin.
TEST(StoreAccessTest, ByDefaultTheFirstNoteIsAfterFiveSecondsThenEveryThirty) {
  const RuntimeSettings settings = LauncherStoreSettings();
  const rendezvous::ConnectProgress progress = StoreWaitReporter(settings, "");
  EXPECT_EQ(progress.first, seconds(5));
  EXPECT_EQ(progress.every, seconds(30));
  const milliseconds store_timeout = settings.timeout + kStoreTimeoutMargin;
  EXPECT_EQ(StoreConnectTimeout(settings, store_timeout), seconds(630));
  EXPECT_THAT(LineAfterFiveSeconds(settings, StoreConnectTimeout(settings, store_timeout)),
              AllOf(StartsWith("[rank 1] waiting for the run's store at 10.0.0.1:29500 "
                               "(INFINI_STORE_ADDR/INFINI_STORE_PORT) since "),
                    HasSubstr(", 5 s ago (last try: Connection refused); gives up at "),
                    EndsWith(", in 625 s (INFINI_CCL_TIMEOUT_S=600 + 30 s)\n")));
}

// INFINI_RUN_WAITING_NOTE_S sets the period (and the first note, when
// shorter than 5 s); INFINI_CCL_STORE_CONNECT_TIMEOUT_S the deadline, which
// the line then names; never longer than the caller's own bound.
TEST(StoreAccessTest, TheUsersNoteIntervalAndConnectTimeoutAreKeptAndNamed) {
  RuntimeSettings settings = LauncherStoreSettings();
  settings.waiting_note_interval = seconds(2);
  settings.store_connect_timeout = seconds(7);
  const rendezvous::ConnectProgress progress = StoreWaitReporter(settings, "");
  EXPECT_EQ(progress.first, seconds(2));
  EXPECT_EQ(progress.every, seconds(2));
  settings.waiting_note_interval = seconds(60);
  EXPECT_EQ(StoreWaitReporter(settings, "").first, seconds(5));
  EXPECT_EQ(StoreConnectTimeout(settings, seconds(630)), seconds(7));
  EXPECT_EQ(StoreConnectTimeout(settings, seconds(5)), seconds(5));
  EXPECT_THAT(LineAfterFiveSeconds(settings, seconds(7)),
              EndsWith(", in 2 s (INFINI_CCL_STORE_CONNECT_TIMEOUT_S=7)\n"));
}

// At the deadline: one error naming the store, its variables and the deadline.
TEST(StoreAccessTest, AStoreNobodyListensOnIsGivenUpAtTheDeadlineNamingIt) {
  RuntimeSettings settings = LauncherStoreSettings();
  settings.store_connect_timeout = seconds(1);
  const uint16_t port = infini::testing::UnusedPortBelowEphemeralRange();
  try {
    ConnectToRunStore("127.0.0.1", port, seconds(630), "", settings, "");
    ADD_FAILURE() << "connected to a port nobody listens on";
  } catch (const rendezvous::StoreError& error) {
    EXPECT_THAT(error.what(),
                AllOf(HasSubstr("could not connect to store at 127.0.0.1:" + std::to_string(port) +
                                " after 1s"),
                      EndsWith("(the run's store, named by INFINI_STORE_ADDR/INFINI_STORE_PORT; "
                               "INFINI_CCL_STORE_CONNECT_TIMEOUT_S=1)")));
  }
}

}  // namespace
}  // namespace infini::parallel
