#pragma once
// The MoE GEMM on the tma family's tiles (gemm/tma_gemm.cuh with MoeRows, sm_90a): TMA-fed, warp-specialized,
// persistent; the work units are (block of BLOCK_M layout rows, BLOCK_N columns, K split) over the layout's padded
// rows, walked as the dense kernel walks its tiles. The activation tensor map needs contiguous rows, so the kernel
// reads activations in layout order: the grouped layouts' rows are so already; for the token-indexed layout
// moe_gather_rows copies each live row's activations (and scales) into a [launch rows][K] buffer first (T · top_k · K
// bytes, small next to the experts' weights). Each block takes one expert's rows and reads that expert's prepacked
// weights; blocks with no live rows, and so experts with no tokens, are skipped; live rows are stored to their target
// rows (token-indexed: row = pair, times the router weight for the down projection, whose top-k reduction is
// mma_moe.cuh's moe_reduce_top_k).
#include "gemm/tma_gemm.cuh"

namespace qtune {
namespace device {

template <class F, class T, int LAYOUT, int PROJECTION>
__device__ __forceinline__ void tma_moe_gemm(const GemmParams& p, const TensorMap& activation_map, const MoeParams& moe) {
  static_assert(LAYOUT == kMoeTokenIndexed || LAYOUT == kMoeContiguous || LAYOUT == kMoeMasked,
                "LAYOUT is kMoeTokenIndexed, kMoeContiguous or kMoeMasked");
  static_assert(PROJECTION == kMoeGateUp || PROJECTION == kMoeDown, "PROJECTION is kMoeGateUp or kMoeDown");
  static_assert(T::MULTICAST != kMulticastWeights,
                "MoE tiles share activations or nothing: a cluster along M (MULTICAST = 2) pairs two row blocks, which may "
                "belong to two experts with different weights");
  tma_gemm<F, T, MoeRows<LAYOUT, PROJECTION>>(p, activation_map, &moe);
}

// The gather of the token-indexed layout: launch row r (one CTA each) receives the activation row of the pair
// rows[r] (its token for gate-up, the pair's row for down) and its activation scales; padding rows are zeroed (so
// their products are finite and never stored); rows from num_tokens_post_padded on are read by no block and skipped.
// A row's bytes are whole 16-byte vectors (the host checks it; the tensor map's row stride must be too).
template <int PROJECTION, int THREADS>
__device__ __forceinline__ void moe_gather_rows(const MoeGatherParams& g, const MoeParams& moe) {
  static_assert(PROJECTION == kMoeGateUp || PROJECTION == kMoeDown, "PROJECTION is kMoeGateUp or kMoeDown");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "THREADS is whole warps, at most 1024");
  const int row = blockIdx.x;
  const int padded = moe.padded_rows != 0 ? load_int(reinterpret_cast<const int*>(moe.padded_rows)) : g.rows;
  if (row >= padded) return;
  const int pair = load_int(reinterpret_cast<const int*>(moe.rows) + row);
  const bool live = pair >= 0 && pair < moe.pairs;
  const long long source = live ? (PROJECTION == kMoeGateUp ? pair / moe.top_k : pair) : 0;
  const uint4* from = reinterpret_cast<const uint4*>(g.a + static_cast<unsigned long long>(source * g.row_bytes));
  uint4* to = reinterpret_cast<uint4*>(g.gathered + static_cast<unsigned long long>(static_cast<long long>(row) * g.row_bytes));
  for (int i = threadIdx.x; i < g.row_bytes / 16; i += THREADS) to[i] = live ? from[i] : uint4{0u, 0u, 0u, 0u};
  // Scales: [groups][rows] (one group: per token), the source's at [group][input_rows].
  const float* scales = reinterpret_cast<const float*>(g.a_scales);
  float* gathered_scales = reinterpret_cast<float*>(g.gathered_scales);
  for (int group = threadIdx.x; group < g.scale_groups; group += THREADS) {
    gathered_scales[static_cast<long long>(group) * g.rows + row] = live ? scales[group * static_cast<long long>(moe.input_rows) + source] : 0.0f;
  }
}

}  // namespace device
}  // namespace qtune
