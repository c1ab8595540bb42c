// A loopback TCP port that no one listens on, for tests that must start a
// server on a known port later (a second launcher's --rdzv_endpoint, a client
// that connects before its server exists).
//
// Binding port 0 and closing would hand out a port from Linux's ephemeral
// range (32768-60999 by default), which every concurrently running test's
// bind-to-0 and outgoing connection draw from: another test could take it
// before it is used. Ports below that range are never handed out
// automatically, so only a deliberate bind could collide.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <stdexcept>

namespace infini::testing {

inline uint16_t UnusedPortBelowEphemeralRange() {
  std::mt19937 random(std::random_device{}());
  std::uniform_int_distribution<int> pick(20000, 32000);
  for (int attempt = 0; attempt < 200; ++attempt) {
    const auto port = static_cast<uint16_t>(pick(random));
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    const bool unused = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    close(fd);
    if (unused) return port;
  }
  throw std::runtime_error("no unused loopback port in [20000, 32000]");
}

}  // namespace infini::testing
