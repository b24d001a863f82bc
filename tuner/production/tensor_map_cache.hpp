#pragma once
// TMA tensor maps encoded once: the tma MoE GEMM reads its activations through a map the driver encodes on the host
// (cuTensorMapEncodeTiled, a few microseconds), and a serving loop calls moe_gemm with the same shape on the same
// stream over and over, so its map (over the stream's gathered rows, launch_rows x K in boxes of bm rows) is the same
// every time. Maps are keyed by everything the encoding reads (TensorMapRequest but its offset): a call of another
// shape or plan, or after the stream's scratch moved, asks for a map of other bytes and gets it encoded.
// Not synchronised: the Runtime uses it under its own lock, as its plans and scratch.
#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <tuple>

#include "kernels/family.hpp"

namespace qtune::production {

class TensorMapCache {
 public:
  static constexpr std::size_t kMapBytes = 128;  // sizeof(CUtensorMap)
  // Writes each of its tensor_maps requests into the storage (gemm::encode_tensor_maps, or a test's stand-in).
  using Encoder = std::function<void(KernelArguments&)>;

  explicit TensorMapCache(Encoder encoder, std::size_t capacity = 256);

  // Fills every tensor map parameter of `arguments`: a map of an equal request encoded before is copied, any other is
  // encoded and kept (the cache is emptied when it holds `capacity` maps). Error when a request lies outside the storage.
  void fill(KernelArguments& arguments);

  std::size_t encoded() const { return encoded_; }  // maps the encoder has made so far
  std::size_t size() const { return maps_.size(); }

 private:
  using Key = std::tuple<std::uint64_t, std::uint32_t, std::uint64_t, std::uint64_t, std::uint32_t, std::uint32_t>;
  static Key key_of(const TensorMapRequest& request);

  Encoder encoder_;
  std::size_t capacity_;
  std::map<Key, std::array<std::uint8_t, kMapBytes>> maps_;
  std::size_t encoded_ = 0;
};

}  // namespace qtune::production
