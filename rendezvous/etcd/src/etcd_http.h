// One HTTP connection to an etcd cluster's JSON gateway, failing over to the
// next member when one does not answer. Not thread-safe: one per thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "etcd_json.h"

namespace infini::rendezvous::etcd {

struct TrafficCounters {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> bytes_received{0};
};

class EtcdHttp {
 public:
  EtcdHttp(std::vector<std::string> endpoints, std::chrono::milliseconds request_timeout,
           std::shared_ptr<TrafficCounters> counters);
  ~EtcdHttp();
  EtcdHttp(const EtcdHttp&) = delete;
  EtcdHttp& operator=(const EtcdHttp&) = delete;

  // etcd's authentication token, sent with every later request.
  void set_auth_token(const std::string& token) { auth_token_ = token; }

  // POSTs `body` to `path` (e.g. "/v3/kv/range") and parses the reply.
  // Throws StoreError: no member answered (naming them all), or the member
  // refused the request (its message).
  Json Call(const std::string& path, const std::string& body);

  // A streaming call (watch): every JSON message of the reply goes to
  // `on_message` until it returns false, `keep_going` returns false (polled
  // about once a second), or `deadline` passes. Returns true when
  // `on_message` ended it; false on the deadline or keep_going; throws
  // StoreError when the member is lost (the caller resumes on the next one
  // with NextMember).
  bool Stream(const std::string& path, const std::string& body,
              const std::function<bool(const Json&)>& on_message,
              const std::function<bool()>& keep_going,
              std::chrono::steady_clock::time_point deadline);
  void NextMember();
  std::string endpoints_text() const;
  // Ends a Stream in progress at once (from any thread) by shutting its
  // socket down; later Streams are not affected.
  void Interrupt();
  // For libcurl's socket callbacks: the connection's socket opened, closed.
  void RecordSocket(int socket_fd);
  void ForgetSocket(int socket_fd);

 private:
  void* curl_ = nullptr;  // CURL*
  std::mutex socket_mutex_;
  int socket_fd_ = -1;  // the connection's socket, guarded by socket_mutex_
  std::vector<std::string> endpoints_;
  size_t current_ = 0;
  std::chrono::milliseconds request_timeout_;
  std::shared_ptr<TrafficCounters> counters_;
  std::string auth_token_;
};

// etcd's gateway carries keys and values as base64.
std::string Base64Encode(const std::string& bytes);
std::string Base64Decode(const std::string& text);
// The end of the range of keys that begin with `prefix`.
std::string PrefixRangeEnd(const std::string& prefix);

}  // namespace infini::rendezvous::etcd
