#include "etcd_cluster.h"

#include <curl/curl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <thread>

#include "infini/rendezvous/etcd_store.h"

namespace infini::etcd_testing {

using launch::testing::FreePort;
using launch::testing::ReadFile;
using std::chrono::milliseconds;

namespace {

constexpr milliseconds kStartBound{30000};

pid_t StartMember(const std::vector<std::string>& arguments, const std::string& log_path) {
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    FILE* log = fopen(log_path.c_str(), "w");
    if (log) {
      dup2(fileno(log), STDOUT_FILENO);
      dup2(fileno(log), STDERR_FILENO);
    }
    std::vector<char*> argv;
    for (const std::string& argument : arguments)
      argv.push_back(const_cast<char*>(argument.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

EtcdCluster::EtcdCluster(int members) {
  std::vector<int> peer_ports;
  std::string initial_cluster;
  for (int index = 0; index < members; ++index) {
    client_ports_.push_back(FreePort());
    peer_ports.push_back(FreePort());
    initial_cluster += (index ? "," : "") + std::string("m") + std::to_string(index) +
                       "=http://127.0.0.1:" + std::to_string(peer_ports.back());
  }
  for (int index = 0; index < members; ++index) {
    const std::string name = "m" + std::to_string(index);
    const std::string client_url = "http://127.0.0.1:" + std::to_string(client_ports_[index]);
    const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer_ports[index]);
    pids_.push_back(
        StartMember({"etcd", "--name=" + name, "--data-dir=" + data_.path() + "/" + name,
                     "--listen-client-urls=" + client_url, "--advertise-client-urls=" + client_url,
                     "--listen-peer-urls=" + peer_url, "--initial-advertise-peer-urls=" + peer_url,
                     "--initial-cluster=" + initial_cluster, "--initial-cluster-state=new",
                     "--initial-cluster-token=" + data_.path(),
                     // Elections within a second, so that losing the leader is brief.
                     "--heartbeat-interval=50", "--election-timeout=500", "--log-level=warn"},
                    data_.path() + "/" + name + ".log"));
  }
  if (!WaitUntilServing(kStartBound)) {
    const std::string logs = Logs();
    for (int index = 0; index < members; ++index) Kill(index);
    throw std::runtime_error("etcd did not come up within 30 s: " + logs);
  }
}

EtcdCluster::~EtcdCluster() {
  for (size_t index = 0; index < pids_.size(); ++index) Kill(static_cast<int>(index));
}

std::string EtcdCluster::endpoint(int index) const {
  return "127.0.0.1:" + std::to_string(client_ports_.at(static_cast<size_t>(index)));
}

std::vector<std::string> EtcdCluster::endpoint_list() const {
  std::vector<std::string> list;
  for (size_t index = 0; index < client_ports_.size(); ++index) {
    list.push_back(endpoint(static_cast<int>(index)));
  }
  return list;
}

std::string EtcdCluster::endpoints() const {
  std::string text;
  for (const std::string& member : endpoint_list()) text += (text.empty() ? "" : ",") + member;
  return text;
}

void EtcdCluster::Kill(int index) {
  pid_t& pid = pids_.at(static_cast<size_t>(index));
  if (pid <= 0) return;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  pid = -1;
}

bool EtcdCluster::WaitUntilServing(milliseconds bound) const {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    for (const std::string& member : endpoint_list()) {
      try {
        rendezvous::EtcdStoreOptions options;
        options.endpoints = {member};
        options.key_prefix = "health/";
        options.request_timeout = milliseconds(1000);
        rendezvous::EtcdStore::Connect(options)->Set("probe", "1");  // needs a leader
      } catch (const rendezvous::StoreError&) {
        all = false;
        break;
      }
    }
    if (all) {
      rendezvous::EtcdStoreOptions options;
      options.endpoints = endpoint_list();
      options.key_prefix = "health/";
      rendezvous::EtcdStore::Connect(options)->DeleteAll();
      return true;
    }
    std::this_thread::sleep_for(milliseconds(100));
  }
  return false;
}

std::vector<std::string> EtcdCluster::AllKeys() const {
  rendezvous::EtcdStoreOptions options;
  options.endpoints = endpoint_list();
  options.key_prefix = "";
  if (!root_password_.empty()) {
    options.user = "root";
    options.password = root_password_;
  }
  std::vector<std::string> keys;
  for (const auto& [key, value] : rendezvous::EtcdStore::Connect(options)->List("")) {
    keys.push_back(key);
  }
  return keys;
}

namespace {

size_t AppendReply(char* data, size_t size, size_t count, void* reply) {
  static_cast<std::string*>(reply)->append(data, size * count);
  return size * count;
}

// POSTs `body` to the gateway of `endpoint`; throws when etcd says no.
void PostToGateway(const std::string& endpoint, const std::string& path, const std::string& body) {
  CURL* curl = curl_easy_init();
  if (curl == nullptr) throw std::runtime_error("curl_easy_init failed");
  std::string reply;
  const std::string url = "http://" + endpoint + path;
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 10000L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, AppendReply);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &reply);
  const CURLcode result = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(curl);
  if (result != CURLE_OK || status != 200 || reply.find("\"error\"") != std::string::npos) {
    throw std::runtime_error("etcd " + path + " failed (HTTP " + std::to_string(status) +
                             "): " + curl_easy_strerror(result) + " " + reply);
  }
}

}  // namespace

void EtcdCluster::EnableAuthentication(const std::string& root_password) {
  const std::string member = endpoint(0);
  PostToGateway(member, "/v3/auth/user/add",
                "{\"name\":\"root\",\"password\":\"" + root_password + "\"}");
  PostToGateway(member, "/v3/auth/role/add", "{\"name\":\"root\"}");
  PostToGateway(member, "/v3/auth/user/grant", "{\"user\":\"root\",\"role\":\"root\"}");
  PostToGateway(member, "/v3/auth/enable", "{}");
  root_password_ = root_password;
}

std::string EtcdCluster::Logs() const {
  std::string logs;
  for (size_t index = 0; index < pids_.size(); ++index) {
    logs += ReadFile(data_.path() + "/m" + std::to_string(index) + ".log").substr(0, 2000);
  }
  return logs;
}

}  // namespace infini::etcd_testing
