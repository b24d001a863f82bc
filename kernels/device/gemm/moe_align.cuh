#pragma once
// The token-indexed MoE layout built on the device (vLLM's moe_align_block_size): top-k expert ids in, the row tables
// the MoE GEMM reads (gemm/moe_rows.cuh) out, with no host round trip. It writes exactly what the host's
// token_indexed_layout (kernels/moe_layout.hpp) builds: pairs ordered by expert, and within an expert by ascending
// pair index; each expert with pairs padded to a multiple of BLOCK_M with the sentinel `pairs`; one expert id per
// block; the padded row count. Deterministic (no atomics on the tables): one CTA counts, scans and places the pairs.
//
// One CTA of THREADS threads. Warp w owns the pairs [w·chunk, (w+1)·chunk): it counts them per expert, a scan over
// warps and experts gives every warp its first slot in each expert's rows, and the warp places its pairs in order
// (ranks inside a step of 32 pairs from __match_any_sync). Stable by construction, so equal to the host layout.
//
// Buffers: rows [launch_rows] (every entry written: pair ids, the sentinel on padding and past the padded end),
// block_experts [launch_rows / BLOCK_M] (-1 past the padded end), padded_rows [1]. An id outside [0, experts) is
// skipped: its pair is placed nowhere, so no expert is read for it.

namespace qtune {
namespace device {

__device__ __forceinline__ unsigned int lanes_below() {
  unsigned int mask;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(mask));
  return mask;
}

// Ints of dynamic shared memory the kernel needs for `experts` experts and `warps` warps.
__host__ __device__ constexpr int moe_align_shared_ints(int experts, int warps) { return warps * experts + 2 * experts + 1 + warps; }

template <int BLOCK_M, int THREADS>
__device__ __forceinline__ void moe_align_block_size(const int* topk_ids, int pairs, int experts, int launch_rows, int* rows,
                                                     int* block_experts, int* padded_rows, int* shared) {
  static_assert(BLOCK_M >= 1 && BLOCK_M <= 4096, "BLOCK_M (rows per block of the layout) is 1 to 4096");
  static_assert(THREADS >= 32 && THREADS <= 1024 && THREADS % 32 == 0, "THREADS is a whole number of warps, at most 1024");
  constexpr int WARPS = THREADS / 32;
  constexpr unsigned int ALL = 0xFFFFFFFFu;
  int* warp_slots = shared;                         // [WARPS][experts]: the warp's pairs per expert, then its next slot
  int* expert_pairs = warp_slots + WARPS * experts;   // [experts]
  int* expert_start = expert_pairs + experts;         // [experts + 1]: the first row of each expert, then the padded rows
  int* warp_sums = expert_start + experts + 1;        // [WARPS]: the scan's per-warp totals
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  for (int i = tid; i < WARPS * experts; i += THREADS) warp_slots[i] = 0;
  __syncthreads();

  // 1. Each warp counts its chunk's pairs per expert (only this warp writes its row: no atomics).
  const int chunk = (pairs + WARPS - 1) / WARPS;
  const int begin = warp * chunk < pairs ? warp * chunk : pairs;
  const int end = begin + chunk < pairs ? begin + chunk : pairs;
  int* slots = warp_slots + warp * experts;
  for (int base = begin; base < end; base += 32) {
    const int pair = base + lane;
    const int id = pair < end ? topk_ids[pair] : -1;
    const bool valid = id >= 0 && id < experts;
    const unsigned int same = __match_any_sync(ALL, valid ? id : -1);
    if (valid && (same & lanes_below()) == 0) slots[id] += __popc(same);
    __syncwarp();
  }
  __syncthreads();

  // 2. Per expert: its pair count, and each warp's first rank among the expert's pairs (warps in pair order).
  for (int e = tid; e < experts; e += THREADS) {
    int running = 0;
    for (int w = 0; w < WARPS; ++w) {
      const int count = warp_slots[w * experts + e];
      warp_slots[w * experts + e] = running;
      running += count;
    }
    expert_pairs[e] = running;
  }
  __syncthreads();

  // 3. expert_start = the exclusive scan of the padded counts (experts without pairs take no rows).
  int carry = 0;
  for (int base = 0; base < experts; base += THREADS) {
    const int e = base + tid;
    const int padded = e < experts ? (expert_pairs[e] + BLOCK_M - 1) / BLOCK_M * BLOCK_M : 0;
    int inclusive = padded;
    for (int offset = 1; offset < 32; offset <<= 1) {
      const int below = __shfl_up_sync(ALL, inclusive, offset);
      if (lane >= offset) inclusive += below;
    }
    if (lane == 31) warp_sums[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
      int total = lane < WARPS ? warp_sums[lane] : 0;
      for (int offset = 1; offset < 32; offset <<= 1) {
        const int below = __shfl_up_sync(ALL, total, offset);
        if (lane >= offset) total += below;
      }
      if (lane < WARPS) warp_sums[lane] = total;
    }
    __syncthreads();
    if (e < experts) expert_start[e] = carry + (warp > 0 ? warp_sums[warp - 1] : 0) + inclusive - padded;
    carry += warp_sums[WARPS - 1];
    __syncthreads();  // warp_sums is reused by the next round
  }
  if (tid == 0) {
    expert_start[experts] = carry;
    *padded_rows = carry;
  }
  __syncthreads();

  // 4. Each warp places its pairs in pair order after the earlier warps' pairs of the same expert.
  for (int base = begin; base < end; base += 32) {
    const int pair = base + lane;
    const int id = pair < end ? topk_ids[pair] : -1;
    const bool valid = id >= 0 && id < experts;
    const unsigned int same = __match_any_sync(ALL, valid ? id : -1);
    if (valid) rows[expert_start[id] + slots[id] + __popc(same & lanes_below())] = pair;
    __syncwarp();
    if (valid && (same & lanes_below()) == 0) slots[id] += __popc(same);
    __syncwarp();
  }

  // 5. The rows step 4 leaves: each expert's padding and everything past the padded end; and each block's expert.
  const int padded_total = expert_start[experts];
  for (int row = tid; row < launch_rows; row += THREADS) {
    if (row >= padded_total) {
      rows[row] = pairs;
      if (row % BLOCK_M == 0) block_experts[row / BLOCK_M] = -1;
      continue;
    }
    // The last expert starting at or before the row holds it (an expert without rows starts where the next one does).
    int low = 0, high = experts - 1;
    while (low < high) {
      const int middle = (low + high + 1) / 2;
      if (expert_start[middle] <= row) low = middle;
      else high = middle - 1;
    }
    if (row - expert_start[low] >= expert_pairs[low]) rows[row] = pairs;
    if (row % BLOCK_M == 0) block_experts[row / BLOCK_M] = low;
  }
}

}  // namespace device
}  // namespace qtune
