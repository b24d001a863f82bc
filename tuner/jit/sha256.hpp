#pragma once
// SHA-256 (FIPS 180-4), used for the kernel cache's keys and for checking cache entries. Not constant-time; not for secrets.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace qtune::jit {

class Sha256 {
 public:
  using Digest = std::array<std::uint8_t, 32>;

  Sha256();
  Sha256& update(const void* data, std::size_t size);
  Sha256& update(std::string_view text) { return update(text.data(), text.size()); }
  // Appends the length before the bytes so that consecutive fields cannot run into each other ("ab","c" != "a","bc").
  Sha256& update_field(std::string_view text);
  // Completes the hash; the object must not be updated afterwards.
  Digest finish();
  std::string finish_hex();

 private:
  void compress(const std::uint8_t* block);

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t total_bytes_ = 0;
  bool finished_ = false;
};

std::string to_hex(const Sha256::Digest& digest);
std::string sha256_hex(std::string_view text);

}  // namespace qtune::jit
