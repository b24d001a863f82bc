#include "tuner/jit/sha256.hpp"

// libcrypto's own SHA-256 functions (deprecated since OpenSSL 3.0 in favour of EVP, and kept through 3.x), asked for at
// the 1.1.1 API level. EVP would link OpenSSL's provider and configuration machinery too (3.5 MB more in
// libqtune_runtime.so, and openssl.cnf read at start) for the same digest computed by the same assembly.
#define OPENSSL_API_COMPAT 10101
#include <openssl/sha.h>

#include "kernels/error.hpp"

namespace qtune::jit {

void Sha256::ContextDeleter::operator()(SHA256state_st* context) const { delete context; }

Sha256::Sha256() : context_(new SHA256_CTX) {
  // SHA256_Init only fills the state in; it cannot fail.
  if (SHA256_Init(context_.get()) != 1) QTUNE_LIBRARY_ERROR("OpenSSL", "SHA256_Init failed");
}

Sha256::~Sha256() = default;

Sha256& Sha256::update(const void* data, std::size_t size) {
  if (finished_) QTUNE_THROW(Error, "Sha256::update called after finish");
  if (SHA256_Update(context_.get(), data, size) != 1) QTUNE_LIBRARY_ERROR("OpenSSL", "SHA256_Update failed");
  return *this;
}

Sha256& Sha256::update_field(std::string_view text) {
  const std::uint64_t length = text.size();
  std::array<std::uint8_t, 8> length_bytes;
  for (int i = 0; i < 8; ++i) length_bytes[i] = static_cast<std::uint8_t>(length >> (56 - 8 * i));
  update(length_bytes.data(), length_bytes.size());
  return update(text);
}

Sha256::Digest Sha256::finish() {
  if (finished_) QTUNE_THROW(Error, "Sha256::finish called twice");
  finished_ = true;
  static_assert(SHA256_DIGEST_LENGTH == std::tuple_size_v<Digest>);
  Digest digest;
  if (SHA256_Final(digest.data(), context_.get()) != 1) QTUNE_LIBRARY_ERROR("OpenSSL", "SHA256_Final failed");
  return digest;
}

std::string Sha256::finish_hex() { return to_hex(finish()); }

std::string to_hex(const Sha256::Digest& digest) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * digest.size());
  for (std::uint8_t byte : digest) {
    hex.push_back(kDigits[byte >> 4]);
    hex.push_back(kDigits[byte & 15]);
  }
  return hex;
}

std::string sha256_hex(std::string_view text) { return Sha256().update(text).finish_hex(); }

}  // namespace qtune::jit
