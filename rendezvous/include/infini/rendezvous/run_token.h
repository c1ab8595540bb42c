// The run's secret (stub until the store branch lands).
#pragma once

#include <cstdlib>
#include <random>
#include <string>

namespace infini::rendezvous {

// 32 random hex digits.
inline std::string NewRunToken() {
  std::random_device random;
  std::string token;
  const char digits[] = "0123456789abcdef";
  for (int i = 0; i < 32; ++i) token += digits[random() % 16];
  return token;
}

// INFINI_RUN_TOKEN, or empty.
inline std::string RunTokenFromEnvironment() {
  const char* token = std::getenv("INFINI_RUN_TOKEN");
  return token ? token : "";
}

}  // namespace infini::rendezvous
