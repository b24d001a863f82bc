#pragma once
// Which rows a CTA of a MoE GEMM computes (kernels/moe_layout.hpp describes the layouts on the host). The launch's rows
// are cut into blocks of BLOCK_M; a block belongs to one expert, its live rows come first and padding after, so a
// block is an expert, a count of live rows (a prefix) and, per live row, the activation row it reads and the output
// row it writes. A block with no live rows (past the padded rows, or padding only) computes nothing.
#include "gemm/moe_block.cuh"

namespace qtune {
namespace device {

// Fills source[r] (activation row), target[r] (output row) and weight[r] (router weight; 1 unless token-indexed down)
// for the block's rows in shared memory and returns the block. Every thread of the CTA calls it (it synchronises).
template <int LAYOUT, int PROJECTION, int BM, int THREADS>
__device__ __forceinline__ MoeBlock moe_block_rows(const GemmParams& p, const MoeParams& moe, int block, int* source,
                                                   int* target, float* weight) {
  static_assert(LAYOUT == kMoeTokenIndexed || LAYOUT == kMoeContiguous || LAYOUT == kMoeMasked, "unknown MoE layout");
  static_assert(PROJECTION == kMoeGateUp || PROJECTION == kMoeDown, "unknown MoE projection");
  static_assert(THREADS >= BM, "every row of a block is read by its own thread");
  const int m0 = block * BM;
  const int r = threadIdx.x;
  int expert = -1;
  bool live = false;
  if constexpr (LAYOUT == kMoeTokenIndexed) {
    const int padded = moe.padded_rows != 0 ? load_int(reinterpret_cast<const int*>(moe.padded_rows)) : p.m;
    if (m0 < padded) {
      expert = load_int(reinterpret_cast<const int*>(moe.block_experts) + block);
      if (r < BM) {
        const int pair = load_int(reinterpret_cast<const int*>(moe.rows) + m0 + r);
        live = pair >= 0 && pair < moe.pairs;
        if (live) {
          source[r] = PROJECTION == kMoeGateUp ? pair / moe.top_k : pair;
          target[r] = pair;
          weight[r] = PROJECTION == kMoeDown ? ld_global_f32(reinterpret_cast<const float*>(moe.router_weights) + pair) : 1.0f;
        }
      }
    }
  } else if constexpr (LAYOUT == kMoeContiguous) {
    expert = load_int(reinterpret_cast<const int*>(moe.rows) + m0);
    if (r < BM && m0 + r < p.m) live = expert >= 0 && load_int(reinterpret_cast<const int*>(moe.rows) + m0 + r) == expert;
  } else {
    expert = m0 / moe.max_rows;
    const int count = load_int(reinterpret_cast<const int*>(moe.counts) + expert);
    live = r < BM && m0 % moe.max_rows + r < count;
  }
  if constexpr (LAYOUT != kMoeTokenIndexed) {
    if (live) {
      source[r] = m0 + r;
      target[r] = m0 + r;
      weight[r] = 1.0f;
    }
  }
  // Live rows are a prefix of the block: their count is where the padding starts.
  const int live_rows = __syncthreads_count(live);
  return {live_rows > 0 ? expert : -1, live_rows};
}

// The rows of a dense GEMM: tile row r is row m0 + r of A and of C.
struct DenseRows {
  static constexpr int LAYOUT = 0;
  static constexpr int PROJECTION = 0;
  static __device__ __forceinline__ const GemmParams& params(const GemmParams& launch, const MoeParams*, int) { return launch; }
};

// A CTA's MoE row tables in shared memory (after its pipeline's): source row, target row and router weight per row.
template <int BM>
struct MoeTables {
  int* source;
  int* target;
  float* weight;
  __device__ __forceinline__ explicit MoeTables(unsigned char* base)
      : source(reinterpret_cast<int*>(base)), target(source + BM), weight(reinterpret_cast<float*>(target + BM)) {}
};

// The block a CTA computes: with DenseRows its tile's rows_valid rows; with MoeRows its layout block, tables filled,
// whose expert is -1 when it has no live rows: the CTA then computes nothing (all its K splits alike, so split-K
// counters stay untouched). Every thread of the CTA calls it (MoeRows synchronise).
template <class ROWS, int BM, int THREADS>
__device__ __forceinline__ MoeBlock block_rows(const GemmParams& launch, const MoeParams* moe, int tile_m, int rows_valid,
                                               const MoeTables<BM>& tables) {
  if constexpr (ROWS::LAYOUT != 0) {
    return moe_block_rows<ROWS::LAYOUT, ROWS::PROJECTION, BM, THREADS>(launch, *moe, tile_m, tables.source, tables.target,
                                                                       tables.weight);
  } else {
    return {0, rows_valid};
  }
}

}  // namespace device
}  // namespace qtune
