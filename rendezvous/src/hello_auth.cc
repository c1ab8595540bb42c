#include "hello_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "infini/rendezvous/store.h"
#include "wire_protocol.h"

namespace infini::rendezvous::auth {

std::string RandomBytes(size_t count) {
  std::string bytes(count, '\0');
  size_t filled = 0;
  while (filled < count) {
    const ssize_t got = getrandom(bytes.data() + filled, count - filled, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw StoreError(std::string("getrandom failed: ") + std::strerror(errno));
    }
    filled += static_cast<size_t>(got);
  }
  return bytes;
}

namespace {

// OpenSSL frees its global state in an atexit handler by default, while a
// store's thread may still be checking a proof (a store that lives as long
// as its process): a use after free at exit. Its state is left to the
// process's end instead.
void InitializeOnce() {
  static const bool initialized = [] {
    return OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
  }();
  if (!initialized) throw StoreError("OpenSSL's libcrypto could not be initialized");
}

std::string Mac(std::string_view token, const std::string& message) {
  InitializeOnce();
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_bytes = 0;
  if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac,
           &mac_bytes) == nullptr) {
    throw StoreError("HMAC-SHA256 of the run token failed (OpenSSL)");
  }
  return std::string(reinterpret_cast<const char*>(mac), mac_bytes);
}

std::string TicketFor(std::string_view token, std::string_view random_part) {
  std::string message(wire::kTicketContext);
  message.append(random_part);
  return Mac(token, message).substr(0, wire::kNonceBytes - wire::kTicketRandomBytes);
}

}  // namespace

std::string ProofFor(Side side, std::string_view token, std::string_view client_nonce,
                     std::string_view server_nonce) {
  std::string message(side == Side::kClient ? wire::kClientProofContext
                                            : wire::kServerProofContext);
  message.append(client_nonce);
  message.append(server_nonce);
  return Mac(token, message);
}

std::string NonceWithTicket(std::string_view token) {
  if (token.empty()) return RandomBytes(wire::kNonceBytes);
  std::string nonce = RandomBytes(wire::kTicketRandomBytes);
  nonce += TicketFor(token, nonce);
  return nonce;
}

bool NonceCarriesTicket(std::string_view token, std::string_view nonce) {
  if (token.empty() || nonce.size() != wire::kNonceBytes) return false;
  const std::string expected = TicketFor(token, nonce.substr(0, wire::kTicketRandomBytes));
  return CRYPTO_memcmp(nonce.data() + wire::kTicketRandomBytes, expected.data(), expected.size()) ==
         0;
}

void ReleaseThreadState() { OPENSSL_thread_stop(); }

bool ProofMatches(Side side, std::string_view token, std::string_view client_nonce,
                  std::string_view server_nonce, std::string_view proof) {
  const std::string expected = ProofFor(side, token, client_nonce, server_nonce);
  return proof.size() == expected.size() &&
         CRYPTO_memcmp(proof.data(), expected.data(), expected.size()) == 0;
}

}  // namespace infini::rendezvous::auth
