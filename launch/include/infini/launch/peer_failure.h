// What one launcher tells the others of a failure: its own header, so that
// the key scheme (rendezvous_protocol.h) reads it without the top floor
// (node_rendezvous.h).
#pragma once

#include <string>

namespace infini::launch {

// What another node published when it failed, or what the host published
// about a node that stopped heartbeating.
struct PeerFailure {
  int node_rank = 0;
  int exit_status = 1;
  std::string message;
};

}  // namespace infini::launch
