// Reads kvtest's KVTEST_REGISTRATION_LOG (tests/ccl/plugins/kvtest_plugin.cc)
// and judges it: every registration ends exactly once, by a deregistration
// or by its communicator's abort (which frees what it registered), and none
// is still live when its communicator is destroyed. A process killed on
// purpose leaves its registrations unended: counted, not a problem.
#pragma once

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

namespace infini::parallel::testing {

struct RegistrationSummary {
  int registered = 0;
  int deregistered = 0;
  int ended_by_abort = 0;  // live when their communicator was aborted
  int communicators = 0;   // distinct lives of communicators that registered
  int never_ended = 0;     // live when the log ends (a killed process's)
  std::string problems;    // empty when every rule held
};

inline RegistrationSummary ReadRegistrationLog(const std::string& path) {
  RegistrationSummary summary;
  std::ifstream log(path);
  // Per process, per communicator address: the live registrations' ids.
  std::map<std::pair<int, std::string>, std::set<unsigned long long>> live;
  std::set<std::tuple<int, std::string, int>> lives;  // (pid, comm, life) that registered
  std::map<std::pair<int, std::string>, int> life;    // an address reused after an end
  std::string line;
  while (std::getline(log, line)) {
    std::istringstream fields(line);
    int pid = 0;
    std::string event, comm;
    unsigned long long id = 0;
    fields >> pid >> event >> comm >> id;
    const auto key = std::make_pair(pid, comm);
    if (event == "register") {
      ++summary.registered;
      if (!live[key].insert(id).second) summary.problems += "id registered twice: " + line + "\n";
      lives.insert({pid, comm, life[key]});
    } else if (event == "deregister") {
      ++summary.deregistered;
      if (live[key].erase(id) != 1) summary.problems += "not registered there: " + line + "\n";
    } else if (event == "abort") {
      summary.ended_by_abort += static_cast<int>(live[key].size());
      live[key].clear();
      ++life[key];
    } else if (event == "destroy") {
      if (!live[key].empty()) {
        summary.problems +=
            std::to_string(live[key].size()) + " still registered at " + line + "\n";
      }
      live[key].clear();
      ++life[key];
    }
  }
  for (const auto& entry : live) summary.never_ended += static_cast<int>(entry.second.size());
  summary.communicators = static_cast<int>(lives.size());
  return summary;
}

}  // namespace infini::parallel::testing
