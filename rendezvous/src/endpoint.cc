#include "infini/rendezvous/endpoint.h"

#include <charconv>
#include <stdexcept>

namespace infini::rendezvous {
namespace {

[[noreturn]] void ThrowInvalid(std::string_view text, std::string_view problem) {
  throw std::invalid_argument("invalid endpoint '" + std::string(text) +
                              "': " + std::string(problem) +
                              "; expected HOST, HOST:PORT or [IPV6]:PORT with PORT in 0..65535");
}

uint16_t ParsePort(std::string_view text, std::string_view port_text) {
  if (port_text.empty()) ThrowInvalid(text, "the port is empty");
  unsigned value = 0;
  const char* end = port_text.data() + port_text.size();
  const auto [stop, error] = std::from_chars(port_text.data(), end, value);
  if (error == std::errc::result_out_of_range ||
      (error == std::errc() && stop == end && value > 65535)) {
    ThrowInvalid(text, "port " + std::string(port_text) + " is out of range");
  }
  if (error != std::errc() || stop != end) {
    ThrowInvalid(text, "port '" + std::string(port_text) + "' is not a number");
  }
  return static_cast<uint16_t>(value);
}

}  // namespace

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
