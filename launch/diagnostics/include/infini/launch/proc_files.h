// Reading /proc/PID files of processes that may end while they are read.
//
// A read of /proc/PID/stat after PID was reaped fails with ESRCH, and
// libstdc++'s filebuf throws std::__ios_failure from underflow on a failed
// read whatever the stream's exception mask, so an istreambuf_iterator over
// such a file can end the launcher. These use open/read and say "gone".
#pragma once

#include <sys/types.h>

#include <string>

namespace infini::launch {

// All of an open file's bytes until its end or a failed read (what was read
// before the failure is kept); the descriptor stays open.
std::string ReadUntilEnd(int fd);

// The whole of /proc/PID/NAME; "" when PID is gone or the file cannot be read.
std::string ReadProcFile(pid_t pid, const char* name);

// PID's parent from /proc/PID/stat; -1 when PID is gone. Allocates nothing,
// so a child forked or cloned from a threaded launcher may call it.
pid_t ParentOf(pid_t pid);

// PID's own pid in the innermost PID namespace it lives in (the last field
// of /proc/PID/status's NSpid line: what its getpid() returns); -1 when PID
// is gone, PID itself when it lives in ours.
pid_t InnermostPidOf(pid_t pid);

}  // namespace infini::launch
