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

// HMAC-SHA256(token, wire::kProofContext || nonce): what a client sends to
// prove the token for the server's challenge `nonce`.
std::string ProofFor(std::string_view token, std::string_view nonce);

// Whether `proof` is ProofFor(token, nonce); its time does not depend on
// where the bytes differ.
bool ProofMatches(std::string_view token, std::string_view nonce, std::string_view proof);

// Frees what the crypto library keeps for the calling thread (its error
// queue): for a long-lived thread that checked proofs, before it ends.
void ReleaseThreadState();

}  // namespace infini::rendezvous::auth
