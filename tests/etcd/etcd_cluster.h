// A real etcd cluster for the tests: members started on loopback ports in a
// scratch folder, killed and removed at destruction.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "launcher_harness.h"

namespace infini::etcd_testing {

class EtcdCluster {
 public:
  // Starts `members` members and waits (bounded) until they have a leader.
  // Throws std::runtime_error when they do not come up (etcd's log attached).
  explicit EtcdCluster(int members);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  // "127.0.0.1:port" of member `index`.
  std::string endpoint(int index) const;
  // Every member's endpoint, comma-separated (as --rdzv_endpoint takes them).
  std::string endpoints() const;
  std::vector<std::string> endpoint_list() const;
  // SIGKILLs member `index` and reaps it.
  void Kill(int index);
  // Every key in the cluster (etcdctl-free: through the gateway).
  std::vector<std::string> AllKeys() const;
  // Turns on etcd's own authentication with one user, `root` (etcd requires
  // it), holding the root role; later calls (AllKeys) log in as it.
  // etcdctl-free: the gateway's /v3/auth calls. Throws std::runtime_error.
  void EnableAuthentication(const std::string& root_password);

 private:
  launch::testing::TempDir data_;
  std::vector<int> client_ports_;
  std::vector<pid_t> pids_;
  std::string root_password_;  // set once authentication is on
  bool WaitUntilServing(std::chrono::milliseconds bound) const;
  std::string Logs() const;
};

}  // namespace infini::etcd_testing
