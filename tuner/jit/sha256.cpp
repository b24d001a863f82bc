#include "tuner/jit/sha256.hpp"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include "kernels/error.hpp"

namespace qtune::jit {
namespace {

// libcrypto's reason for the last failure, for the error message.
std::string openssl_reason() {
  const unsigned long code = ERR_get_error();
  if (code == 0) return "no reason given";
  char text[256] = {};
  ERR_error_string_n(code, text, sizeof(text));
  return text;
}

[[noreturn]] void openssl_failed(const char* call) {
  QTUNE_LIBRARY_ERROR("OpenSSL", std::string(call) + " failed: " + openssl_reason());
}

// SHA-256 from libcrypto's built-in default provider. Reading openssl.cnf is turned off: the binaries run on machines
// whose OpenSSL configuration (another version, a FIPS setup) is not the one they were built with.
const EVP_MD* sha256_digest() {
  static const EVP_MD* digest = [] {
    if (OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG, nullptr) != 1) openssl_failed("OPENSSL_init_crypto");
    const EVP_MD* found = EVP_sha256();
    if (found == nullptr) openssl_failed("EVP_sha256");
    return found;
  }();
  return digest;
}

}  // namespace

void Sha256::ContextDeleter::operator()(evp_md_ctx_st* context) const { EVP_MD_CTX_free(context); }

Sha256::Sha256() {
  const EVP_MD* digest = sha256_digest();
  context_.reset(EVP_MD_CTX_new());
  if (!context_) openssl_failed("EVP_MD_CTX_new");
  if (EVP_DigestInit_ex(context_.get(), digest, nullptr) != 1) openssl_failed("EVP_DigestInit_ex");
}

Sha256::~Sha256() = default;

Sha256& Sha256::update(const void* data, std::size_t size) {
  if (finished_) QTUNE_THROW(Error, "Sha256::update called after finish");
  if (size > 0 && EVP_DigestUpdate(context_.get(), data, size) != 1) openssl_failed("EVP_DigestUpdate");
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
  Digest digest;
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(context_.get(), digest.data(), &length) != 1) openssl_failed("EVP_DigestFinal_ex");
  if (length != digest.size()) {
    QTUNE_LIBRARY_ERROR("OpenSSL", "EVP_DigestFinal_ex gave " + std::to_string(length) + " bytes for SHA-256, not 32");
  }
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
