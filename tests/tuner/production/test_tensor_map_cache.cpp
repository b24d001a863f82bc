// The runtime's cache of tma tensor maps without a GPU (a stand-in encoder that writes a request's fields): an equal
// request is encoded once and copied after, any field that changes the map encodes again, and the maps of the tma MoE
// GEMM's real arguments (mma_moe::pack_arguments, as moe_gemm packs them) follow the stream's gathered rows and the
// call's shape, not the caller's activation pointer, which the gather reads before the map is used.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "kernels/error.hpp"
#include "kernels/families/mma_moe.hpp"
#include "kernels/moe.hpp"
#include "tuner/production/selector.hpp"
#include "tuner/production/tensor_map_cache.hpp"

namespace qtune::production {
namespace {

// Writes every field of each request into its 128 bytes, and counts the maps it made.
struct FakeEncoder {
  int* calls;
  void operator()(KernelArguments& arguments) const {
    for (const TensorMapRequest& request : arguments.tensor_maps) {
      ++*calls;
      const std::uint64_t fields[] = {request.address, request.element_bytes, request.rows, request.columns, request.box_rows,
                                      request.box_columns};
      std::memset(arguments.storage.data() + request.offset, 0xAB, TensorMapCache::kMapBytes);
      std::memcpy(arguments.storage.data() + request.offset, fields, sizeof(fields));
    }
  }
};

TensorMapRequest request_at(std::uint64_t address) {
  return {.offset = 64, .address = address, .element_bytes = 1, .rows = 128, .columns = 7168, .box_rows = 16, .box_columns = 128};
}

// Arguments with a parameter before the map (bytes 0..63 set to 0x11) and the map's 128 bytes after it.
KernelArguments arguments_with(const TensorMapRequest& request) {
  KernelArguments arguments;
  arguments.storage.assign(request.offset + TensorMapCache::kMapBytes, 0);
  std::memset(arguments.storage.data(), 0x11, request.offset);
  arguments.offsets = {0, request.offset};
  arguments.tensor_maps = {request};
  return arguments;
}

std::vector<std::uint8_t> map_bytes(const KernelArguments& arguments) {
  const std::size_t offset = arguments.tensor_maps.front().offset;
  return {arguments.storage.begin() + static_cast<std::ptrdiff_t>(offset),
          arguments.storage.begin() + static_cast<std::ptrdiff_t>(offset + TensorMapCache::kMapBytes)};
}

// What the encoder itself writes for `request`.
std::vector<std::uint8_t> encoded(const TensorMapRequest& request) {
  int calls = 0;
  KernelArguments arguments = arguments_with(request);
  FakeEncoder{&calls}(arguments);
  return map_bytes(arguments);
}

TEST(TensorMapCache, AnEqualRequestIsEncodedOnceAndCopiedAfter) {
  int calls = 0;
  TensorMapCache cache(FakeEncoder{&calls});
  for (int call = 0; call < 3; ++call) {
    KernelArguments arguments = arguments_with(request_at(0x7f0000001000));
    cache.fill(arguments);
    EXPECT_EQ(map_bytes(arguments), encoded(request_at(0x7f0000001000))) << "call " << call;
    // The other parameters are left as they were.
    EXPECT_EQ(arguments.storage[0], 0x11);
    EXPECT_EQ(arguments.storage[63], 0x11);
  }
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(cache.encoded(), 1u);
  // The same map at another parameter offset (another argument layout) is the same bytes: still one encode.
  TensorMapRequest moved = request_at(0x7f0000001000);
  moved.offset = 128;
  KernelArguments arguments = arguments_with(moved);
  cache.fill(arguments);
  EXPECT_EQ(map_bytes(arguments), encoded(request_at(0x7f0000001000)));
  EXPECT_EQ(calls, 1);
}

TEST(TensorMapCache, EveryFieldOfTheMapEncodesAgainAndEachMapStaysCached) {
  int calls = 0;
  TensorMapCache cache(FakeEncoder{&calls});
  std::vector<TensorMapRequest> requests(7, request_at(0x7f0000001000));
  requests[1].address += 256;  // the stream's scratch moved (it grew, or another stream)
  requests[2].rows = 256;      // another shape: more launch rows
  requests[3].columns = 2048;  // another K
  requests[4].box_rows = 64;   // another token tile
  requests[5].element_bytes = 2;
  requests[5].box_columns = 64;
  requests[6].box_columns = 64;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    KernelArguments arguments = arguments_with(requests[i]);
    cache.fill(arguments);
    EXPECT_EQ(calls, static_cast<int>(i + 1)) << "request " << i << " was not encoded";
    EXPECT_EQ(map_bytes(arguments), encoded(requests[i])) << "request " << i;
  }
  // Back to each earlier map: copied, not encoded, and its own bytes (not the last one's).
  for (std::size_t i = 0; i < requests.size(); ++i) {
    KernelArguments arguments = arguments_with(requests[i]);
    cache.fill(arguments);
    EXPECT_EQ(map_bytes(arguments), encoded(requests[i])) << "request " << i;
  }
  EXPECT_EQ(calls, 7);
  EXPECT_EQ(cache.size(), 7u);
}

TEST(TensorMapCache, AFullCacheStartsOverAndStaysCorrect) {
  int calls = 0;
  TensorMapCache cache(FakeEncoder{&calls}, 2);
  for (const std::uint64_t address : {0x1000u, 0x2000u, 0x3000u, 0x1000u}) {
    KernelArguments arguments = arguments_with(request_at(address));
    cache.fill(arguments);
    EXPECT_EQ(map_bytes(arguments), encoded(request_at(address))) << address;
    EXPECT_LE(cache.size(), 2u);
  }
  EXPECT_EQ(calls, 4);  // the third emptied the cache, so the first was encoded again
}

TEST(TensorMapCache, AMapOutsideTheArgumentsIsAnError) {
  int calls = 0;
  TensorMapCache cache(FakeEncoder{&calls});
  KernelArguments arguments = arguments_with(request_at(0x1000));
  arguments.storage.resize(arguments.storage.size() - 1);
  EXPECT_THROW(cache.fill(arguments), Error);
  EXPECT_EQ(calls, 0);
}

// Arguments without tensor maps (every family but tma) pass through untouched.
TEST(TensorMapCache, ArgumentsWithoutMapsAreLeftAlone) {
  int calls = 0;
  TensorMapCache cache(FakeEncoder{&calls});
  KernelArguments arguments;
  arguments.storage.assign(16, 0x5A);
  arguments.offsets = {0};
  cache.fill(arguments);
  EXPECT_EQ(arguments.storage, std::vector<std::uint8_t>(16, 0x5A));
  EXPECT_EQ(calls, 0);
}

// The tma MoE GEMM's arguments as moe_gemm packs them (W4A8 DeepSeek-V3 gate-up): its map is over the stream's gathered
// rows, so a call with other activations (the gather copies them there first) reuses it; the scratch moving, or another
// token count (more launch rows), encodes a new one.
TEST(TensorMapCache, TmaMoeArgumentsReuseTheMapForNewActivationsAndNotForNewScratchOrShape) {
  const KernelConfig config = KernelConfig::parse(
      "bm=16,bn=64,bk=256,stages=3,split=1,raster=0,cluster=1,multicast=0,persistent=0,overlap=0,promote=128,pingpong=0", "tma");
  auto arguments_for = [&](std::int64_t tokens, std::uint64_t activations, std::uint64_t gathered) {
    const MoeProblem problem = make_moe_problem(FormatSpec::parse("w4a8-int4-fp8"), 256, 8, 4096, 7168, tokens, "gate-up");
    EXPECT_TRUE(mma_moe::gathers(config, problem));
    std::map<std::string, std::uint64_t> addresses;
    std::uint64_t next = 0x7f0000000000;
    for (const char* name : {"a_scales", "weights", "scales", "zeros", "global_scale", "c", "rows", "block_experts",
                             "padded_rows", "router_weights", "workspace", "gathered_scales"}) {
      addresses[name] = next += 0x100000;
    }
    addresses["a"] = activations;
    addresses["gathered"] = gathered;
    const std::int64_t launch_rows = mma_moe::launch_rows(problem, config.get("bm"), MoeRowMap{});
    KernelArguments arguments = mma_moe::pack_arguments(config, problem, launch_rows, addresses);
    EXPECT_EQ(arguments.tensor_maps.size(), 1u);
    return arguments;
  };
  int calls = 0;
  TensorMapCache cache(FakeEncoder{&calls});
  KernelArguments first = arguments_for(16, 0x10000000, 0x20000000);
  cache.fill(first);
  EXPECT_EQ(first.tensor_maps.front().address, 0x20000000u);
  KernelArguments new_activations = arguments_for(16, 0x30000000, 0x20000000);
  cache.fill(new_activations);
  EXPECT_EQ(calls, 1) << "new activations, same gathered rows: the map is the same";
  EXPECT_EQ(map_bytes(new_activations), map_bytes(first));
  KernelArguments moved_scratch = arguments_for(16, 0x10000000, 0x40000000);
  cache.fill(moved_scratch);
  EXPECT_EQ(calls, 2) << "the stream's scratch moved: a new map";
  EXPECT_EQ(map_bytes(moved_scratch), encoded(moved_scratch.tensor_maps.front()));
  KernelArguments more_tokens = arguments_for(256, 0x10000000, 0x20000000);
  cache.fill(more_tokens);
  EXPECT_EQ(calls, 3) << "more tokens, more launch rows: a new map";
  EXPECT_GT(more_tokens.tensor_maps.front().rows, first.tensor_maps.front().rows);
  EXPECT_EQ(map_bytes(more_tokens), encoded(more_tokens.tensor_maps.front()));
}

}  // namespace
}  // namespace qtune::production
