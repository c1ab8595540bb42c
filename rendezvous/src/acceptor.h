// The store server's front door: the listening socket, connections accepted
// a few per loop turn, and strangers (connections before their hello) shed
// for the caps and the descriptor reserve (Strangers, DescriptorLimit decide;
// this closes). What it accepts it hands to its ConnectionOwner.
#pragma once

#include <sys/socket.h>
#include <uv.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "connection.h"
#include "connection_owner.h"
#include "strangers.h"

namespace infini::rendezvous::store_server {

class Acceptor {
 public:
  Acceptor(ConnectionOwner& owner, size_t max_strangers, size_t max_strangers_per_peer)
      : owner_(owner), strangers_(max_strangers, max_strangers_per_peer) {}

  // Binds `address` and listens on `loop`; its handles are added to
  // `open_handles` (the server closes them). Returns "" or what failed
  // ("could not bind: <why>").
  std::string Listen(uv_loop_t* loop, const sockaddr_storage& address,
                     std::vector<uv_handle_t*>* open_handles);
  uint16_t port() const { return port_; }
  // The endpoint's text for its warnings (known once listening).
  void set_endpoint(std::string endpoint) { endpoint_ = std::move(endpoint); }
  // Takes nothing more (the server is stopping).
  void Stop() { stopping_ = true; }

  // The open-file limit read again (the sweep's turn).
  void ReadDescriptorLimit() { descriptors_.Read(); }
  // `id` is a stranger no more: its hello holds the token's ticket, or it
  // was accepted, or it left.
  void NoLongerStranger(ClientId id) { strangers_.Remove(id); }

  size_t num_shed() const { return num_shed_.load(std::memory_order_relaxed); }

 private:
  static void OnConnection(uv_stream_t* listener, int status);
  static void OnTurnEnd(uv_check_t* check);
  Milliseconds Now() const { return static_cast<Milliseconds>(uv_now(loop_)); }
  void AcceptOne();
  void MakeRoomFor(Connection* connection);
  void Shed(ClientId id);
  void WarnIfNearDescriptorLimit(Connection* accepted, int status);
  void WarnAboutDescriptors(bool reached);

  ConnectionOwner& owner_;
  uv_loop_t* loop_ = nullptr;
  uv_tcp_t listener_{};
  uv_check_t turn_check_{};
  uint16_t port_ = 0;
  std::string endpoint_;
  bool stopping_ = false;
  unsigned accepted_this_turn_ = 0;
  bool accept_deferred_ = false;
  Strangers strangers_;  // connections that may be shed
  DescriptorLimit descriptors_;
  std::atomic<size_t> num_shed_{0};
};

}  // namespace infini::rendezvous::store_server
