#include "infini/rendezvous/run_token.h"

#include <cstdlib>

#include "hello_auth.h"

namespace infini::rendezvous {

std::string RunTokenFromEnvironment() {
  const char* token = std::getenv(env::kRunToken);
  return token == nullptr ? std::string() : std::string(token);
}

std::string NewRunToken() {
  constexpr size_t kTokenBytes = 32;
  const std::string bytes = auth::RandomBytes(kTokenBytes);
  static constexpr char kHexDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * bytes.size());
  for (const char byte : bytes) {
    const auto value = static_cast<unsigned char>(byte);
    hex.push_back(kHexDigits[value >> 4]);
    hex.push_back(kHexDigits[value & 0xF]);
  }
  return hex;
}

}  // namespace infini::rendezvous
