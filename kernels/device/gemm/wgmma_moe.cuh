#pragma once
// The MoE GEMM on the wgmma family's tiles (gemm/wgmma_gemm.cuh with MoeRows, sm_90a): one CTA per (block of BLOCK_M
// token rows of a MoE layout, BLOCK_N columns, K split). Swap-AB fits the gather directly: the tokens are wgmma's B
// operand in shared memory, so a block's rows are cp.async-loaded from the rows its table names (gemm/moe_rows.cuh),
// rows past its live rows zero-filled and never read. The block's expert's prepacked weights are the register A
// operand; outputs are scattered (token-indexed: row = pair, times the router weight for the down projection) or
// written in place (grouped layouts). Blocks with no live rows, and so experts with no tokens, return at once. The
// token-indexed down projection's top-k reduction is mma_moe.cuh's moe_reduce_top_k (family-independent).
#include "gemm/wgmma_gemm.cuh"

namespace qtune {
namespace device {

template <class F, class T, int IN_FLIGHT, int SCALE_AFTER, int LAYOUT, int PROJECTION>
__device__ __forceinline__ void wgmma_moe_gemm(const GemmParams& p, const MoeParams& moe) {
  static_assert(LAYOUT == kMoeTokenIndexed || LAYOUT == kMoeContiguous || LAYOUT == kMoeMasked,
                "LAYOUT is kMoeTokenIndexed, kMoeContiguous or kMoeMasked");
  static_assert(PROJECTION == kMoeGateUp || PROJECTION == kMoeDown, "PROJECTION is kMoeGateUp or kMoeDown");
  static_assert(T::THREADS >= T::BLOCK_M, "a MoE block's row table is filled by one thread per row: THREADS >= BLOCK_M");
  wgmma_gemm<F, T, IN_FLIGHT, SCALE_AFTER, MoeRows<LAYOUT, PROJECTION>>(p, &moe);
}

}  // namespace device
}  // namespace qtune
