// Small network helpers of the launcher.
#pragma once

#include <cstdint>
#include <string>

namespace infini::launch {

// A TCP port that is free now on `host` (bind to port 0, read it, close).
// Throws LaunchError.
uint16_t PickFreePort(const std::string& host = "0.0.0.0");

// Whether `host` names an address of this machine (a socket can bind to it).
bool IsLocalHost(const std::string& host);

std::string HostName();

}  // namespace infini::launch
