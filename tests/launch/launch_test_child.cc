// A rank for the launcher's tests: records what it saw (pid, environment,
// arguments) under --dir, then behaves as told (print, sleep, fail, die by a
// signal, ignore SIGTERM).
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <thread>

extern char** environ;

namespace {

std::map<std::string, std::string> ParseFlags(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    std::string argument = argv[i];
    if (argument.rfind("--", 0) != 0) continue;
    size_t equals = argument.find('=');
    flags[argument.substr(2, equals - 2)] =
        equals == std::string::npos ? "1" : argument.substr(equals + 1);
  }
  return flags;
}

int IntFlag(const std::map<std::string, std::string>& flags, const std::string& name,
            int fallback) {
  auto found = flags.find(name);
  return found == flags.end() ? fallback : std::atoi(found->second.c_str());
}

std::string EnvOr(const char* name, const char* fallback) {
  const char* value = getenv(name);
  return value ? value : fallback;
}

// Written to a temporary name and renamed, so a reader never sees half a file.
void WriteFileAtomically(const std::string& path, const std::string& content) {
  std::string temporary = path + ".tmp";
  {
    std::ofstream file(temporary);
    file << content;
  }
  std::rename(temporary.c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  auto flags = ParseFlags(argc, argv);
  const int rank = std::atoi(EnvOr("RANK", "-1").c_str());
  const int attempt = std::atoi(EnvOr("TORCHELASTIC_RESTART_COUNT", "0").c_str());
  if (flags.count("ignore_sigterm")) signal(SIGTERM, SIG_IGN);

  if (flags.count("dir")) {
    const std::string stem =
        flags["dir"] + "/" + std::to_string(rank) + "." + std::to_string(attempt);
    std::string environment;
    for (char** entry = environ; *entry; ++entry) environment += std::string(*entry) + "\n";
    std::string arguments;
    for (int i = 0; i < argc; ++i) arguments += std::string(argv[i]) + "\n";
    WriteFileAtomically(stem + ".env", environment);
    WriteFileAtomically(stem + ".argv", arguments);
    rlimit open_files{};
    getrlimit(RLIMIT_NOFILE, &open_files);
    WriteFileAtomically(stem + ".nofile", std::to_string(open_files.rlim_cur) + " " +
                                              std::to_string(open_files.rlim_max) + "\n");
    WriteFileAtomically(stem + ".pid", std::to_string(getpid()) + "\n");
  }

  // Descendants that must not outlive the run.
  if (flags.count("daemon")) {
    if (fork() == 0) {
      setsid();
      if (fork() == 0) {
        // Its pid (as seen in its PID namespace, if any): the tests check it is gone.
        WriteFileAtomically(flags["dir"] + "/" + std::to_string(rank) + ".daemon",
                            std::to_string(getpid()) + "\n");
        freopen("/dev/null", "w", stdout);
        freopen("/dev/null", "w", stderr);
        for (int i = 0; i < 600; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
      _exit(0);
    }
  }
  if (flags.count("grandchild")) {
    if (fork() == 0) {
      signal(SIGTERM, SIG_IGN);
      WriteFileAtomically(flags["dir"] + "/" + std::to_string(rank) + ".grandchild",
                          std::to_string(getpid()) + "\n");
      for (int i = 0; i < 600; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      _exit(0);
    }
  }
  if (flags.count("print")) {
    printf("%s\n", flags["print"].c_str());
    fprintf(stderr, "stderr:%s\n", flags["print"].c_str());
  }
  const int lines = IntFlag(flags, "lines", 0);
  const int line_bytes = IntFlag(flags, "line_bytes", 10);
  for (int line = 0; line < lines; ++line) {
    std::string text(static_cast<size_t>(line_bytes), static_cast<char>('a' + rank % 26));
    printf("%s\n", text.c_str());
    fflush(stdout);
  }
  if (flags.count("partial")) {
    printf("%s", flags["partial"].c_str());
    fflush(stdout);
  }
  fflush(stdout);

  // --fail_rank fails in attempts [--fail_from_attempt, --fail_attempts).
  const bool fails = rank == IntFlag(flags, "fail_rank", -1) &&
                     attempt >= IntFlag(flags, "fail_from_attempt", 0) &&
                     attempt < IntFlag(flags, "fail_attempts", 1 << 30);
  if (fails) {
    std::this_thread::sleep_for(std::chrono::milliseconds(IntFlag(flags, "fail_after_ms", 0)));
    fprintf(stderr, "rank %d failing on purpose\n", rank);
    fflush(stderr);
    if (int signal_number = IntFlag(flags, "signal", 0)) raise(signal_number);
    if (flags.count("segfault")) {
      volatile int* nowhere = nullptr;
      *nowhere = 1;
    }
    return IntFlag(flags, "exit_code", 1);
  }
  // Ranks from --long_from on sleep --sleep_ms (in attempts below
  // --sleep_attempts); the others exit at once.
  if (rank >= IntFlag(flags, "long_from", 0) &&
      attempt < IntFlag(flags, "sleep_attempts", 1 << 30)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(IntFlag(flags, "sleep_ms", 0)));
  }
  return 0;
}
