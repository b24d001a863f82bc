#pragma once
// Split-K reduction through the global workspace, deterministic: every split writes its partial tile, the CTA that
// arrives last at the tile's counter adds all partial tiles in split order (so results are bit-identical run to run)
// and resets the counter, which leaves the workspace ready for the next launch.
//
// Workspace layout: SPLIT x tiles partial tiles of BM x BN f32 (tile slot (split * tiles + tile)), then one int counter
// per tile. A thread's partial tile is FRAGMENTS fragments of 4 floats; fragment f of the thread with fragment base
// `slot0` (its first fragment's index among the tile's fragments) and lane `lane` sits at float ((slot0 + f) * 32 +
// lane) * 4 of the tile slot, so a warp writes 512 contiguous bytes per fragment.
#include "gemm/ptx.cuh"

namespace qtune {
namespace device {

// fragment(f): the thread's 4 floats of fragment f (a pointer into its accumulators); live(f): whether the fragment
// holds rows inside M (other fragments are neither written nor read). `holds` says which threads own fragments
// (e.g. the first warp of each warp-K group), `leader` the one thread that counts arrivals, `sync()` a barrier over
// every thread of the CTA that takes part (`flag` is a shared int it uses). Returns true in the CTA that now holds
// the sum, false in the others (their partial tile is written; they are done with this tile).
template <int SPLIT, int FRAGMENTS, class Fragment, class Live, class Sync>
__device__ __forceinline__ bool reduce_split_k(float* workspace, int tiles, int tile, int split, int tile_elements, int slot0,
                                               int lane, bool holds, bool leader, int& flag, Fragment fragment,
                                               Live live, Sync sync) {
  int* counters = reinterpret_cast<int*>(workspace + static_cast<long long>(SPLIT) * tiles * tile_elements);
  auto partial = [&](int s, int f) {
    return workspace + (static_cast<long long>(s) * tiles + tile) * tile_elements + ((slot0 + f) * 32 + lane) * 4;
  };
  if (holds) {
#pragma unroll
    for (int f = 0; f < FRAGMENTS; ++f) {
      if (live(f)) {
        const float* values = fragment(f);
        st_global_f32x4(partial(split, f), values[0], values[1], values[2], values[3]);
      }
    }
  }
  __threadfence();
  sync();
  if (leader) flag = atomicAdd(&counters[tile], 1) == SPLIT - 1;
  sync();
  if (!flag) return false;
  __threadfence();
  if (holds) {
#pragma unroll
    for (int f = 0; f < FRAGMENTS; ++f) {
      if (!live(f)) continue;
      float* values = fragment(f);
      float sum[4];
      for (int s = 0; s < SPLIT; ++s) {
        float part[4];
        if (s == split) {
#pragma unroll
          for (int e = 0; e < 4; ++e) part[e] = values[e];
        } else {
          ld_global_cg_f32x4(part, partial(s, f));
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) sum[e] = s == 0 ? part[e] : sum[e] + part[e];
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) values[e] = sum[e];
    }
  }
  if (leader) counters[tile] = 0;  // every split has arrived: leave the counter ready for the next launch
  return true;
}

}  // namespace device
}  // namespace qtune
