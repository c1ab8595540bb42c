// The cryptography of the hello: random challenges, and the proof that a
// client knows the run token without sending it (HMAC-SHA256 from OpenSSL's
// libcrypto, compared in constant time).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace infini::rendezvous::auth {

// `count` bytes from getrandom(2). Throws StoreError when the kernel refuses.
std::string RandomBytes(size_t count);

// Which side of the hello a proof comes from.
enum class Side { kClient, kServer };

// HMAC-SHA256(token, side's context || client nonce || server nonce): what
// `side` sends to prove the token for this connection's two nonces.
std::string ProofFor(Side side, std::string_view token, std::string_view client_nonce,
                     std::string_view server_nonce);

// Whether `proof` is ProofFor(side, token, client_nonce, server_nonce); its
// time does not depend on where the bytes differ.
bool ProofMatches(Side side, std::string_view token, std::string_view client_nonce,
                  std::string_view server_nonce, std::string_view proof);

// A client nonce (wire::kNonceBytes) that carries a ticket for `token`:
// random bytes, then the start of HMAC-SHA256(token, ticket context || them).
// Without a token, random bytes only.
std::string NonceWithTicket(std::string_view token);

// Whether `nonce` carries a ticket for `token` (constant time).
bool NonceCarriesTicket(std::string_view token, std::string_view nonce);

// Frees what the crypto library keeps for the calling thread (its error
// queue): for a long-lived thread that checked proofs, before it ends.
void ReleaseThreadState();

}  // namespace infini::rendezvous::auth
