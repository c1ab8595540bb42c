#include "network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "errors.h"
#include "infini/common/launch_env.h"

namespace infini::gloo_backend {
namespace {

constexpr const char* kInterfaceVariable = "GLOO_SOCKET_IFNAME";
// Where the run's master is, in the order they are consulted.
constexpr const char* kMasterVariables[] = {env::torchrun::kMasterAddr, env::kStoreAddr};

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

// The interface that holds `numeric`, or "" when none does.
std::string InterfaceHolding(const std::string& numeric) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* entry = list; entry != nullptr && name.empty(); entry = entry->ifa_next) {
    if (entry->ifa_name == nullptr || entry->ifa_addr == nullptr) continue;
    const int family = entry->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    if (NumericHost(entry->ifa_addr) == numeric) name = entry->ifa_name;
  }
  freeifaddrs(list);
  return name;
}

// "[::1]" -> "::1": a bracketed IPv6 literal as endpoints write it.
std::string WithoutBrackets(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    return host.substr(1, host.size() - 2);
  }
  return host;
}

// The addresses `host` resolves to, IPv4 first (what most clusters route).
std::vector<std::string> ResolvedAddresses(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* results = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &results) != 0 || results == nullptr) return {};
  std::vector<std::string> ipv4;
  std::vector<std::string> ipv6;
  for (addrinfo* result = results; result != nullptr; result = result->ai_next) {
    const std::string numeric = NumericHost(result->ai_addr);
    if (numeric.empty()) continue;
    (result->ai_family == AF_INET ? ipv4 : ipv6).push_back(numeric);
  }
  freeaddrinfo(results);
  ipv4.insert(ipv4.end(), ipv6.begin(), ipv6.end());
  return ipv4;
}

// The local address of a UDP socket connected to `numeric`: connecting a
// datagram socket sends nothing but makes the kernel choose the route.
std::optional<std::string> LocalAddressTowards(const std::string& numeric) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* results = nullptr;
  // Port 9 (discard): any nonzero port would do, nothing is sent.
  if (getaddrinfo(numeric.c_str(), "9", &hints, &results) != 0 || results == nullptr) {
    return std::nullopt;
  }
  std::optional<std::string> local;
  const int fd = socket(results->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    sockaddr_storage name{};
    socklen_t length = sizeof(name);
    if (connect(fd, results->ai_addr, results->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&name), &length) == 0) {
      local = NumericHost(reinterpret_cast<sockaddr*>(&name));
    }
    close(fd);
  }
  freeaddrinfo(results);
  if (local.has_value() && local->empty()) return std::nullopt;
  return local;
}

bool IsNumericAddress(const std::string& host) {
  in6_addr buffer{};
  return inet_pton(AF_INET, host.c_str(), &buffer) == 1 ||
         inet_pton(AF_INET6, host.c_str(), &buffer) == 1;
}

struct MasterAddress {
  std::string variable;  // "MASTER_ADDR"
  std::string value;     // as set, brackets removed
};

std::optional<MasterAddress> MasterFromEnvironment() {
  for (const char* variable : kMasterVariables) {
    const char* value = std::getenv(variable);
    if (value != nullptr && value[0] != '\0')
      return MasterAddress{variable, WithoutBrackets(value)};
  }
  return std::nullopt;
}

std::optional<int64_t> IntegerVariable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || value[0] == '\0') return std::nullopt;
  char* end = nullptr;
  const long long number = std::strtoll(value, &end, 10);
  if (*end != '\0') return std::nullopt;
  return number;
}

// Why this process's peers are on other hosts even though the master's name
// resolves to a loopback address here ("" when nothing says so): the
// launcher's, Open MPI's or Slurm's sizes count more ranks than this node's.
std::string EvidenceOfOtherHosts() {
  const struct {
    const char* world;
    const char* local;
  } kSizes[] = {{env::torchrun::kWorldSize, env::torchrun::kLocalWorldSize},
                {"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}};
  for (const auto& sizes : kSizes) {
    const auto world = IntegerVariable(sizes.world);
    const auto local = IntegerVariable(sizes.local);
    if (world && local && *world > *local) {
      return std::string(sizes.world) + "=" + std::to_string(*world) + " > " + sizes.local + "=" +
             std::to_string(*local);
    }
  }
  const auto nodes = IntegerVariable("SLURM_NNODES");
  if (nodes && *nodes > 1) return "SLURM_NNODES=" + std::to_string(*nodes);
  return "";
}

[[noreturn]] void RefuseLoopback(const std::string& chosen, const MasterAddress& master,
                                 const std::string& why) {
  throw PluginError(infiniCclInvalidUsage,
                    "gloo would use the loopback address " + chosen + " (this host's route to " +
                        master.variable + "=" + master.value + "), but " + why +
                        ": peers on other hosts could not connect to it; set " +
                        kInterfaceVariable +
                        " to the interface that reaches them (e.g. GLOO_SOCKET_IFNAME=eth0), or "
                        "set " +
                        master.variable + " to an address of a non-loopback interface");
}

// The address to use when nothing names an interface: the route to the
// master when one is known, else the host name's address.
HostAddress AddressTowardsMaster(const MasterAddress& master) {
  const std::vector<std::string> targets = ResolvedAddresses(master.value);
  // An unresolvable master fails later, where the store connects, naming it.
  if (targets.empty()) return AddressOfHostName();
  std::optional<HostAddress> chosen;
  for (const std::string& target : targets) {
    chosen = RouteSourceAddress(target);
    if (chosen.has_value()) break;
  }
  if (!chosen.has_value()) chosen = AddressOfHostName();
  if (!IsLoopbackAddress(chosen->numeric)) return *chosen;
  bool master_is_loopback = true;
  for (const std::string& target : targets) master_is_loopback &= IsLoopbackAddress(target);
  if (!master_is_loopback) {
    RefuseLoopback(chosen->numeric, master, master.variable + " is not a loopback address");
  }
  // A loopback literal or "localhost" is a deliberate choice (several nodes
  // on one machine); a host name that resolves to loopback is the classic
  // /etc/hosts trap when the run spans hosts.
  const bool named_by_host_name =
      !IsNumericAddress(master.value) && master.value.rfind("localhost", 0) != 0;
  const std::string evidence = named_by_host_name ? EvidenceOfOtherHosts() : "";
  if (!evidence.empty()) {
    RefuseLoopback(chosen->numeric, master,
                   master.variable + " resolves to loopback here while the run spans hosts (" +
                       evidence + ")");
  }
  return *chosen;
}

}  // namespace

bool IsLoopbackAddress(const std::string& numeric) {
  in_addr ipv4{};
  if (inet_pton(AF_INET, numeric.c_str(), &ipv4) == 1) return (ntohl(ipv4.s_addr) >> 24) == 127;
  in6_addr ipv6{};
  if (inet_pton(AF_INET6, numeric.c_str(), &ipv6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&ipv6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&ipv6) && ipv6.s6_addr[12] == 127;
}

std::optional<HostAddress> RouteSourceAddress(const std::string& target) {
  const std::vector<std::string> addresses = ResolvedAddresses(WithoutBrackets(target));
  for (const std::string& address : addresses) {
    const std::optional<std::string> local = LocalAddressTowards(address);
    if (!local.has_value()) continue;
    return HostAddress{InterfaceHolding(*local), *local, local->find(':') != std::string::npos};
  }
  return std::nullopt;
}

HostAddress ChooseHostAddress(const std::string& interface_name, const std::string& source) {
  if (!interface_name.empty()) return AddressOfInterface(interface_name, source);
  const char* value = std::getenv(kInterfaceVariable);
  if (value != nullptr && value[0] != '\0') {
    std::string name(value);
    name = name.substr(0, name.find(','));
    return AddressOfInterface(name, kInterfaceVariable);
  }
  if (const auto master = MasterFromEnvironment()) return AddressTowardsMaster(*master);
  return AddressOfHostName();
}

}  // namespace infini::gloo_backend
