// libFuzzer harness: the store server itself, over loopback sockets, under
// concurrent large messages, clients that stop or leave halfway, and floods
// of strangers (bounded: 8 connections of the program, 64 strangers, 64 KiB
// messages; loopback only).
//
// One server for the whole run, with small caps (64 KiB messages, a 256 KiB
// budget, 8 unauthenticated connections per peer). Input: a program of
// operations, a few bytes each: open, greet (the token, a ticket, a wrong
// token), announce a large Set and send part of its value, send small
// requests, read replies, close, open strangers. After each program every
// connection is closed, and the store must come back whole: a client holding
// the token connects and stores and reads a largest value within 5 s, and
// nothing stays charged to the budget, waits, or is left open.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "hello_auth.h"
#include "infini/rendezvous/tcp_store.h"
#include "wire_protocol.h"

namespace {

using infini::rendezvous::StoreError;
using infini::rendezvous::TcpStoreClient;
using infini::rendezvous::TcpStoreServer;
using infini::rendezvous::TcpStoreServerOptions;
using infini::rendezvous::wire::FrameWriter;
using infini::rendezvous::wire::MessageType;
namespace auth = infini::rendezvous::auth;
namespace wire = infini::rendezvous::wire;
using std::chrono::milliseconds;

constexpr char kToken[] = "store-server-fuzz-token";
constexpr size_t kMaxMessage = size_t{64} << 10;
constexpr int kSlots = 8;
constexpr size_t kMaxStrangers = 64;

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "store_server_fuzz: %s\n", what);
  std::abort();
}

TcpStoreServer& Server() {
  static const std::unique_ptr<TcpStoreServer> server = [] {
    TcpStoreServerOptions options;
    options.host = "127.0.0.1";
    options.token = kToken;
    options.max_message_bytes = kMaxMessage;
    options.max_buffered_bytes = 4 * kMaxMessage;
    options.max_stored_bytes = size_t{2} << 20;
    options.max_unauthenticated_per_peer = 8;
    options.max_unauthenticated_connections = 16;
    options.hello_timeout = milliseconds(2000);
    options.stalled_request_timeout = milliseconds(500);
    return TcpStoreServer::Start(options);
  }();
  return *server;
}

class Program {
 public:
  Program(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool Done() const { return position_ >= size_; }
  uint8_t Byte() { return position_ < size_ ? data_[position_++] : 0; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t position_ = 0;
};

// A non-blocking socket to the server; sends what the kernel takes.
class Socket {
 public:
  explicit Socket(uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
    ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) | O_NONBLOCK);
  }
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  size_t Send(const std::string& bytes) {
    if (fd_ < 0) return 0;
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t count = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (count <= 0) break;
      sent += static_cast<size_t>(count);
    }
    return sent;
  }

  // Reads what is there, waiting up to `wait` for the first bytes.
  std::string Drain(milliseconds wait) {
    std::string received;
    if (fd_ < 0) return received;
    pollfd descriptor{.fd = fd_, .events = POLLIN, .revents = 0};
    if (::poll(&descriptor, 1, static_cast<int>(wait.count())) <= 0) return received;
    char buffer[65536];
    for (;;) {
      const ssize_t count = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (count <= 0) break;
      received.append(buffer, static_cast<size_t>(count));
    }
    return received;
  }

 private:
  int fd_;
};

struct Slot {
  std::unique_ptr<Socket> socket;
  size_t body_left = 0;  // bytes of an announced value not sent yet
};

std::string Hello(const std::string& nonce) {
  return FrameWriter(MessageType::kHello).U32(wire::kMagic).U32(wire::kVersion).Str(nonce).Finish();
}

// The hello, then the proof of `token` if the server's challenge came.
void Greet(Socket& socket, bool ticket, const std::string& token) {
  const std::string nonce = ticket ? auth::NonceWithTicket(kToken) : std::string(32, 'n');
  socket.Send(Hello(nonce));
  const std::string reply = socket.Drain(milliseconds(100));
  if (reply.size() < wire::kFrameHeaderBytes + 1 ||
      static_cast<MessageType>(reply[wire::kFrameHeaderBytes]) != MessageType::kChallenge) {
    return;
  }
  wire::BodyReader reader(std::string_view(reply).substr(wire::kFrameHeaderBytes));
  uint8_t type = 0;
  std::string server_nonce;
  if (!reader.U8(&type) || !reader.Str(&server_nonce)) return;
  socket.Send(FrameWriter(MessageType::kProof)
                  .Str(auth::ProofFor(auth::Side::kClient, token, nonce, server_nonce))
                  .Finish());
  socket.Drain(milliseconds(20));
}

void RunProgram(Program& program, uint16_t port) {
  Slot slots[kSlots];
  std::deque<std::unique_ptr<Socket>> strangers;
  const std::string filler(kMaxMessage, 'f');
  while (!program.Done()) {
    const uint8_t op = program.Byte();
    Slot& slot = slots[program.Byte() % kSlots];
    const uint8_t argument = program.Byte();
    switch (op % 8) {
      case 0:
        slot.socket = std::make_unique<Socket>(port);
        slot.body_left = 0;
        break;
      case 1:
        if (slot.socket) {
          Greet(*slot.socket, argument % 3 == 1, argument % 3 == 2 ? "wrong" : kToken);
        }
        break;
      case 2: {  // announce a Set of up to the largest message
        if (!slot.socket) break;
        const size_t value = (size_t{argument} * 257 + program.Byte()) % (kMaxMessage - 32);
        slot.socket->Send(FrameWriter(MessageType::kSet)
                              .Str("big" + std::to_string(argument % 4))
                              .U32(static_cast<uint32_t>(value))
                              .Finish(value));
        slot.body_left = value;
        break;
      }
      case 3: {  // part of the value
        if (!slot.socket) break;
        const size_t count = std::min(slot.body_left, size_t{argument} * 512 + 1);
        slot.body_left -= slot.socket->Send(filler.substr(0, count));
        break;
      }
      case 4:
        slot.socket.reset();
        break;
      case 5: {  // a small request
        if (!slot.socket) break;
        const std::string key = "k" + std::to_string(argument % 4);
        std::string frame;
        switch (argument / 4 % 4) {
          case 0:
            frame =
                FrameWriter(MessageType::kSet).Str(key).Str(std::string(argument, 'v')).Finish();
            break;
          case 1:
            frame = FrameWriter(MessageType::kGet).Str(key).I64(0).Finish();
            break;
          case 2:
            frame = FrameWriter(MessageType::kWait).U32(1).Str(key).I64(10).Finish();
            break;
          default:
            frame = FrameWriter(MessageType::kNumKeys).Finish();
            break;
        }
        slot.socket->Send(frame);
        break;
      }
      case 6:  // strangers arrive; half say hello and stop there
        for (int i = 0; i < argument % 16; ++i) {
          if (strangers.size() >= kMaxStrangers) strangers.pop_front();
          strangers.push_back(std::make_unique<Socket>(port));
          if (i % 2 == 0) strangers.back()->Send(Hello(std::string(32, 's')));
        }
        break;
      default:
        if (slot.socket) slot.socket->Drain(milliseconds(argument % 8));
        break;
    }
  }
}

bool Eventually(TcpStoreServer& server, milliseconds bound) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    if (server.num_connections() == 0 && server.charged_bytes() == 0 && server.num_waiters() == 0) {
      return true;
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
  std::fprintf(stderr, "store_server_fuzz: %zu connections, %zu bytes charged, %zu waiters\n",
               server.num_connections(), server.charged_bytes(), server.num_waiters());
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  TcpStoreServer& server = Server();
  Program program(data, size);
  RunProgram(program, server.port());  // every socket is closed as it returns
  Require(Eventually(server, milliseconds(5000)),
          "connections, charged bytes or waiters left after every client closed");
  Require(server.stored_bytes() <= size_t{2} << 20, "stored beyond max_stored_bytes");
  try {
    auto client = TcpStoreClient::Connect("127.0.0.1", server.port(), milliseconds(5000), kToken);
    client->set_timeout(milliseconds(5000));
    const std::string largest(kMaxMessage - 64, 'L');
    client->Set("check", largest);
    Require(client->Get("check") == largest, "the check value came back changed");
    client->DeleteKey("check");
  } catch (const StoreError& error) {
    std::fprintf(stderr, "store_server_fuzz: the store did not serve a client: %s\n", error.what());
    std::abort();
  }
  Require(Eventually(server, milliseconds(5000)), "the check client's connection stayed");
  return 0;
}
