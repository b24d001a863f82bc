#pragma once
// Kernel device sources (.cuh under kernels/device/) compiled into the executable, so the JIT never reads the source tree.
#include <string_view>
#include <vector>

namespace qtune {

struct EmbeddedSource {
  std::string_view name;  // path relative to kernels/device/, as used in #include "..."
  std::string_view text;
};

const std::vector<EmbeddedSource>& embedded_device_sources();

}  // namespace qtune
