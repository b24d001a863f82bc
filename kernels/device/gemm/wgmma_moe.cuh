#pragma once
// The MoE GEMM on the wgmma family's tiles (gemm/wgmma_gemm.cuh with MoeRows, sm_90a): one CTA per (block of BLOCK_M
// token rows of a MoE layout, BLOCK_N columns, K split). Swap-AB fits the gather directly: the tokens are wgmma's B
// operand in shared memory, so a block's rows are cp.async-loaded from the rows its table names (gemm/moe_rows.cuh),
// rows past its live rows zero-filled and never read. The block's expert's prepacked weights are the register A
// operand; outputs are scattered (token-indexed: row = pair, times the router weight for the down projection) or
// written in place (grouped layouts). Blocks with no live rows, and so experts with no tokens, return at once. The
// token-indexed down projection's top-k reduction is mma_moe.cuh's moe_reduce_top_k (family-independent).
//
// PERSISTENT = 1 (token-indexed layout, one K range, no stage in flight): a grid of as many CTAs as fit the SMs walks
// the work units (block of rows, BLOCK_N columns) with the grid's stride, and one cp.async pipeline runs on across
// units: the next unit's first stages load while this one's last stages compute and its outputs are stored. Decode
// units are short (DeepSeek-V3's down projection: 8 K tiles of 256), so a CTA per unit spent a large share of its
// life filling its pipeline (Nsight Compute on the H200: DRAM at 46%). A unit's row table fills in two steps through
// the same pipeline, one unit ahead: its pair ids and expert by cp.async when the previous unit starts, then, STAGES - 1
// tiles later when those have landed, its source rows (and, by cp.async, its router weights and global scale), before
// its first load is issued STAGES - 1 tiles ahead of its compute: a unit must have at least 2 (STAGES - 1) + 1 K tiles.
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

// The persistent kernel's two row-table slots after the pipeline's shared memory: while one unit computes, the next
// one's table fills. Per slot: pair ids, source rows (-1: a padding row), router weights, the expert, its global scale.
template <int BM>
struct PersistentMoeSlots {
  static constexpr int SLOT_BYTES = BM * 12 + 16;
  static constexpr int BYTES = 2 * SLOT_BYTES;
  unsigned char* base;
  __device__ __forceinline__ explicit PersistentMoeSlots(unsigned char* shared_base) : base(shared_base) {}
  __device__ __forceinline__ int* pair(int slot) const { return reinterpret_cast<int*>(base + slot * SLOT_BYTES); }
  __device__ __forceinline__ int* source(int slot) const { return pair(slot) + BM; }
  __device__ __forceinline__ float* weight(int slot) const { return reinterpret_cast<float*>(pair(slot) + 2 * BM); }
  __device__ __forceinline__ int* expert(int slot) const { return pair(slot) + 3 * BM; }
  __device__ __forceinline__ float* global_scale(int slot) const { return reinterpret_cast<float*>(pair(slot) + 3 * BM + 1); }
  // The unit's expert, never negative: a block below the padded rows always has one (a -1 would only make the unit
  // read expert 0's weights for rows it never stores).
  __device__ __forceinline__ int unit_expert(int slot) const { return max(*expert(slot), 0); }
};

template <class F, class T, int IN_FLIGHT, int SCALE_AFTER, int PROJECTION>
__device__ __forceinline__ void wgmma_moe_persistent_gemm(const GemmParams& launch, const MoeParams& moe) {
  using G = WgmmaGemm<F, T, IN_FLIGHT, SCALE_AFTER>;
  static_assert(IN_FLIGHT == 0, "the persistent MoE kernel runs one wgmma group at a time: IN_FLIGHT must be 0");
  static_assert(PROJECTION == kMoeGateUp || PROJECTION == kMoeDown, "PROJECTION is kMoeGateUp or kMoeDown");
  static_assert(T::SPLIT_K == 1, "the persistent MoE kernel walks whole units: SPLIT_K must be 1");
  static_assert(T::THREADS >= T::BLOCK_M, "a unit's row table is filled by one thread per row: THREADS >= BLOCK_M");
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(sizeof(F) == 0, "wgmma needs sm_90a (compile for the architecture-specific target)");
#endif
  constexpr int BM = G::BM, BN = G::BN, BK = G::BK, THREADS = G::THREADS;
  constexpr int LOOKAHEAD = T::STAGES - 1;

  extern __shared__ __align__(1024) unsigned char shared[];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int group = lane >> 2;
  const int quad = lane & 3;
  const u32 smem = (shared_address(shared) + 1023u) & ~1023u;
  const PersistentMoeSlots<BM> slots(shared + G::SHARED_BYTES);

  // ---- the units: blocks of the padded rows (each with a live row) times column tiles, column-fastest as the
  // one-CTA-per-unit grid's order: units running at once share their block's activation rows in L2 (the
  // block-fastest order ran DeepSeek-V3's gate-up 2-10% slower than one CTA per unit on the H200) ----
  const int tiles_n = launch.n / BN;
  const int k_tiles = launch.k / BK;
  const int padded = moe.padded_rows != 0 ? load_int(reinterpret_cast<const int*>(moe.padded_rows)) : launch.m;
  const int blocks = (min(padded, launch.m) + BM - 1) / BM;
  const int units = blocks * tiles_n;
  const int first_unit = blockIdx.x;
  const int stride = gridDim.x;
  if (first_unit >= units) return;
  const int my_units = (units - 1 - first_unit) / stride + 1;
  auto block_of = [&](int j) { return (first_unit + j * stride) / tiles_n; };
  auto n0_of = [&](int j) { return (first_unit + j * stride) % tiles_n * BN; };

  const int* rows = reinterpret_cast<const int*>(moe.rows);
  // Step 1 of unit j's table (slot j % 2): its pair ids and expert.
  auto request_table = [&](int j) {
    const int slot = j & 1;
    const int block = block_of(j);
    if (tid < BM) cp_async_4_zfill(shared_address(slots.pair(slot) + tid), rows + block * BM + tid, true);
    if (tid == THREADS - 1) {
      cp_async_4_zfill(shared_address(slots.expert(slot)), reinterpret_cast<const int*>(moe.block_experts) + block, true);
    }
  };
  // Step 2, once step 1's copies have landed and a barrier passed: source rows, and copies of the router weights
  // (down) and the expert's global scale.
  auto finish_table = [&](int j) {
    const int slot = j & 1;
    if (tid < BM) {
      const int pair = slots.pair(slot)[tid];
      const bool live = pair >= 0 && pair < moe.pairs;
      slots.source(slot)[tid] = live ? (PROJECTION == kMoeGateUp ? pair / moe.top_k : pair) : -1;
      if (PROJECTION == kMoeDown && live) {
        cp_async_4_zfill(shared_address(slots.weight(slot) + tid), reinterpret_cast<const float*>(moe.router_weights) + pair, true);
      }
    }
    if (tid == THREADS - 1) {
      const int expert = slots.unit_expert(slot);
      cp_async_4_zfill(shared_address(slots.global_scale(slot)), reinterpret_cast<const float*>(launch.global_scale) + expert, true);
    }
  };
  request_table(0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();
  finish_table(0);
  cp_async_commit();
  cp_async_wait<0>();
  __syncthreads();

  // ---- the loads: unit load_unit's K tile load_k next ----
  const WgmmaLoadStrides<G> strides(launch.k);
  int load_unit = 0, load_k = 0;
  GemmParams load_params = expert_params(launch, moe, slots.unit_expert(0));
  int load_n0 = n0_of(0);
  const int* load_source = slots.source(0);
  auto issue_load = [&](int stage) {
    if (load_k == 0 && load_unit > 0) {
      const int slot = load_unit & 1;
      load_params = expert_params(launch, moe, slots.unit_expert(slot));
      load_n0 = n0_of(load_unit);
      load_source = slots.source(slot);
    }
    wgmma_load_stage<G, true, true>(smem, stage, load_k, load_params, strides, 0, load_n0, 0, load_source);
    if (++load_k == k_tiles) {
      load_k = 0;
      ++load_unit;
    }
  };
  const int total = my_units * k_tiles;
#pragma unroll
  for (int s = 0; s < LOOKAHEAD; ++s) {
    if (s < total) issue_load(s);
    cp_async_commit();
  }

  // ---- the computes: unit unit's K tile k ----
  auto channel_of = [&](int j) {
    return channel_vectors<F>(expert_params(launch, moe, slots.unit_expert(j & 1)), n0_of(j) + warp * 16 + group * 2);
  };
  StripVectors<F> channel = channel_of(0);
  WgmmaAccumulators<G> registers;
  registers.clear();
  u32 fragment[G::KSTEPS][4];
  int unit = 0, k = 0;
  for (int it = 0; it < total; ++it) {
    cp_async_wait<LOOKAHEAD - 1>();
    // The unit's live rows only (its table is slot unit % 2 until the unit after next requests one); the other rows
    // keep an earlier unit's values, which reach no output.
    wgmma_widen_stage<G, true>(smem, it % T::STAGES, BM, slots.source(unit & 1));
    fence_proxy_async_shared();  // this thread's copies visible to wgmma before the barrier
    __syncthreads();             // also: every warpgroup's wgmmas of the slot refilled below have ended
    if (unit + 1 < my_units) {
      if (k == 0) request_table(unit + 1);
      if (k == LOOKAHEAD) finish_table(unit + 1);
    }
    if (it + LOOKAHEAD < total) issue_load((it + LOOKAHEAD) % T::STAGES);
    cp_async_commit();
    const int stage = it % T::STAGES;
    wgmma_dequantize_stage<G>(smem, stage, channel, fragment);
    wgmma_issue_stage<G>(smem, stage, !G::starts_group(k, 0), fragment, registers);
    wgmma_wait<0>();
    if (G::SCALE_AFTER && G::ends_group(k, 0, k_tiles)) wgmma_flush_groups<G>(smem, stage, registers);
    if (++k < k_tiles) continue;

    // ---- the unit's epilogue: outputs scattered to their pairs' rows, times the router weight (down); no bias ----
#pragma unroll
    for (int i = 0; i < G::ACCUMULATORS; ++i) wgmma_fence_operand(registers.acc[i]);
    const int slot = unit & 1;
    const GemmParams params = expert_params(launch, moe, slots.unit_expert(slot));
    const float global_scale = *slots.global_scale(slot);
    unsigned short* c_global = reinterpret_cast<unsigned short*>(launch.c);
    constexpr int OCTETS = BM / 8;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int column = n0_of(unit) + warp * 16 + group + half * 8;
      const float scale = output_scale<F>(params, global_scale, column);
#pragma unroll
      for (int j = 0; j < OCTETS; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int r = j * 8 + quad * 2 + e;
          if (slots.source(slot)[r] >= 0) {
            const float weight = PROJECTION == kMoeDown ? slots.weight(slot)[r] : 1.0f;
            const float value = registers.acc[4 * j + half * 2 + e] * scale * weight * activation_row_scale<F>(launch, slots.source(slot)[r]);
            c_global[static_cast<long long>(slots.pair(slot)[r]) * launch.n + column] =
                static_cast<unsigned short>(pack_output<F>(value, 0.0f) & 0xFFFFu);
          }
        }
      }
    }
    registers.clear();
    k = 0;
    if (++unit < my_units) channel = channel_of(unit);
  }
  cp_async_wait<0>();
}

}  // namespace device
}  // namespace qtune
