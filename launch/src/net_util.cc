#include "infini/launch/net_util.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "infini/launch/options.h"

namespace infini::launch {
namespace {

struct AddressList {
  addrinfo* head = nullptr;
  ~AddressList() {
    if (head) freeaddrinfo(head);
  }
};

bool Resolve(const std::string& host, bool passive, AddressList* list) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  return getaddrinfo(host.c_str(), "0", &hints, &list->head) == 0;
}

}  // namespace

uint16_t PickFreePort(const std::string& host) {
  AddressList addresses;
  if (!Resolve(host, true, &addresses)) throw LaunchError("cannot resolve '" + OneLine(host) + "'");
  for (addrinfo* address = addresses.head; address; address = address->ai_next) {
    int fd = socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    sockaddr_storage bound{};
    socklen_t length = sizeof(bound);
    bool ok = bind(fd, address->ai_addr, address->ai_addrlen) == 0 &&
              getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) == 0;
    close(fd);
    if (!ok) continue;
    if (bound.ss_family == AF_INET) {
      return ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    }
    return ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  }
  throw LaunchError("cannot find a free TCP port on '" + OneLine(host) + "': " + strerror(errno));
}

bool IsLocalHost(const std::string& host) {
  AddressList addresses;
  if (!Resolve(host, false, &addresses)) return false;
  for (addrinfo* address = addresses.head; address; address = address->ai_next) {
    int fd = socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    // Port 0 in the resolved address: binding succeeds only on a local address.
    bool local = bind(fd, address->ai_addr, address->ai_addrlen) == 0;
    close(fd);
    if (local) return true;
  }
  return false;
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

}  // namespace infini::launch
