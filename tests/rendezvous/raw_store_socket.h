// A plain TCP socket to a local store, for tests that speak the wire protocol
// by hand (or misbehave on purpose).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "hello_auth.h"
#include "wire_protocol.h"

namespace infini::rendezvous::testing {

// The nonce the hand-made hellos carry (a real client draws a random one).
inline const std::string kTestClientNonce(wire::kNonceBytes, '\x5a');

// A client's hello frame; the magic and version may be wrong on purpose.
inline std::string HelloFrame(uint32_t magic = wire::kMagic, uint32_t version = wire::kVersion) {
  return wire::FrameWriter(wire::MessageType::kHello)
      .U32(magic)
      .U32(version)
      .Str(kTestClientNonce)
      .Finish();
}

class RawStoreSocket {
 public:
  explicit RawStoreSocket(uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  }
  ~RawStoreSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawStoreSocket(const RawStoreSocket&) = delete;
  RawStoreSocket& operator=(const RawStoreSocket&) = delete;

  bool connected() const { return connected_; }

  // Sends all of `bytes` (false when the server closed or reset).
  bool Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t count = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (count <= 0) return false;
      sent += static_cast<size_t>(count);
    }
    return true;
  }

  // Reads whatever arrives until the server closes the connection or
  // `timeout` passes; `closed()` tells which.
  std::string ReadUntilClosed(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::string received;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd descriptor{.fd = fd_, .events = POLLIN, .revents = 0};
      if (::poll(&descriptor, 1, 20) <= 0) continue;
      char buffer[4096];
      const ssize_t count = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (count <= 0) {
        closed_ = true;
        return received;
      }
      received.append(buffer, static_cast<size_t>(count));
    }
    return received;
  }

  // Reads one frame's body (empty when none came within `timeout`).
  std::string ReadFrame(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    std::string header = ReadExactly(wire::kFrameHeaderBytes, timeout);
    if (header.size() < wire::kFrameHeaderBytes) return "";
    return ReadExactly(wire::DecodeU32(header.data()), timeout);
  }

  // Completes the hello, proving `token` when the server challenges; returns
  // whether the server accepted.
  bool Greet(const std::string& token = {}) {
    Send(HelloFrame());
    std::string reply = ReadFrame();
    if (!reply.empty() &&
        static_cast<wire::MessageType>(reply[0]) == wire::MessageType::kChallenge) {
      wire::BodyReader reader(reply);
      uint8_t type = 0;
      std::string server_nonce;
      reader.U8(&type);
      reader.Str(&server_nonce);
      Send(wire::FrameWriter(wire::MessageType::kProof)
               .Str(auth::ProofFor(auth::Side::kClient, token, kTestClientNonce, server_nonce))
               .Finish());
      reply = ReadFrame();
    }
    return !reply.empty() &&
           static_cast<wire::MessageType>(reply[0]) == wire::MessageType::kHelloOk;
  }

  bool closed() const { return closed_; }
  int fd() const { return fd_; }

 private:
  std::string ReadExactly(size_t count, std::chrono::milliseconds timeout) {
    std::string bytes;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (bytes.size() < count && std::chrono::steady_clock::now() < deadline) {
      pollfd descriptor{.fd = fd_, .events = POLLIN, .revents = 0};
      if (::poll(&descriptor, 1, 20) <= 0) continue;
      char buffer[4096];
      const ssize_t got = ::recv(fd_, buffer, std::min(sizeof(buffer), count - bytes.size()), 0);
      if (got <= 0) {
        closed_ = true;
        break;
      }
      bytes.append(buffer, static_cast<size_t>(got));
    }
    return bytes;
  }

  int fd_;
  bool connected_ = false;
  bool closed_ = false;
};

// The text of the kError frame at the start of `bytes` (a whole frame, header
// included), or "" if it is not one.
inline std::string ErrorFrameText(const std::string& bytes) {
  if (bytes.size() < wire::kFrameHeaderBytes + 1) return "";
  wire::BodyReader reader(std::string_view(bytes).substr(wire::kFrameHeaderBytes));
  uint8_t type = 0;
  std::string text;
  if (!reader.U8(&type) || static_cast<wire::MessageType>(type) != wire::MessageType::kError ||
      !reader.Str(&text)) {
    return "";
  }
  return text;
}

}  // namespace infini::rendezvous::testing
