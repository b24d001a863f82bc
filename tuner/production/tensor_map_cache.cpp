#include "tuner/production/tensor_map_cache.hpp"

#include <cstring>
#include <utility>

#include "kernels/error.hpp"

namespace qtune::production {

TensorMapCache::TensorMapCache(Encoder encoder, std::size_t capacity) : encoder_(std::move(encoder)), capacity_(capacity) {}

TensorMapCache::Key TensorMapCache::key_of(const TensorMapRequest& request) {
  return {request.address, request.element_bytes, request.rows, request.columns, request.box_rows, request.box_columns};
}

void TensorMapCache::fill(KernelArguments& arguments) {
  for (const TensorMapRequest& request : arguments.tensor_maps) {
    if (request.offset + kMapBytes > arguments.storage.size()) QTUNE_THROW(Error, "tensor map parameter outside the argument storage");
    const Key key = key_of(request);
    auto found = maps_.find(key);
    if (found == maps_.end()) {
      // The encoder writes into a parameter block of its own: one map at offset 0.
      KernelArguments single;
      single.storage.assign(kMapBytes, 0);
      single.offsets = {0};
      single.tensor_maps = {request};
      single.tensor_maps.front().offset = 0;
      encoder_(single);
      ++encoded_;
      if (maps_.size() >= capacity_) maps_.clear();
      std::array<std::uint8_t, kMapBytes> map{};
      std::memcpy(map.data(), single.storage.data(), kMapBytes);
      found = maps_.emplace(key, map).first;
    }
    std::memcpy(arguments.storage.data() + request.offset, found->second.data(), kMapBytes);
  }
}

}  // namespace qtune::production
