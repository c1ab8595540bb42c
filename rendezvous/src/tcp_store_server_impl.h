// The store server's connection layer, declared once for the files that
// define it, each one concern (the overview is at the top of
// tcp_store_server.cc):
//   tcp_store_server.cc   options, the loop and its thread, Pump(), timers,
//                         the sweep, memory given back, stop;
//   server_connection.cc  one client's connection: opening it for the
//                         Acceptor, reading, admission to the budget, serving
//                         requests, refusing, closing
//                         (Connection: connection.h; its replies go out
//                         through ReplyWriter: reply_writer.h; large frames
//                         wait in Admission: admission.h);
//   server_batch.cc       batched requests, answered by tag;
//   server_relay.cc       RelayServer (relay_server.h): a relay's requests
//                         that go upstream (upstream_relay.h);
//   server_on_close.cc    keys set when their connection closes.
// Pieces with one job each, which act on connections through the server as
// their ConnectionOwner (connection_owner.h): Acceptor (acceptor.h: the
// listening socket, accepting, strangers shed for the caps and the
// descriptor reserve), HelloStage (hello_stage.h: a new connection's hello
// turned into a served connection or a refusal), HangupWatch
// (hangup_watch.h: the peer's close of a connection that is not read).
// What knows no sockets is apart: KeyValueTable (keys, values, waiters),
// ServerHandshake (the hello and the run token's challenge), Strangers and
// DescriptorLimit (who is shed), request_codec (framing).
#pragma once

#include <sys/socket.h>
#include <uv.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "acceptor.h"
#include "admission.h"
#include "connection.h"
#include "connection_owner.h"
#include "connection_reader.h"
#include "hello_stage.h"
#include "infini/rendezvous/tcp_store.h"
#include "key_value_table.h"
#include "reply_writer.h"
#include "request_codec.h"

namespace infini::rendezvous::store_server {

// Whose batched request a table id is (server_batch.cc).
struct BatchEntry {
  ClientId connection = 0;
  uint64_t tag = 0;
};

// A store server: the table's keys, served over TCP. A relay
// (relay_server.h) is one whose routing hooks send what its table does not
// hold upstream.
class TcpStoreServerImpl : public TcpStoreServer, private ConnectionOwner {
 public:
  explicit TcpStoreServerImpl(const TcpStoreServerOptions& options);
  ~TcpStoreServerImpl() override;

  void Listen();
  void StartThread();
  // Stops the loop and its thread and closes every handle (the destructor
  // does too; a derived server calls it before its own members go).
  void StopServing();

  uint16_t port() const override { return acceptor_.port(); }
  size_t num_keys() const override { return num_keys_.load(std::memory_order_relaxed); }
  size_t num_waiters() const override { return num_waiters_.load(std::memory_order_relaxed); }
  size_t num_connections() const override {
    return num_connections_.load(std::memory_order_relaxed);
  }
  size_t num_refused_hellos() const override { return hello_stage_.num_refused(); }
  size_t buffered_bytes() const override {
    return buffered_bytes_published_.load(std::memory_order_relaxed);
  }
  size_t charged_bytes() const override {
    return charged_bytes_published_.load(std::memory_order_relaxed);
  }
  size_t stored_bytes() const override {
    return stored_bytes_published_.load(std::memory_order_relaxed);
  }
  size_t num_shed_connections() const override { return acceptor_.num_shed(); }
  RelayCounts relay_counts() const override { return {}; }

 protected:
  // ---- routing hooks (a relay's, relay_server.h) ----
  // Called as the loop starts.
  virtual void StartUpstream(const std::string& /*where*/) {}
  // Takes `request` when it is not the table's to answer (false: the table
  // answers it).
  virtual bool Route(Connection* /*connection*/, wire::Request& /*request*/) { return false; }
  virtual bool TakesBatches() const { return true; }
  // An on-close registration already held by `connection`: true when it
  // also goes elsewhere, which answers it.
  virtual bool RouteOnClose(Connection* /*connection*/, wire::Request& /*request*/) {
    return false;
  }
  // Sets a closed connection's on-close key elsewhere (false: in the table).
  virtual bool SetOnCloseElsewhere(const std::string& /*key*/, std::string& /*value*/) {
    return false;
  }

  // ---- the loop (tcp_store_server.cc) ----
  template <typename Handle>
  void InitHandle(int result, Handle* handle, const std::string& where) {
    CheckUv(result, where, "could not create a libuv handle");
    handle->data = this;
    open_handles_.push_back(reinterpret_cast<uv_handle_t*>(handle));
  }
  void CheckUv(int result, const std::string& where, const char* what);
  void CloseServerHandles();
  void ResolveBindAddress(const std::string& where, sockaddr_storage* address);
  uint64_t SweepIntervalMs() const;
  Milliseconds Now() const { return static_cast<Milliseconds>(uv_now(&loop_)); }
  void Pump();
  void PublishCounters();
  void DeliverCompletions();
  void GiveBackFreedMemory();
  void ArmDeadlineTimer();
  static void OnDeadline(uv_timer_t* timer);
  static void OnSweep(uv_timer_t* timer);
  static void OnStop(uv_async_t* async);

  // ---- one connection (server_connection.cc) ----
  // ConnectionOwner: what the Acceptor, HelloStage and HangupWatch ask.
  Connection* OpenConnection() override;
  Connection* FindConnection(ClientId id) override;
  size_t open_connections() const override { return connections_.size(); }
  void Welcome(Connection* connection) override;
  void Arrived(Connection* connection) override { MarkReady(connection); }
  void SendReply(Connection* connection, wire::EncodedReply reply) override {
    Send(connection, std::move(reply));
  }
  void RefuseConnection(Connection* connection, const std::string& reason) override {
    Refuse(connection, reason);
  }
  void CloseConnection(Connection* connection, bool shed) override { Close(connection, shed); }
  void PumpReady() override { Pump(); }
  static uv_stream_t* Stream(Connection* connection) {
    return reinterpret_cast<uv_stream_t*>(&connection->handle);
  }
  // The budget: admitted frames, waiters and unsent replies.
  size_t Charged() const {
    return admission_.admitted_bytes() + table_.waiter_bytes() + replies_.charged_bytes();
  }
  bool OverBudget() const { return Charged() >= options_.max_buffered_bytes; }
  bool CanServe(const Connection* connection) const;
  void MarkReady(Connection* connection);
  void Serve(Connection* connection);
  void HandleRequest(Connection* connection, std::string_view body);

  // ---- batched requests (server_batch.cc) ----
  void HandleBatch(Connection* connection, std::string_view body);
  // Takes `completion` when it answers a batched request (false otherwise).
  bool RouteBatchReply(Completion& completion);
  void OweBatchReply(Connection* connection);
  void SendBatchReplies();
  void ForgetBatches(Connection* connection);

  // ---- on-close keys (server_on_close.cc) ----
  static bool IsOnCloseRequest(const wire::Request& request);
  wire::Reply RegisterOnClose(Connection* connection, const wire::Request& request);
  void HandleOnClose(Connection* connection, wire::Request& request);
  void FireOnClose(Connection* connection);

  // ---- admission ----
  void Admit(Connection* connection);
  void AdmitQueued();
  void ReleaseAdmission(Connection* connection);
  std::string TooLargeText(const Connection* connection) const;
  void Send(Connection* connection, wire::EncodedReply reply);
  void OnReplyWritten(Connection* connection, int status);
  void Refuse(Connection* connection, const std::string& reason);
  static void OnShutdown(uv_shutdown_t* request, int status);
  // `shed`: closed to make room for others, not refused.
  void Close(Connection* connection, bool shed = false);

  const TcpStoreServerOptions options_;
  wire::RequestLimits limits_;
  uv_loop_t loop_{};
  uv_timer_t deadline_timer_{};
  uv_timer_t sweep_timer_{};
  uv_async_t stop_async_{};
  std::vector<uv_handle_t*> open_handles_;  // the server's own handles, to close
  bool loop_initialized_ = false;
  bool stopping_ = false;
  std::thread thread_;

  // Loop thread only.
  KeyValueTable table_;
  ReplyWriter replies_;
  Admission admission_;
  std::unordered_map<ClientId, Connection*> connections_;
  ClientId last_client_id_ = 0;
  std::deque<Connection*> ready_;
  Acceptor acceptor_;
  HelloStage hello_stage_;  // after acceptor_, which it tells of holders of the token
  ConnectionReader reader_;
  bool pumping_ = false;
  size_t on_close_bytes_ = 0;  // on-close keys registered (within max_stored_bytes)
  size_t trim_high_water_ = 0;
  std::unordered_map<ClientId, BatchEntry> batch_entries_;  // by the table's id
  std::vector<ClientId> batch_reply_owners_;  // connections with batch replies to send

  std::atomic<size_t> num_keys_{0};
  std::atomic<size_t> num_waiters_{0};
  std::atomic<size_t> num_connections_{0};
  std::atomic<size_t> buffered_bytes_published_{0};
  std::atomic<size_t> charged_bytes_published_{0};
  std::atomic<size_t> stored_bytes_published_{0};
};

}  // namespace infini::rendezvous::store_server
