// bin/store_scaling: how the store server's time and memory grow with the
// number of clients.
//
// For each client count N: N clients (threads, one connection each) set their
// own key, count themselves in with Add, and wait on one common key that the
// last to arrive sets. Each N runs in a fresh server process (so memory freed
// by a smaller run cannot hide a larger one's growth), and the clients run in
// yet another process, so the server's RSS is the server's alone.
//
//   store_scaling --clients=64,256,1024,4096

#include <gflags/gflags.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "infini/common/flags.h"
#include "infini/rendezvous/tcp_store.h"

DEFINE_string(clients, "64,256,1024,4096", "comma-separated client counts to measure");
DEFINE_string(role, "driver", "internal: driver | server | clients");
DEFINE_int32(port, 0, "internal: the server's port (clients role)");
DEFINE_int32(client_count, 0, "internal: number of clients (server and clients roles)");

namespace {

using Clock = std::chrono::steady_clock;
using infini::rendezvous::TcpStoreClient;
using infini::rendezvous::TcpStoreServer;

constexpr size_t kClientThreadStackBytes = size_t{256} << 10;
constexpr std::chrono::seconds kClientTimeout{120};

double MillisecondsBetween(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

void RaiseOpenFileLimit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
}

// A field of /proc/self/status in KiB ("VmRSS", "VmHWM"), or -1.
long StatusKib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0)
      return std::strtol(line.c_str() + field.size() + 1, nullptr, 10);
  }
  return -1;
}

// Restarts VmHWM from the current RSS (Linux >= 4.0); false if not possible.
bool ResetPeakRss() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return clear_refs.good();
}

// Runs this program with `arguments`; returns its stdout, or exits on failure.
std::string RunSelf(const std::vector<std::string>& arguments) {
  int output[2];
  if (pipe(output) != 0) {
    std::perror("pipe");
    std::exit(1);
  }
  const pid_t child = fork();
  if (child == 0) {
    dup2(output[1], STDOUT_FILENO);
    close(output[0]);
    close(output[1]);
    std::vector<char*> argv;
    std::string self = "/proc/self/exe";
    argv.push_back(self.data());
    std::vector<std::string> copies = arguments;
    for (std::string& argument : copies) argv.push_back(argument.data());
    argv.push_back(nullptr);
    execv("/proc/self/exe", argv.data());
    std::perror("execv");
    _exit(127);
  }
  close(output[1]);
  std::string text;
  char buffer[4096];
  ssize_t count = 0;
  while ((count = read(output[0], buffer, sizeof(buffer))) > 0) text.append(buffer, count);
  close(output[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "store_scaling: '%s' failed (status %d)\n", arguments.front().c_str(),
                 status);
    std::exit(1);
  }
  return text;
}

// ---- clients role ----

struct ClientRun {
  int client_count = 0;
  std::mutex mutex;
  std::condition_variable changed;
  int connected = 0;
  bool started = false;
  Clock::time_point start;
  std::atomic<int64_t> go_set_at_ns{0};
  std::vector<Clock::time_point> woken_at;
  std::atomic<int> failures{0};
};

struct ClientArgs {
  ClientRun* run;
  int index;
};

void* RunClient(void* raw) {
  auto* args = static_cast<ClientArgs*>(raw);
  ClientRun& run = *args->run;
  try {
    auto client = TcpStoreClient::Connect(
        "127.0.0.1", static_cast<uint16_t>(FLAGS_port),
        std::chrono::duration_cast<std::chrono::milliseconds>(kClientTimeout));
    client->set_timeout(std::chrono::duration_cast<std::chrono::milliseconds>(kClientTimeout));
    {
      std::unique_lock lock(run.mutex);
      ++run.connected;
      run.changed.notify_all();
      run.changed.wait(lock, [&] { return run.started; });
    }
    client->Set("client/" + std::to_string(args->index), "ready");
    if (client->Add("arrived", 1) == run.client_count) {
      run.go_set_at_ns = Clock::now().time_since_epoch().count();
      client->Set("go", "1");
    }
    client->Wait({"go"});
    run.woken_at[args->index] = Clock::now();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "client %d: %s\n", args->index, error.what());
    run.failures.fetch_add(1);
    std::unique_lock lock(run.mutex);
    ++run.connected;  // do not leave the others waiting
    run.changed.notify_all();
  }
  return nullptr;
}

int RunClients() {
  RaiseOpenFileLimit();
  ClientRun run;
  run.client_count = FLAGS_client_count;
  run.woken_at.resize(run.client_count);
  std::vector<ClientArgs> args(run.client_count);
  std::vector<pthread_t> threads(run.client_count);
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, kClientThreadStackBytes);
  const Clock::time_point connect_start = Clock::now();
  for (int i = 0; i < run.client_count; ++i) {
    args[i] = {&run, i};
    if (pthread_create(&threads[i], &attributes, RunClient, &args[i]) != 0) {
      std::fprintf(stderr, "could not start client thread %d\n", i);
      return 1;
    }
  }
  {
    std::unique_lock lock(run.mutex);
    run.changed.wait(lock, [&] { return run.connected >= run.client_count; });
    run.start = Clock::now();
    run.started = true;
    run.changed.notify_all();
  }
  for (pthread_t thread : threads) pthread_join(thread, nullptr);
  if (run.failures.load() > 0) return 1;
  const Clock::time_point last_woken = *std::max_element(run.woken_at.begin(), run.woken_at.end());
  const Clock::time_point go_set_at{Clock::duration(run.go_set_at_ns.load())};
  std::printf("%.1f %.1f %.1f\n", MillisecondsBetween(connect_start, run.start),
              MillisecondsBetween(run.start, last_woken),
              MillisecondsBetween(go_set_at, last_woken));
  return 0;
}

// ---- server role ----

int RunServer() {
  RaiseOpenFileLimit();
  const long rss_before = StatusKib("VmRSS");
  const bool peak_resettable = ResetPeakRss();
  infini::rendezvous::TcpStoreServerOptions options;
  options.host = "127.0.0.1";
  auto server = TcpStoreServer::Start(options);
  std::istringstream times(RunSelf({"--role=clients", "--port=" + std::to_string(server->port()),
                                    "--client_count=" + std::to_string(FLAGS_client_count)}));
  double connect_ms = 0;
  double run_ms = 0;
  double wake_ms = 0;
  times >> connect_ms >> run_ms >> wake_ms;
  const long rss_peak = peak_resettable ? StatusKib("VmHWM") : -1;
  const long rss_after = StatusKib("VmRSS");
  const long peak_growth = rss_peak - rss_before;
  std::printf("| %d | %.1f | %.1f | %.2f | %.1f | %ld | %ld | %.0f | %zu |\n", FLAGS_client_count,
              connect_ms, run_ms, wake_ms, rss_before / 1024.0, peak_growth, rss_after - rss_before,
              peak_growth * 1024.0 / FLAGS_client_count, server->num_keys());
  return 0;
}

// ---- driver ----

int RunDriver() {
  std::printf(
      "| clients | connect all (ms) | set+add+wait, all woken (ms) | wake-up after last set (ms) "
      "| server RSS before (MiB) | peak RSS growth (KiB) | RSS growth after (KiB) "
      "| peak growth per client (B) | keys |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::fflush(stdout);
  std::stringstream counts(FLAGS_clients);
  std::string count;
  while (std::getline(counts, count, ',')) {
    const int client_count = std::atoi(count.c_str());
    if (client_count <= 0) {
      std::fprintf(stderr, "store_scaling: --clients=%s: '%s' is not a positive count\n",
                   FLAGS_clients.c_str(), count.c_str());
      return 1;
    }
    std::printf("%s", RunSelf({"--role=server", "--client_count=" + count}).c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  infini::flags::Parse(&argc, &argv, "store_scaling [--clients=N,N,...]",
                       "Measures the store server's time and memory as the client count grows.");
  if (FLAGS_role == "clients") return RunClients();
  if (FLAGS_role == "server") return RunServer();
  if (FLAGS_role == "driver") return RunDriver();
  std::fprintf(stderr, "store_scaling: --role=%s: expected driver, server or clients\n",
               FLAGS_role.c_str());
  return 1;
}
