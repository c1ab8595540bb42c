// What the store server's pieces that act on connections (Acceptor,
// HelloStage, ConnectionReader, HangupWatch) ask of the server that owns the connections: the
// server (tcp_store_server_impl.h) implements it and wires the pieces to it.
#pragma once

#include <cstddef>
#include <string>

#include "connection.h"
#include "request_codec.h"

namespace infini::rendezvous::store_server {

class ConnectionOwner {
 public:
  // A connection for a socket about to be accepted: registered under a new
  // id, its handle initialized; nullptr when it could not be.
  virtual Connection* OpenConnection() = 0;
  // nullptr for a connection that left.
  virtual Connection* FindConnection(ClientId id) = 0;
  virtual size_t open_connections() const = 0;
  // An accepted connection starts being read (its hello may be there already).
  virtual void Welcome(Connection* connection) = 0;
  // Bytes of `connection` arrived: it is to be served.
  virtual void Arrived(Connection* connection) = 0;
  virtual void SendReply(Connection* connection, wire::EncodedReply reply) = 0;
  // Tells the client why, then closes its connection.
  virtual void RefuseConnection(Connection* connection, const std::string& reason) = 0;
  // `shed`: closed to make room for others, not refused.
  virtual void CloseConnection(Connection* connection, bool shed) = 0;
  // Handles what the calls above made ready.
  virtual void PumpReady() = 0;

 protected:
  ~ConnectionOwner() = default;
};

}  // namespace infini::rendezvous::store_server
