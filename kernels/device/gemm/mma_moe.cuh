#pragma once
// The MoE GEMM on the mma family's tiles (gemm/mma_gemm.cuh with MoeRows): one CTA per (block of BLOCK_M rows of a
// MoE layout, BLOCK_N columns, K split). A block belongs to one expert (gemm/moe_rows.cuh): its activation rows are
// gathered through the layout's row table, its weights are the expert's prepacked ones (expert · stride), its output
// rows are scattered (token-indexed: row = pair) or written in place (grouped layouts). Blocks with no live rows, and
// so experts with no tokens, return at once. The token-indexed down projection multiplies each output row by its
// router weight; moe_reduce_top_k then adds each token's top_k rows in slot order (deterministic, no atomics).
#include "gemm/mma_gemm.cuh"

namespace qtune {
namespace device {

// SCALE_AFTER: K-group scales on the partial sums (MmaGemm).
template <class F, class T, int LAYOUT, int PROJECTION, int SCALE_AFTER = 0>
__device__ __forceinline__ void mma_moe_gemm(const GemmParams& p, const MoeParams& moe) {
  static_assert(LAYOUT == kMoeTokenIndexed || LAYOUT == kMoeContiguous || LAYOUT == kMoeMasked,
                "LAYOUT is kMoeTokenIndexed, kMoeContiguous or kMoeMasked");
  static_assert(PROJECTION == kMoeGateUp || PROJECTION == kMoeDown, "PROJECTION is kMoeGateUp or kMoeDown");
  static_assert(T::THREADS >= T::BLOCK_M, "a MoE block's row table is filled by one thread per row: THREADS >= BLOCK_M");
  // Swap-AB would need the live-row count before choosing the instantiation: MoE blocks use the normal fragments.
  mma_gemm_tiles<F, T, false, MoeRows<LAYOUT, PROJECTION>, SCALE_AFTER>(p, &moe);
}

// out[t][column] = Σ_slot rows[t · top_k + slot][column] in slot order, in f32, rounded to the output type once.
// One thread per pair of columns; `rows` and `out` in the output type (OUTPUT: kElementF16 or kElementBF16).
template <int OUTPUT>
__device__ __forceinline__ void moe_reduce_top_k(const unsigned short* rows, unsigned short* out, int tokens, int top_k, int n) {
  static_assert(OUTPUT == kElementF16 || OUTPUT == kElementBF16, "OUTPUT is kElementF16 or kElementBF16");
  const long long index = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int pairs_per_row = n / 2;
  if (index >= static_cast<long long>(tokens) * pairs_per_row) return;
  const int token = static_cast<int>(index / pairs_per_row);
  const int column = static_cast<int>(index % pairs_per_row) * 2;
  float lo = 0.0f, hi = 0.0f;
  for (int slot = 0; slot < top_k; ++slot) {
    const u32 word = ld_global_32(rows + (static_cast<long long>(token) * top_k + slot) * n + column);
    const unsigned short a = static_cast<unsigned short>(word & 0xFFFFu), b = static_cast<unsigned short>(word >> 16);
    lo += OUTPUT == kElementF16 ? f16_to_f32(a) : bf16_to_f32(a);
    hi += OUTPUT == kElementF16 ? f16_to_f32(b) : bf16_to_f32(b);
  }
  st_global_32(out + static_cast<long long>(token) * n + column, OUTPUT == kElementF16 ? pack_f16x2(lo, hi) : pack_bf16x2(lo, hi));
}

}  // namespace device
}  // namespace qtune
