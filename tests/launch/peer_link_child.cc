// A rank whose collective is one TCP connection to every other rank, without
// parallel/ (launch_ux_test: how a lost node is named): it listens on
// 127.0.0.1, publishes its port in the ranks' store, connects to every
// higher rank and accepts every lower one, writes <dir>/<RANK>.linked, then
// waits. When a peer's connection closes (its node was lost) it prints
// "rank R: all_reduce failed: Connection closed by peer rank P" and exits 1,
// as a rank of a broken collective does. Exit 2 with one line on a setup error.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "child_flags.h"

namespace {

using infini::launch::testing::Env;
using infini::launch::testing::Flag;
using infini::launch::testing::RankStore;

int Listen(uint16_t* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      listen(fd, 64) != 0 || getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw std::runtime_error("cannot listen on 127.0.0.1");
  }
  *port = ntohs(address.sin_port);
  return fd;
}

int Connect(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(port);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    throw std::runtime_error("cannot connect to 127.0.0.1:" + std::to_string(port));
  }
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = Flag(argc, argv, "dir", ".");
  const int rank = std::atoi(Env("RANK").c_str());
  const int world_size = std::atoi(Env("WORLD_SIZE").c_str());
  const std::chrono::seconds timeout(60);
  std::vector<int> peers(static_cast<size_t>(world_size), -1);
  try {
    const auto store = RankStore("/peer_link", timeout);
    uint16_t port = 0;
    const int listener = Listen(&port);
    store->Set("port/" + std::to_string(rank), std::to_string(port));
    for (int peer = rank + 1; peer < world_size; ++peer) {
      const std::string key = "port/" + std::to_string(peer);
      store->Wait({key});
      const int fd = Connect(static_cast<uint16_t>(std::atoi(store->Get(key).c_str())));
      const char id = static_cast<char>(rank);
      if (write(fd, &id, 1) != 1) throw std::runtime_error("cannot greet a peer");
      peers[static_cast<size_t>(peer)] = fd;
    }
    for (int accepted = 0; accepted < rank; ++accepted) {
      const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      char id = 0;
      if (fd < 0 || read(fd, &id, 1) != 1 || id < 0 || id >= rank) {
        throw std::runtime_error("a bad greeting from a peer");
      }
      peers[static_cast<size_t>(id)] = fd;
    }
    close(listener);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "rank %d: setup failed: %s\n", rank, error.what());
    return 2;
  }
  std::ofstream(dir + "/" + std::to_string(rank) + ".linked") << "1\n";
  std::vector<pollfd> entries;
  for (int fd : peers) {
    if (fd >= 0) entries.push_back({fd, POLLIN, 0});
  }
  while (poll(entries.data(), entries.size(), -1) >= 0) {
    for (size_t peer = 0; peer < peers.size(); ++peer) {
      for (const pollfd& entry : entries) {
        if (entry.fd != peers[peer] || entry.revents == 0) continue;
        std::fprintf(stderr, "rank %d: all_reduce failed: Connection closed by peer rank %zu\n",
                     rank, peer);
        return 1;
      }
    }
  }
  return 1;
}
