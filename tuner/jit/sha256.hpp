#pragma once
// SHA-256 (FIPS 180-4) for the kernel cache's keys and for checking cache entries and cubins, computed by OpenSSL's
// libcrypto (its SHA-256 alone, linked statically: nothing more is needed where the binaries run). Not for secrets.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

struct SHA256state_st;  // OpenSSL's SHA256_CTX, kept out of this header

namespace qtune::jit {

class Sha256 {
 public:
  using Digest = std::array<std::uint8_t, 32>;

  Sha256();
  Sha256(Sha256&&) noexcept = default;
  Sha256& operator=(Sha256&&) noexcept = default;
  ~Sha256();

  Sha256& update(const void* data, std::size_t size);
  Sha256& update(std::string_view text) { return update(text.data(), text.size()); }
  // Appends the length before the bytes so that consecutive fields cannot run into each other ("ab","c" != "a","bc").
  Sha256& update_field(std::string_view text);
  // Completes the hash; the object must not be updated afterwards.
  Digest finish();
  std::string finish_hex();

 private:
  struct ContextDeleter {
    void operator()(SHA256state_st* context) const;
  };
  std::unique_ptr<SHA256state_st, ContextDeleter> context_;
  bool finished_ = false;
};

std::string to_hex(const Sha256::Digest& digest);
std::string sha256_hex(std::string_view text);

}  // namespace qtune::jit
