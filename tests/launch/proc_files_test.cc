// /proc/PID files of processes that end while the launcher reads them.
#include "infini/launch/proc_files.h"

#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace infini::launch {
namespace {

// A child that waits to be killed; its pid.
pid_t StartSleeper() {
  const pid_t pid = fork();
  if (pid == 0) {
    pause();
    _exit(0);
  }
  return pid;
}

void KillAndReap(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

TEST(ProcFiles, AParentAndAFileOfALiveProcessAreRead) {
  const pid_t child = StartSleeper();
  ASSERT_GT(child, 0);
  EXPECT_EQ(ParentOf(child), getpid());
  const std::string stat = ReadProcFile(child, "stat");
  EXPECT_EQ(stat.rfind(std::to_string(child) + " (", 0), 0u) << stat;
  KillAndReap(child);
}

TEST(ProcFiles, AProcessGoneIsNoParentAndAnEmptyFile) {
  const pid_t child = StartSleeper();
  ASSERT_GT(child, 0);
  KillAndReap(child);
  EXPECT_EQ(ParentOf(child), -1);
  EXPECT_EQ(ReadProcFile(child, "stat"), "");
  EXPECT_EQ(ReadProcFile(child, "environ"), "");
}

// The race that ended a launcher in CI: the file was opened while the
// process lived and read after it was reaped (ESRCH).
TEST(ProcFiles, AFileOpenedBeforeItsProcessEndedReadsAsEmptyWithoutThrowing) {
  const pid_t child = StartSleeper();
  ASSERT_GT(child, 0);
  const std::string path = "/proc/" + std::to_string(child) + "/stat";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const int probe = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(probe, 0);
  KillAndReap(child);

  EXPECT_EQ(ReadUntilEnd(fd), "");
  close(fd);
  // The race was real: a plain read of such a file fails with ESRCH, which
  // libstdc++'s filebuf throws from (the launcher's abort in CI).
  char byte;
  EXPECT_EQ(read(probe, &byte, 1), -1);
  EXPECT_EQ(errno, ESRCH);
  close(probe);
}

}  // namespace
}  // namespace infini::launch
