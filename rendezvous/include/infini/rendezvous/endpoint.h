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

}  // namespace infini::rendezvous
