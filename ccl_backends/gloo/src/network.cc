#include "network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>

#include "errors.h"

namespace infini::gloo_backend {
namespace {

constexpr const char* kInterfaceVariable = "GLOO_SOCKET_IFNAME";

std::string NumericHost(const sockaddr* address) {
  char text[NI_MAXHOST] = {};
  const socklen_t length =
      address->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (getnameinfo(address, length, text, sizeof(text), nullptr, 0, NI_NUMERICHOST) != 0) {
    return "";
  }
  return text;
}

// `source` names where the name came from, for messages ("GLOO_SOCKET_IFNAME").
HostAddress AddressOfInterface(const std::string& name, const std::string& source) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    throw PluginError(infiniCclSystemError,
                      "getifaddrs failed while looking up " + source + "=" + name);
  }
  HostAddress ipv4;
  HostAddress ipv6;
  std::set<std::string> known;
  for (ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_name == nullptr) continue;
    known.insert(entry->ifa_name);
    if (name != entry->ifa_name || entry->ifa_addr == nullptr) continue;
    const int family = entry->ifa_addr->sa_family;
    if (family == AF_INET && ipv4.numeric.empty()) {
      ipv4 = {name, NumericHost(entry->ifa_addr), false};
    } else if (family == AF_INET6 && ipv6.numeric.empty()) {
      ipv6 = {name, NumericHost(entry->ifa_addr), true};
    }
  }
  freeifaddrs(list);
  if (!ipv4.numeric.empty()) return ipv4;
  if (!ipv6.numeric.empty()) return ipv6;
  std::string names;
  for (const std::string& known_name : known) names += (names.empty() ? "" : ", ") + known_name;
  throw PluginError(infiniCclInvalidUsage,
                    source + "=" + name +
                        ": no network interface of that name with an IP address on this host; "
                        "expected one of: " +
                        names);
}

// Whether a socket can be bound to `numeric` here (a host name may resolve
// to an address of another machine in some container setups).
bool CanBind(const addrinfo& candidate) {
  const int fd = socket(candidate.ai_family, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const bool bound = bind(fd, candidate.ai_addr, candidate.ai_addrlen) == 0;
  close(fd);
  return bound;
}

HostAddress AddressOfHostName() {
  const HostAddress loopback{"", "127.0.0.1", false};
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return loopback;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* results = nullptr;
  if (getaddrinfo(name, nullptr, &hints, &results) != 0 || results == nullptr) return loopback;
  HostAddress ipv6;
  HostAddress ipv4;
  for (addrinfo* result = results; result != nullptr; result = result->ai_next) {
    if (!CanBind(*result)) continue;
    const std::string numeric = NumericHost(result->ai_addr);
    if (result->ai_family == AF_INET && ipv4.numeric.empty()) ipv4 = {"", numeric, false};
    if (result->ai_family == AF_INET6 && ipv6.numeric.empty()) ipv6 = {"", numeric, true};
  }
  freeaddrinfo(results);
  // IPv4 first: what most clusters route.
  if (!ipv4.numeric.empty()) return ipv4;
  if (!ipv6.numeric.empty()) return ipv6;
  return loopback;
}

}  // namespace

HostAddress ChooseHostAddress(const std::string& interface_name, const std::string& source) {
  if (!interface_name.empty()) return AddressOfInterface(interface_name, source);
  const char* value = std::getenv(kInterfaceVariable);
  if (value != nullptr && value[0] != '\0') {
    std::string name(value);
    name = name.substr(0, name.find(','));
    return AddressOfInterface(name, kInterfaceVariable);
  }
  return AddressOfHostName();
}

}  // namespace infini::gloo_backend
