// The watchdog's public header stands on its own: a program that only needs
// to recognise a run ended by the watchdog includes it and nothing else.
#include "infini/parallel/watchdog.h"

#include <gtest/gtest.h>

namespace infini::parallel {
namespace {

TEST(WatchdogTest, ExitCodeIsTheConventionOfTimeout) {
  static_assert(kWatchdogExitCode == 124, "timeout(1)'s status: it took too long");
  EXPECT_EQ(kWatchdogExitCode, 124);
}

}  // namespace
}  // namespace infini::parallel
