#pragma once
// Splits work over the machine's cores; the quantizer and the CPU reference use it for large matrices.
#include <cstdint>
#include <functional>

namespace qtune {

// Calls body(begin, end) on disjoint chunks that cover [0, count), on up to `threads` threads (0: every core).
// Chunks hold at least `min_chunk` items. Rethrows the first exception a chunk threw, after all threads end.
void parallel_for(int64_t count, const std::function<void(int64_t begin, int64_t end)>& body, int threads = 0,
                  int64_t min_chunk = 1);

}  // namespace qtune
