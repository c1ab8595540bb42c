// HOST[:PORT] as users write it on command lines and in environment variables
// (--rdzv_endpoint, INFINI_STORE_ADDR).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace infini::rendezvous {

struct Endpoint {
  std::string host;  // a name, an IPv4 address or an IPv6 address without brackets
  uint16_t port = 0;
};

// Accepts "host", "host:port", "[v6addr]", "[v6addr]:port" and a bare IPv6
// address ("::1"); `default_port` is used when the text has none. Throws
// std::invalid_argument naming the text and what was expected when the host is
// missing or the port is not a number in 0..65535.
Endpoint ParseEndpoint(std::string_view text, uint16_t default_port);

// "host:port", or "[host]:port" when the host is an IPv6 address, so that
// ParseEndpoint(FormatEndpoint(e), any) == e.
std::string FormatEndpoint(const Endpoint& endpoint);

// The address a store named by `host` (MASTER_ADDR) listens on when this
// process hosts it, so that nothing else answers on the port.
struct ListenChoice {
  std::string address;  // numeric, or "0.0.0.0" (every interface)
  // Why every interface when `host` did not ask for it, e.g. "is not an
  // address of this host"; "" otherwise. Callers warn with it, naming the
  // variable (the library prints nothing).
  std::string fallback_reason;
};

// `host` itself when it is a numeric address of this machine (loopback
// included: every client connects to that number). A name: the first of its
// resolutions that is an address of this machine, passing over loopback
// ones unless every client is on this host (`all_clients_local`), since
// other hosts may resolve the name to another address of this one (Debian's
// /etc/hosts maps the host name to 127.0.1.1 here). When there is none:
// every interface, "0.0.0.0", with the reason.
ListenChoice ChooseListenAddress(const std::string& host, bool all_clients_local);
// ChooseListenAddress(host, all_clients_local).address.
std::string ListenAddressFor(const std::string& host, bool all_clients_local);

}  // namespace infini::rendezvous
