#pragma once
// What a MoE GEMM's block is and how its rows are stored, for every family (gemm/moe_rows.cuh adds the row tables the
// mma and wgmma tiles keep in shared memory; gemm/tma_gemm.cuh uses this alone): a block of BLOCK_M launch rows
// belongs to one expert, its live rows a prefix of it; the expert's weights are at `expert · stride`.
#include "gemm/abi.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/ptx.cuh"

namespace qtune {
namespace device {

__device__ __forceinline__ int load_int(const int* pointer) { return static_cast<int>(ld_global_32(pointer)); }

// What one block of BLOCK_M launch rows holds.
struct MoeBlock {
  int expert;     // -1: nothing to compute
  int live_rows;  // a prefix of the block
};

// The block `block` as one warp finds it alone, with no shared tables and no CTA barrier: for warp-specialized kernels
// (gemm/tma_gemm.cuh) whose producer and consumer warps walk their work units apart. The GEMM's activation rows are the
// layout's rows (the grouped layouts', or token-indexed rows gathered into layout order beforehand), so a block is
// its expert and its live rows. Every lane of the warp calls it with the same block and gets the same answer.
template <int LAYOUT, int BM>
__device__ __forceinline__ MoeBlock moe_block_of_warp(const GemmParams& p, const MoeParams& moe, int block) {
  static_assert(LAYOUT == kMoeTokenIndexed || LAYOUT == kMoeContiguous || LAYOUT == kMoeMasked, "unknown MoE layout");
  const int m0 = block * BM;
  int expert = -1;
  int live_rows = 0;
  if constexpr (LAYOUT == kMoeMasked) {
    expert = m0 / moe.max_rows;
    const int count = load_int(reinterpret_cast<const int*>(moe.counts) + expert);
    live_rows = max(0, min(BM, count - m0 % moe.max_rows));
  } else {
    const int* rows = reinterpret_cast<const int*>(moe.rows);
    if constexpr (LAYOUT == kMoeTokenIndexed) {
      const int padded = moe.padded_rows != 0 ? load_int(reinterpret_cast<const int*>(moe.padded_rows)) : p.m;
      if (m0 >= padded) return {-1, 0};
      expert = load_int(reinterpret_cast<const int*>(moe.block_experts) + block);
    } else {
      expert = load_int(rows + m0);
    }
    // Live rows are a prefix of the block: count them, 32 rows per ballot.
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int first = 0; first < BM; first += 32) {
      const int r = first + lane;
      bool live = false;
      if (r < BM && m0 + r < p.m) {
        const int entry = load_int(rows + m0 + r);
        live = LAYOUT == kMoeTokenIndexed ? entry >= 0 && entry < moe.pairs : expert >= 0 && entry == expert;
      }
      live_rows += __popc(__ballot_sync(0xFFFFFFFFu, live));
    }
  }
  return {live_rows > 0 ? expert : -1, live_rows};
}

// store_swap_ab_tile (gemm/epilogue.cuh) for a MoE block whose activation rows are in layout order: the block's live
// rows only, row r of the block written to its target row, token-indexed: rows[m0 + r] (the pair), times the pair's
// router weight for the down projection; grouped: m0 + r in place. Token scales are read at the layout row; no bias.
template <class F, int OCTETS, int LAYOUT, int PROJECTION>
__device__ __forceinline__ void store_swap_ab_moe_tile(const GemmParams& p, const MoeParams& moe, const float* acc, int m0, int live_rows,
                                                       int column, int quad, float global_scale) {
  unsigned short* c_global = reinterpret_cast<unsigned short*>(p.c);
  float scale[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) scale[half] = output_scale<F>(p, global_scale, column + half * 8);
#pragma unroll
  for (int j = 0; j < OCTETS; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = j * 8 + quad * 2 + e;
      if (r < live_rows) {
        float row_scale = activation_row_scale<F>(p, m0 + r);  // times the router weight below (down)
        long long target = m0 + r;
        if constexpr (LAYOUT == kMoeTokenIndexed) {
          const int pair = load_int(reinterpret_cast<const int*>(moe.rows) + m0 + r);
          target = pair;
          if constexpr (PROJECTION == kMoeDown) row_scale *= ld_global_f32(reinterpret_cast<const float*>(moe.router_weights) + pair);
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const float value = acc[4 * j + half * 2 + e] * scale[half] * row_scale;
          c_global[target * p.n + column + half * 8] = static_cast<unsigned short>(pack_output<F>(value, 0.0f) & 0xFFFFu);
        }
      }
    }
  }
}

// The launch parameters with the weights, scales, zero points and global scale of `expert`.
__device__ __forceinline__ GemmParams expert_params(const GemmParams& p, const MoeParams& moe, int expert) {
  GemmParams q = p;
  q.weights += static_cast<unsigned long long>(expert) * moe.expert_weight_bytes;
  q.scales += static_cast<unsigned long long>(expert) * moe.expert_scale_bytes;
  if (q.zeros != 0) q.zeros += static_cast<unsigned long long>(expert) * moe.expert_zero_bytes;
  q.global_scale += static_cast<unsigned long long>(expert) * 4ull;
  return q;
}

// The rows of a MoE GEMM: a block of a layout (MoeLayoutCode, MoeProjectionCode).
template <int LAYOUT_CODE, int PROJECTION_CODE>
struct MoeRows {
  static constexpr int LAYOUT = LAYOUT_CODE;
  static constexpr int PROJECTION = PROJECTION_CODE;
  // The block's expert's weights, scales, zero points and global scale.
  static __device__ __forceinline__ GemmParams params(const GemmParams& launch, const MoeParams* moe, int expert) {
    return expert_params(launch, *moe, expert);
  }
};

// The rows of a dense GEMM for kernels that keep no row tables (gemm/tma_gemm.cuh): DenseRows (gemm/moe_rows.cuh) with
// its codes as enumerators, for which NVRTC emits no constant symbols, so the dense tma cubins stay byte-identical.
struct DenseUnits {
  enum : int { LAYOUT = 0, PROJECTION = 0 };
  static __device__ __forceinline__ const GemmParams& params(const GemmParams& launch, const MoeParams*, int) { return launch; }
};

}  // namespace device
}  // namespace qtune
