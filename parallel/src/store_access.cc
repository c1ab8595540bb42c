#include "infini/parallel/store_access.h"

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "infini/common/one_line.h"
#include "infini/rendezvous/endpoint.h"

namespace infini::parallel {
namespace {

using std::chrono::milliseconds;

// "12:00:00 UTC": the wall clock of this host, as its other logs show it.
std::string ClockTime(std::chrono::system_clock::time_point when) {
  const time_t seconds = std::chrono::system_clock::to_time_t(when);
  tm local{};
  if (localtime_r(&seconds, &local) == nullptr) return "?";
  char text[64];
  if (std::strftime(text, sizeof(text), "%H:%M:%S %Z", &local) == 0) return "?";
  return text;
}

int64_t RoundedSeconds(milliseconds duration) { return (duration.count() + 500) / 1000; }

int64_t SecondsUp(milliseconds duration) { return (duration.count() + 999) / 1000; }

}  // namespace

std::string StoreVariables(const StoreLocation& location) {
  switch (location.kind) {
    case StoreLocation::Kind::kLauncher:
      return "INFINI_STORE_ADDR/INFINI_STORE_PORT";
    case StoreLocation::Kind::kMaster:
      return "MASTER_ADDR/MASTER_PORT";
    case StoreLocation::Kind::kInProcess:
      break;
  }
  return "";
}

std::chrono::milliseconds StoreConnectTimeout(const RuntimeSettings& settings,
                                              milliseconds store_timeout) {
  // Never longer than the caller's own bound (the loss watcher's 5 s).
  return std::min(settings.store_connect_timeout.value_or(store_timeout), store_timeout);
}

namespace {

// Where a connect deadline of `connect_timeout` came from, as the user set it:
// "INFINI_CCL_STORE_CONNECT_TIMEOUT_S=7" or "INFINI_CCL_TIMEOUT_S=600 + 30 s".
std::string ConnectDeadlineSource(const RuntimeSettings& settings, milliseconds connect_timeout) {
  if (settings.store_connect_timeout) {
    return "INFINI_CCL_STORE_CONNECT_TIMEOUT_S=" + std::to_string(RoundedSeconds(connect_timeout));
  }
  return "INFINI_CCL_TIMEOUT_S=" + std::to_string(RoundedSeconds(settings.timeout)) + " + " +
         std::to_string(RoundedSeconds(connect_timeout - settings.timeout)) + " s";
}

}  // namespace

rendezvous::ConnectProgress StoreWaitReporter(const RuntimeSettings& settings, std::string prefix) {
  rendezvous::ConnectProgress progress;
  progress.first = std::min<milliseconds>(progress.first, settings.waiting_note_interval);
  progress.every = settings.waiting_note_interval;
  const std::string variables = StoreVariables(settings.store);
  progress.report = [prefix = std::move(prefix), variables,
                     settings](const rendezvous::ConnectWait& wait) {
    const milliseconds connect_timeout = wait.waited + wait.left;
    const std::string line =
        prefix + "waiting for the run's store at " + wait.endpoint +
        (variables.empty() ? "" : " (" + variables + ")") + " since " + ClockTime(wait.since) +
        ", " + std::to_string(RoundedSeconds(wait.waited)) +
        " s ago (last try: " + OneLine(wait.last_failure) + "); gives up at " +
        ClockTime(wait.since + connect_timeout) + ", in " + std::to_string(SecondsUp(wait.left)) +
        " s (" + ConnectDeadlineSource(settings, connect_timeout) + ")\n";
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  };
  return progress;
}

std::unique_ptr<rendezvous::TcpStoreClient> ConnectToRunStore(
    const std::string& host, uint16_t port, std::chrono::milliseconds store_timeout,
    const std::string& token, const RuntimeSettings& settings, const std::string& prefix) {
  const milliseconds connect_timeout = StoreConnectTimeout(settings, store_timeout);
  try {
    return rendezvous::TcpStoreClient::Connect(host, port, connect_timeout, token,
                                               StoreWaitReporter(settings, prefix));
  } catch (const rendezvous::StoreHandshakeError&) {
    throw;
  } catch (const rendezvous::StoreError& error) {
    const std::string variables = StoreVariables(settings.store);
    if (variables.empty()) throw;
    throw rendezvous::StoreError(std::string(error.what()) + " (the run's store, named by " +
                                 variables + "; " +
                                 ConnectDeadlineSource(settings, connect_timeout) + ")");
  }
}

std::string MasterStoreListenAddress(const StoreLocation& location, int nnodes,
                                     const std::string& prefix) {
  const rendezvous::ListenChoice choice =
      rendezvous::ChooseListenAddress(location.host, nnodes == 1);
  if (!choice.fallback_reason.empty()) {
    const std::string line = prefix + "MASTER_ADDR='" + OneLine(location.host) + "' " +
                             choice.fallback_reason + ": the store listens on every interface (" +
                             rendezvous::FormatEndpoint({choice.address, location.port}) +
                             "); set MASTER_ADDR to the address of this host that the other " +
                             "ranks reach, as a number, to listen on it alone\n";
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }
  return choice.address;
}

}  // namespace infini::parallel
