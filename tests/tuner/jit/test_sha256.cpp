#include "tuner/jit/sha256.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "kernels/error.hpp"

namespace qtune::jit {
namespace {

TEST(Sha256, MatchesFips180Vectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingBoundaries) {
  // 55, 56 and 64 bytes put the length field in the same block, in a new block, and after a full block.
  EXPECT_EQ(sha256_hex(std::string(55, 'a')), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256_hex(std::string(56, 'a')), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256_hex(std::string(64, 'a')), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

TEST(Sha256, IncrementalUpdatesEqualOneShot) {
  std::string bytes;
  for (int repeat = 0; repeat < 3; ++repeat) {
    for (int value = 0; value < 256; ++value) bytes.push_back(static_cast<char>(value));
  }
  const std::string expected = "f3a25aa93aa2fbba28d79260535bbd6a5eb0fc1c24a8b0f04e12b484c1dfe363";
  ASSERT_EQ(sha256_hex(bytes), expected);
  for (std::size_t chunk : {1u, 3u, 63u, 64u, 65u, 127u, 500u}) {
    Sha256 hash;
    for (std::size_t offset = 0; offset < bytes.size(); offset += chunk) {
      hash.update(std::string_view(bytes).substr(offset, chunk));
    }
    EXPECT_EQ(hash.finish_hex(), expected) << "chunk " << chunk;
  }
}

TEST(Sha256, FieldsDoNotRunTogether) {
  const std::string ab_c = Sha256().update_field("ab").update_field("c").finish_hex();
  const std::string a_bc = Sha256().update_field("a").update_field("bc").finish_hex();
  EXPECT_NE(ab_c, a_bc);
  EXPECT_EQ(ab_c, Sha256().update_field("ab").update_field("c").finish_hex());
}

// Digests the hand-written SHA-256 (before libcrypto computed them) gave, so the kernel cache's keys and the cubin
// manifests' digests stay what they were: field sequences shaped like Compiler::cache_key, and a long input.
TEST(Sha256, KeysAreTheOnesTheHandWrittenHashGave) {
  EXPECT_EQ(Sha256().update_field("ab").update_field("c").finish_hex(),
            "601d5476e2ccfe2c87a2bba7a322659734a05749d5b5aa781f513e4912db0d5f");
  Sha256 key;
  key.update_field("qtune kernel cache format 3").update_field("nvrtc 13.0").update_field("sm_90a").update_field("2");
  key.update_field("-std=c++17").update_field("--gpu-architecture=sm_90a").update_field("qtune_kernel");
  key.update_field("extern \"C\" __global__ void qtune_kernel() {}").update_field(std::string(3000, 'x'));
  EXPECT_EQ(key.finish_hex(), "f049d561a0c3dc1034679ffc46831461369b6c9651aedc6fba4a8f77213eeed1");
  std::string bytes;
  for (int i = 0; i < 100000; ++i) bytes.push_back(static_cast<char>(i * 7 + 3));
  EXPECT_EQ(sha256_hex(bytes), "d96bab6a55ee326ba206dd4a85a6e95e14360d7fabbf448f03e689c24382b7d0");
}

TEST(Sha256, AMovedHashCarriesOn) {
  Sha256 first;
  first.update("ab");
  Sha256 second = std::move(first);
  EXPECT_EQ(second.update("c").finish_hex(), sha256_hex("abc"));
}

TEST(Sha256, RejectsUseAfterFinish) {
  Sha256 hash;
  hash.finish();
  EXPECT_THROW(hash.update("x"), Error);
  EXPECT_THROW(hash.finish(), Error);
}

}  // namespace
}  // namespace qtune::jit
