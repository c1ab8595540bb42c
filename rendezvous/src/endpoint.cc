#include "infini/rendezvous/endpoint.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <charconv>
#include <stdexcept>

#include "infini/common/one_line.h"

namespace infini::rendezvous {
namespace {

[[noreturn]] void ThrowInvalid(std::string_view text, std::string_view problem) {
  throw std::invalid_argument("invalid endpoint '" + OneLine(text) + "': " + std::string(problem) +
                              "; expected HOST, HOST:PORT or [IPV6]:PORT with PORT in 0..65535");
}

uint16_t ParsePort(std::string_view text, std::string_view port_text) {
  if (port_text.empty()) ThrowInvalid(text, "the port is empty");
  unsigned value = 0;
  const char* end = port_text.data() + port_text.size();
  const auto [stop, error] = std::from_chars(port_text.data(), end, value);
  if (error == std::errc::result_out_of_range ||
      (error == std::errc() && stop == end && value > 65535)) {
    ThrowInvalid(text, "port " + OneLine(port_text) + " is out of range");
  }
  if (error != std::errc() || stop != end) {
    ThrowInvalid(text, "port '" + OneLine(port_text) + "' is not a number");
  }
  return static_cast<uint16_t>(value);
}

bool IsLoopback(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    return (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
  }
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
  return IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
}

// Whether a socket can bind `address` (resolved without a service, so its
// port is 0): this machine has it.
bool CanBind(const addrinfo& address) {
  const int fd = ::socket(address.ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool bound = ::bind(fd, address.ai_addr, address.ai_addrlen) == 0;
  ::close(fd);
  return bound;
}

}  // namespace

ListenChoice ChooseListenAddress(const std::string& host, bool all_clients_local) {
  ListenChoice choice{.address = "0.0.0.0", .fallback_reason = ""};
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* resolved = nullptr;
  const bool numeric_host = ::getaddrinfo(host.c_str(), nullptr, &hints, &resolved) == 0;
  if (!numeric_host) {
    hints.ai_flags = 0;
    const int failed = ::getaddrinfo(host.c_str(), nullptr, &hints, &resolved);
    if (failed != 0) {
      choice.fallback_reason =
          std::string("cannot be resolved here (") + gai_strerror(failed) + ")";
      return choice;
    }
  }
  // Every host connects to a number as it is written, so a numeric address
  // of this machine is listened on alone, loopback included. A name may
  // resolve on other hosts to another address of this one (Debian's
  // /etc/hosts maps the host name to 127.0.1.1 here): unless every client is
  // on this host, a name's loopback resolutions are passed over.
  std::string found, loopback_found;
  for (const addrinfo* address = resolved; address != nullptr; address = address->ai_next) {
    if (address->ai_family != AF_INET && address->ai_family != AF_INET6) continue;
    char numeric[NI_MAXHOST];
    if (::getnameinfo(address->ai_addr, address->ai_addrlen, numeric, sizeof(numeric), nullptr, 0,
                      NI_NUMERICHOST) != 0) {
      continue;
    }
    if (found.empty()) found = numeric;
    if (!numeric_host && !all_clients_local && IsLoopback(address->ai_addr)) {
      if (loopback_found.empty()) loopback_found = numeric;
      continue;
    }
    if (!CanBind(*address)) continue;
    choice.address = numeric;
    break;
  }
  ::freeaddrinfo(resolved);
  if (choice.address != "0.0.0.0" || host == "0.0.0.0") return choice;
  if (!loopback_found.empty()) {
    choice.fallback_reason = "resolves here only to loopback (" + loopback_found +
                             "), which the other hosts of the run cannot reach";
  } else if (numeric_host) {
    choice.fallback_reason = "is not an address of this host";
  } else {
    choice.fallback_reason = "resolves to no address of this host (" + found + ")";
  }
  return choice;
}

std::string ListenAddressFor(const std::string& host, bool all_clients_local) {
  return ChooseListenAddress(host, all_clients_local).address;
}

Endpoint ParseEndpoint(std::string_view text, uint16_t default_port) {
  if (text.empty()) ThrowInvalid(text, "it is empty");
  Endpoint endpoint{.host = "", .port = default_port};
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) ThrowInvalid(text, "'[' without a matching ']'");
    endpoint.host = std::string(text.substr(1, close - 1));
    const std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') ThrowInvalid(text, "expected ':' after ']'");
      endpoint.port = ParsePort(text, rest.substr(1));
    }
  } else if (const size_t colon = text.find(':'); colon == std::string_view::npos) {
    endpoint.host = std::string(text);
  } else if (text.find(':', colon + 1) != std::string_view::npos) {
    endpoint.host = std::string(text);  // a bare IPv6 address: it cannot carry a port
  } else {
    endpoint.host = std::string(text.substr(0, colon));
    endpoint.port = ParsePort(text, text.substr(colon + 1));
  }
  if (endpoint.host.empty()) ThrowInvalid(text, "the host is missing");
  return endpoint;
}

std::string FormatEndpoint(const Endpoint& endpoint) {
  const bool is_ipv6 = endpoint.host.find(':') != std::string::npos;
  return (is_ipv6 ? "[" + endpoint.host + "]" : endpoint.host) + ":" +
         std::to_string(endpoint.port);
}

}  // namespace infini::rendezvous
