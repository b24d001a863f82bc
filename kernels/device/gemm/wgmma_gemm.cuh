#pragma once
// C[M,N] = A[M,K] * dequant(W[N,K])^T (+ bias) on Hopper's warpgroup MMA (wgmma, sm_90a), f16/bf16 or fp8 activations.
//
// fp8 activations (W4A8, W8A8 fp8: formats with F::QUANTIZED_ACT, on the fp8-operand weight layout) run widened: rows
// are cp.async-loaded as they are into the f16 slabs themselves and each thread converts the chunks it loaded to f16
// in place (exact) before the stage's barrier; weights are dequantized to exact f16 (integer codes, fp4, fp8), and
// the weight and activation scales apply to the f32 sums (per channel and token in the epilogue, K groups with
// SCALE_AFTER). Within each 16 K an fp8 register's lanes 0/2 and 1/3 become one f16 register each, so the activations
// are widened in the same order: real k = 4q + 2e + h (q < 4, e < 2, h < 2) goes to position 8h + 2q + e.
//
// Swap-AB: the dequantized weights are wgmma's A operand, in registers, and the activations its B operand, in shared
// memory. Warp w of a CTA owns the 16 weight columns of strip w; the four B registers the mma family feeds mma.sync
// for a strip's two n8 tiles are exactly the m16n8k16 A fragment of those 16 columns, which is what a warp contributes
// to a warpgroup's m64 A. Tokens are wgmma's N (BLOCK_M = 16..256), read K-major from shared memory through a matrix
// descriptor: activation tiles are stored as 64-deep K slabs of 128-byte rows with the 128-byte swizzle (16-byte chunk c
// of row r at c ^ (r % 8)). Weights use the mma family's prepacked layout and dequantization; the cp.async pipeline,
// split-K reduction and epilogue follow mma_gemm.cuh.
//
// The same kernel serves the MoE GEMM (gemm/wgmma_moe.cuh): with ROWS = MoeRows<...> a CTA's BLOCK_M token rows are one
// block of a MoE layout (gemm/moe_rows.cuh): activation rows gathered through a row table by the same cp.async loads,
// the block's expert's weights, and output rows scattered. With DenseRows every MoE branch is compiled out.
#include "gemm/epilogue.cuh"
#include "gemm/moe_rows.cuh"
#include "gemm/split_k.cuh"
#include "gemm/swizzled_operand.cuh"
#include "gemm/tile_schedule.cuh"
#include "gemm/weight_vectors.cuh"
#include "gemm/wgmma_ptx.cuh"

namespace qtune {
namespace device {

// IN_FLIGHT: wgmma groups left running while the next stage is dequantized (0 or 1). With 1 the fragments alternate
// between two register sets, and a shared-memory slot is refilled two stages after its compute instead of one, so the
// loads run STAGES - 2 stages ahead.
// SCALE_AFTER (0 or 1), for K-group scales without zero points: each group's weights enter the wgmma unscaled, into
// partial sums of their own, and the group's scale multiplies those (one FMA per accumulator and group) instead of
// every dequantized pair (one packed multiply per two weights): decode tiles are bound by the dequantization's issue
// rate, not by memory (Nsight Compute, DeepSeek-V3 MoE gate-up on the H200: 75% issue-active, DRAM at 46%).
template <class F, class T, int IN_FLIGHT_ = 0, int SCALE_AFTER_ = 0>
struct WgmmaGemm {
  using Format = F;
  using Tiles = T;
  static constexpr int BM = T::BLOCK_M, BN = T::BLOCK_N, BK = T::BLOCK_K;
  static constexpr int THREADS = T::THREADS;
  static constexpr int WARPS = BN / 16;           // one warp per 16-column weight strip, four per warpgroup
  static constexpr int KA = BK / F::ATOM_K;       // weight atoms along K per tile
  static constexpr int KSTEPS = BK / 16;          // wgmma k16 steps per tile
  static constexpr bool WIDENED = F::QUANTIZED_ACT;  // fp8 activations widened to f16 (above)
  static constexpr int MMA_TYPE = WIDENED ? kElementF16 : F::COMPUTE_TYPE;  // the wgmma's operand type
  static constexpr int ACT_BYTES = WIDENED ? 1 : 2;  // bytes of one activation in global memory
  static constexpr int A_SLAB_BYTES = BM * 128;   // 64 K of every token row
  static constexpr int A_STAGE_BYTES = BM * BK * 2;
  static constexpr int W_STRIP_BYTES = KA * F::ATOM_BYTES;
  static constexpr int W_STAGE_BYTES = WARPS * W_STRIP_BYTES;
  static constexpr int GROUP_K = F::STAGE_GROUP_K;
  static constexpr int GROUP_ROWS = GROUP_K > 0 ? (GROUP_K < BK ? BK / GROUP_K : 1) : 0;
  static constexpr int S_ROW_BYTES = BN * F::SCALE_BYTES;
  static constexpr int Z_ROW_BYTES = BN * 2;
  static constexpr int S_STAGE_BYTES = F::STAGED_SCALES ? GROUP_ROWS * S_ROW_BYTES : 0;
  static constexpr int Z_STAGE_BYTES = F::STAGED_ZEROS ? GROUP_ROWS * Z_ROW_BYTES : 0;
  // Every stage starts 1024-byte aligned: the swizzle pattern is a function of the shared address.
  static constexpr int STAGE_BYTES = (A_STAGE_BYTES + W_STAGE_BYTES + S_STAGE_BYTES + Z_STAGE_BYTES + 1023) / 1024 * 1024;
  static constexpr int ALIGNMENT_SLACK = 1024;  // the dynamic shared window is aligned up to 1024 bytes at run time
  static constexpr int SHARED_BYTES = T::STAGES * STAGE_BYTES + ALIGNMENT_SLACK;
  static constexpr int ACCUMULATORS = BM / 2;   // m64nBM f32 accumulators per thread
  static constexpr int IN_FLIGHT = IN_FLIGHT_;
  static constexpr bool SCALE_AFTER = SCALE_AFTER_ != 0;
  // SCALE_AFTER: partial-sum sets per stage (one per K group of a stage, or one spanning stages), the k16 steps of
  // each, and the stages one group spans.
  static constexpr int PARTIAL_SETS = SCALE_AFTER ? (GROUP_K > 0 && GROUP_K < BK ? BK / GROUP_K : 1) : 0;
  static constexpr int SET_STEPS = PARTIAL_SETS > 1 ? KSTEPS / PARTIAL_SETS : KSTEPS;
  static constexpr int STAGES_PER_GROUP = SCALE_AFTER && GROUP_K > BK ? GROUP_K / BK : 1;
  // SCALE_AFTER: whether the it-th K tile of a range of tile_count tiles from kt_begin starts / ends a K group that
  // spans stages (a split's range may start or end inside one).
  static __device__ __forceinline__ bool starts_group(int it, int kt_begin) {
    return STAGES_PER_GROUP == 1 || it == 0 || (kt_begin + it) % STAGES_PER_GROUP == 0;
  }
  static __device__ __forceinline__ bool ends_group(int it, int kt_begin, int tile_count) {
    return STAGES_PER_GROUP == 1 || it == tile_count - 1 || (kt_begin + it + 1) % STAGES_PER_GROUP == 0;
  }
  // Widened activations: where 16-byte fp8 chunk c of token row r lands, the first of the two f16 chunks it becomes
  // (2c, at slab 2c / 8, row r, chunk (2c % 8) ^ (r % 8)). The second (2c + 1) is at this address ^ 16: its swizzled
  // index differs in the lowest bit, the other parity, so no chunk lands where another thread's conversion writes and
  // the conversion runs in place, with no shared memory of its own.
  static __device__ __forceinline__ u32 widened_landing(u32 stage_base, int row, int chunk) {
    const int f16_chunk = 2 * chunk;
    return stage_base + (f16_chunk / 8) * A_SLAB_BYTES + row * 128 + (((f16_chunk % 8) ^ (row & 7)) * 16);
  }
  // A MoE GEMM keeps its row tables after the window: source row, target row (int) and router weight (f32) per row.
  static constexpr int MOE_TABLE_BYTES = BM * 12;

  static_assert(!WIDENED || (is_fp8(F::ACTIVATION) && F::FP8_MMA), "the wgmma family widens fp8 activations only (int8 and int4 ones are not)");
  static_assert(!WIDENED || F::ACTIVATION_SCALES != kActivationScaleGroup, "widened activations take per-token or per-tensor scales (no K groups)");
  static_assert(WIDENED || F::FLUSH_K == 0, "the wgmma family has no partial-sum flushes (f32 accumulators throughout)");
  static_assert(BM == 16 || BM == 32 || BM == 64 || BM == 128 || BM == 256, "BLOCK_M (wgmma N, the tokens) must be 16, 32, 64, 128 or 256");
  static_assert(BN % 64 == 0, "BLOCK_N must be a multiple of 64: one warpgroup (4 warps x 16 columns) per 64 columns");
  static_assert(BK % 64 == 0, "BLOCK_K must be a multiple of 64 (one 128-byte swizzled slab of activations)");
  static_assert(BK % F::ATOM_K == 0, "BLOCK_K must be a multiple of the weight atom depth (64 K for f16/bf16, 128 for fp8 operands)");
  static_assert(T::WARPS_M == 1 && T::WARPS_K == 1 && T::WARPS_N == WARPS, "the wgmma family runs one warp per weight strip (WARPS_N = BLOCK_N / 16)");
  static_assert(GROUP_K == 0 || GROUP_K % BK == 0 || BK % GROUP_K == 0, "BLOCK_K must divide the scale group size or be a multiple of it");
  static_assert(IN_FLIGHT == 0 || IN_FLIGHT == 1, "IN_FLIGHT (wgmma groups kept running) must be 0 or 1");
  static_assert(T::STAGES - 1 - IN_FLIGHT >= 1, "a wgmma group in flight needs STAGES >= 3 (the loads run STAGES - 2 ahead)");
  static_assert(SCALE_AFTER_ == 0 || SCALE_AFTER_ == 1, "SCALE_AFTER (group scales on the partial sums) must be 0 or 1");
  static_assert(!SCALE_AFTER || ((F::SCALES == kScaleDequant || (WIDENED && F::SCALES == kScaleAccumulator)) && F::STAGED_SCALES && !F::HAS_ZERO),
                "SCALE_AFTER needs K-group weight scales and no zero points (a zero point is subtracted before the scale)");
  static_assert(!WIDENED || F::SCALES == kScaleEpilogue || SCALE_AFTER, "widened activations with K-group weight scales need SCALE_AFTER (gscale=1)");
  static_assert(!SCALE_AFTER || IN_FLIGHT == 0, "SCALE_AFTER flushes the partial sums after each stage's wgmmas end: IN_FLIGHT must be 0");
  static_assert(!SCALE_AFTER || PARTIAL_SETS * ACCUMULATORS <= 64, "SCALE_AFTER's partial sums (sets x BLOCK_M / 2 registers) must stay within 64 registers");
};


// ---- the steps of one pipeline stage, shared by the one-tile-per-CTA kernel below and the persistent MoE kernel
// (gemm/wgmma_moe.cuh) ----

// The per-thread strides of wgmma_load_stage, the same for every tile of a GEMM: computed once, out of the K loop.
template <class G>
struct WgmmaLoadStrides {
  long long w_strip_stride, w_thread_offset, a_row_bytes;
  __device__ __forceinline__ explicit WgmmaLoadStrides(int k) {
    using F = typename G::Format;
    constexpr int STRIP_CHUNKS = G::W_STRIP_BYTES / 16;
    const int tid = threadIdx.x;
    w_strip_stride = static_cast<long long>(k / F::ATOM_K) * F::ATOM_BYTES;
    w_thread_offset = STRIP_CHUNKS >= G::THREADS ? tid * 16LL : (tid / STRIP_CHUNKS) * w_strip_stride + (tid % STRIP_CHUNKS) * 16LL;
    a_row_bytes = static_cast<long long>(k) * G::ACT_BYTES;
  }
};

// Loads K tile `kt` of the tile with columns n0.. into stage slot `stage`: its token rows (dense: rows m0.. of A, the
// first rows_valid of them; MoE: the activation rows `source` names, LIVE_BY_SOURCE: rows whose source is -1 are dead,
// else the first rows_valid), the weights of p (the block's expert's for MoE) and their staged group vectors.
template <class G, bool IS_MOE, bool LIVE_BY_SOURCE = false>
__device__ __forceinline__ void wgmma_load_stage(u32 smem, int stage, int kt, const GemmParams& p, const WgmmaLoadStrides<G>& strides,
                                                 int m0, int n0, int rows_valid, const int* source) {
  using F = typename G::Format;
  constexpr int BM = G::BM, BN = G::BN, BK = G::BK, THREADS = G::THREADS;
  constexpr int CPR = BK * G::ACT_BYTES / 16;  // 16-byte activation chunks per token row of a tile
  constexpr int GROUP_K = G::GROUP_K;
  constexpr int W_CHUNKS = G::W_STAGE_BYTES / 16;
  constexpr int STRIP_CHUNKS = G::W_STRIP_BYTES / 16;
  constexpr bool W_REGULAR = RegularWeightChunks<W_CHUNKS, STRIP_CHUNKS, THREADS>::value;
  const int tid = threadIdx.x;
  const char* a_global = reinterpret_cast<const char*>(p.a);
  const char* w_global = reinterpret_cast<const char*>(p.weights);
  const long long w_strip_stride = strides.w_strip_stride;
  const long long w_thread_offset = strides.w_thread_offset;
  const long long a_row_bytes = strides.a_row_bytes;

  const u32 base = smem + stage * G::STAGE_BYTES;
  const int k0 = kt * BK;
  // Activations: chunk c of token row r goes to slab c / 8, row r, chunk (c % 8) ^ (r % 8); widened ones to
  // widened_landing (wgmma_widen_stage converts them in place).
  const char* a_tile = a_global + static_cast<long long>(m0) * a_row_bytes + k0 * G::ACT_BYTES;
#pragma unroll
  for (int c = 0; c < (BM * CPR + THREADS - 1) / THREADS; ++c) {
    const unsigned i = tid + c * THREADS;
    const int row = i / CPR;
    const int chunk = i % CPR;
    if (BM * CPR % THREADS == 0 || i < unsigned(BM * CPR)) {
      // MoE: the block's row r is activation row source[r] (gathered), not m0 + r.
      int source_row = 0;
      bool live;
      if constexpr (LIVE_BY_SOURCE) {
        source_row = source[row];
        live = source_row >= 0;
      } else {
        live = row < rows_valid;
      }
      if (live) {
        if constexpr (IS_MOE && !LIVE_BY_SOURCE) source_row = source[row];
        const char* a_row = IS_MOE ? a_global + source_row * a_row_bytes + k0 * G::ACT_BYTES : a_tile + row * a_row_bytes;
        const u32 target = G::WIDENED ? G::widened_landing(base, row, chunk)
                                      : base + (chunk / 8) * G::A_SLAB_BYTES + row * 128 + (((chunk % 8) ^ (row & 7)) * 16);
        cp_async_16(target, a_row + chunk * 16);
      }
    }
  }
  // Weights: BLOCK_N / 16 contiguous strip runs (see mma_gemm.cuh for the per-thread base). No evict-first hint:
  // with several M tiles the weights are read again (and see copy_weight_strips).
  const char* w_tile = w_global + (static_cast<long long>(n0 / 16) * (p.k / F::ATOM_K) + k0 / F::ATOM_K) * F::ATOM_BYTES;
  if constexpr (W_REGULAR) {
    copy_weight_strips<W_CHUNKS, STRIP_CHUNKS, THREADS>(base + G::A_STAGE_BYTES, w_tile + w_thread_offset, w_strip_stride, tid);
  } else {
    for (int i = tid; i < W_CHUNKS; i += THREADS) {
      cp_async_16(base + G::A_STAGE_BYTES + i * 16, w_tile + (i / STRIP_CHUNKS) * w_strip_stride + (i % STRIP_CHUNKS) * 16);
    }
  }
  const int first_group = GROUP_K > 0 ? k0 / GROUP_K : 0;
  const u32 s_base = base + G::A_STAGE_BYTES + G::W_STAGE_BYTES;
  stage_weight_vectors<F, BN, G::GROUP_ROWS, THREADS>(s_base, s_base + G::S_STAGE_BYTES, p, first_group, n0, tid);
}

// Widened activations: converts the fp8 chunks this thread loaded into slot `stage` (wgmma_load_stage's chunks of
// this thread: rows below rows_live, or with LIVE_BY_SOURCE rows whose source is not -1) to f16 in the swizzled slabs,
// in the K order of WgmmaGemm. Called once the thread's copies of the stage have landed and before the barrier that
// hands the stage to the wgmmas, so no other thread's copies are waited for.
template <class G, bool LIVE_BY_SOURCE = false>
__device__ __forceinline__ void wgmma_widen_stage(u32 smem, int stage, int rows_live, const int* source = nullptr) {
  if constexpr (G::WIDENED) {
    using F = typename G::Format;
    constexpr int BM = G::BM, BK = G::BK, THREADS = G::THREADS;
    constexpr int CPR = BK / 16;  // 16-byte fp8 chunks per token row
    constexpr bool e5m2 = F::ACTIVATION == kElementE5M2;
    const u32 base = smem + stage * G::STAGE_BYTES;
#pragma unroll
    for (int c = 0; c < (BM * CPR + THREADS - 1) / THREADS; ++c) {
      const unsigned i = threadIdx.x + c * THREADS;
      const int row = i / CPR;
      const int chunk = i % CPR;
      if ((BM * CPR % THREADS == 0 || i < unsigned(BM * CPR)) && (LIVE_BY_SOURCE ? source[row] >= 0 : row < rows_live)) {
        u32 raw[4];
        const u32 landing = G::widened_landing(base, row, chunk);
        ld_shared_128(raw, landing);
        u32 even[4], odd[4];  // the f16 chunks 2 chunk (bytes 0, 2, .., 14) and 2 chunk + 1 (bytes 1, 3, .., 15)
#pragma unroll
        for (int w = 0; w < 4; ++w) {
          const u32 lanes = prmt(raw[w], raw[w], 0x3120);
          even[w] = fp8x2_to_f16x2<e5m2>(static_cast<unsigned short>(lanes & 0xFFFFu));
          odd[w] = fp8x2_to_f16x2<e5m2>(static_cast<unsigned short>(lanes >> 16));
        }
        st_shared_128(landing, even[0], even[1], even[2], even[3]);
        st_shared_128(landing ^ 16u, odd[0], odd[1], odd[2], odd[3]);  // f16 chunk 2 chunk + 1 (widened_landing)
      }
    }
  }
}

// Widened activations: this warp's strip of the K tile in slot `stage` as exact f16 A fragments, unscaled; fp8 k-step
// ks (32 K) register r of the n8 half h gives the k16 step 2 ks + r its lanes 0/2 (fragment registers h) and 1/3 (2 + h).
template <class G>
__device__ __forceinline__ void wgmma_widened_dequantize_stage(u32 smem, int stage, u32 (&fragment)[G::KSTEPS][4]) {
  using F = typename G::Format;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const u32 w_smem = smem + stage * G::STAGE_BYTES + G::A_STAGE_BYTES;
#pragma unroll
  for (int atom = 0; atom < G::KA; ++atom) {
    u32 words[F::THREAD_WORDS];
    load_atom_words<F>(words, w_smem + (warp * G::KA + atom) * F::ATOM_BYTES, lane);
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        u32* target = fragment[atom * 8 + ks * 2 + r];
#pragma unroll
        for (int nsub = 0; nsub < 2; ++nsub) widened_slot<F>(target[nsub], target[2 + nsub], words, (ks * 2 + nsub) * 2 + r);
      }
    }
  }
}

// Dequantizes this warp's strip of the K tile in slot `stage` into the A fragments of its k16 steps (f16/bf16
// activations).
template <class G>
__device__ __forceinline__ void wgmma_weight_only_dequantize_stage(u32 smem, int stage, const StripVectors<typename G::Format>& channel,
                                                                   u32 (&fragment)[G::KSTEPS][4]) {
  using F = typename G::Format;
  constexpr int GROUP_K = G::GROUP_K;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int group = lane >> 2;
  const u32 w_smem = smem + stage * G::STAGE_BYTES + G::A_STAGE_BYTES;
  const u32 s_smem = w_smem + G::W_STAGE_BYTES;
  const u32 z_smem = s_smem + G::S_STAGE_BYTES;
#pragma unroll
  for (int atom = 0; atom < G::KA; ++atom) {
    u32 words[F::THREAD_WORDS];
    load_atom_words<F>(words, w_smem + (warp * G::KA + atom) * F::ATOM_BYTES, lane);
    StripVectors<F> vectors = channel;
#pragma unroll
    for (int ks = 0; ks < 4; ++ks) {
      if constexpr (F::SCALES == kScaleDequant && G::GROUP_ROWS > 0 && !G::SCALE_AFTER) {
        const bool reload = ks == 0 || (GROUP_K < F::ATOM_K && (ks * F::KSTEP) % GROUP_K == 0);
        if (reload) {
          const int row = GROUP_K >= G::BK ? 0 : (atom * F::ATOM_K + ks * F::KSTEP) / GROUP_K;
          load_staged_vectors<F, G::S_ROW_BYTES, G::Z_ROW_BYTES>(vectors, s_smem, z_smem, row, (warp * 16 + group * 2) * 2);
        }
      }
      u32 b[2][2];  // [n8 tile of the strip = fragment row half][register]
#pragma unroll
      for (int nsub = 0; nsub < 2; ++nsub) {
        dequant_pair<F, !G::SCALE_AFTER>(b[nsub][0], b[nsub][1], words, (ks * 2 + nsub) * 2, vectors, nsub);
      }
      u32* target = fragment[atom * 4 + ks];
      target[0] = b[0][0];
      target[1] = b[1][0];
      target[2] = b[0][1];
      target[3] = b[1][1];
    }
  }
}

// This warp's A fragments of the K tile in slot `stage`.
template <class G>
__device__ __forceinline__ void wgmma_dequantize_stage(u32 smem, int stage, const StripVectors<typename G::Format>& channel,
                                                       u32 (&fragment)[G::KSTEPS][4]) {
  if constexpr (G::WIDENED) {
    wgmma_widened_dequantize_stage<G>(smem, stage, fragment);
  } else {
    wgmma_weight_only_dequantize_stage<G>(smem, stage, channel, fragment);
  }
}

// The registers wgmmas write: the accumulators, and with SCALE_AFTER the running K groups' unscaled sums (the
// wgmma's accumulators then; acc only takes the flushes).
template <class G>
struct WgmmaAccumulators {
  float acc[G::ACCUMULATORS];
  float partial[G::SCALE_AFTER ? G::PARTIAL_SETS : 1][G::SCALE_AFTER ? G::ACCUMULATORS : 1];

  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int i = 0; i < G::ACCUMULATORS; ++i) acc[i] = 0.0f;
  }
  // Keeps the compiler from moving reads or writes of the registers wgmmas write across the wgmmas in flight.
  __device__ __forceinline__ void fence() {
    if constexpr (G::SCALE_AFTER) {
#pragma unroll
      for (int set = 0; set < G::PARTIAL_SETS; ++set) {
#pragma unroll
        for (int i = 0; i < G::ACCUMULATORS; ++i) wgmma_fence_operand(partial[set][i]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < G::ACCUMULATORS; ++i) wgmma_fence_operand(acc[i]);
    }
  }
};

// Issues all of a stage's k16 steps as one wgmma group: issued per k-step (a fence each) they measured no faster
// (call P). SCALE_AFTER: each K group's steps into its partial-sum set, the group's first step overwriting it unless
// the group continues from the previous stage (`continues_group`).
template <class G>
__device__ __forceinline__ void wgmma_issue_stage(u32 smem, int stage, bool continues_group, const u32 (&fragment)[G::KSTEPS][4],
                                                  WgmmaAccumulators<G>& r) {
  using F = typename G::Format;
  // k16 step s reads 32 bytes at offset (s % 4) * 32 of every 128-byte row of slab s / 4.
  const SwizzledOperand tokens(smem + stage * G::STAGE_BYTES);
  auto descriptor = [&](int step) { return tokens.at((step / 4) * G::A_SLAB_BYTES + (step % 4) * 32); };
  r.fence();
  wgmma_fence();
  if constexpr (G::SCALE_AFTER) {
    const int continue_group = continues_group ? 1 : 0;
#pragma unroll
    for (int step = 0; step < G::KSTEPS; ++step) {
      const int scale_d = step % G::SET_STEPS == 0 ? continue_group : 1;
      WgmmaRs<G::BM, G::MMA_TYPE, G::MMA_TYPE>::run(r.partial[step / G::SET_STEPS], fragment[step], descriptor(step), scale_d);
    }
  } else {
#pragma unroll
    for (int step = 0; step < G::KSTEPS; ++step) WgmmaRs<G::BM, G::MMA_TYPE, G::MMA_TYPE>::run(r.acc, fragment[step], descriptor(step), 1);
  }
  wgmma_commit();
  r.fence();
}

// SCALE_AFTER, once a stage's wgmmas have ended and the stage ends K groups: those groups' partial sums, times their
// scales, into acc. The scale row is the stage's staged one (its slot is refilled only after the next stage's barrier).
template <class G>
__device__ __forceinline__ void wgmma_flush_groups(u32 smem, int stage, WgmmaAccumulators<G>& r) {
  if constexpr (G::SCALE_AFTER) {
    using F = typename G::Format;
    auto compute_to_f32 = [](unsigned short bits) { return F::COMPUTE_TYPE == kElementF16 ? f16_to_f32(bits) : bf16_to_f32(bits); };
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    const int group = lane >> 2;
    const u32 s_smem = smem + stage * G::STAGE_BYTES + G::A_STAGE_BYTES + G::W_STAGE_BYTES;
#pragma unroll
    for (int set = 0; set < G::PARTIAL_SETS; ++set) {
      float scale[2];
      if constexpr (F::SCALES == kScaleAccumulator) {
        // f32 scales in column order (widened fp8 activations)
        scale[0] = ld_shared_f32(s_smem + set * G::S_ROW_BYTES + (warp * 16 + group) * 4);
        scale[1] = ld_shared_f32(s_smem + set * G::S_ROW_BYTES + (warp * 16 + group + 8) * 4);
      } else {
        // compute-type scales, columns group and group + 8 side by side
        u32 word;
        ld_shared_32(&word, s_smem + set * G::S_ROW_BYTES + (warp * 16 + group * 2) * 2);
        scale[0] = compute_to_f32(static_cast<unsigned short>(word & 0xFFFFu));
        scale[1] = compute_to_f32(static_cast<unsigned short>(word >> 16));
      }
      // partial[set][4 j + e] is column warp * 16 + group + 8 (e / 2): scale[e / 2].
#pragma unroll
      for (int i = 0; i < G::ACCUMULATORS; ++i) r.acc[i] = fmaf(r.partial[set][i], scale[(i % 4) / 2], r.acc[i]);
    }
  }
}

// ROWS: DenseRows, or MoeRows with `moe` its layout's tables.
template <class F, class T, int IN_FLIGHT = 0, int SCALE_AFTER = 0, class ROWS = DenseRows>
__device__ __forceinline__ void wgmma_gemm(const GemmParams& launch, const MoeParams* moe = nullptr) {
  using G = WgmmaGemm<F, T, IN_FLIGHT, SCALE_AFTER>;
  constexpr bool IS_MOE = ROWS::LAYOUT != 0;
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(sizeof(F) == 0, "wgmma needs sm_90a (compile for the architecture-specific target)");
#endif
  constexpr int BM = G::BM, BN = G::BN, BK = G::BK, THREADS = G::THREADS;
  constexpr int CPR = BK / 8;  // 16-byte activation chunks per token row of a tile

  extern __shared__ __align__(1024) unsigned char shared[];
  __shared__ int last_split_flag;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;  // the weight strip this warp owns
  const int group = lane >> 2;
  const int quad = lane & 3;

  // ---- which output tile and K range ----
  const TileSchedule<BM, BN, BK, T::RASTER, T::SPLIT_K> schedule(launch);
  const TileWork work = schedule.work(launch, blockIdx.x);
  // MoE: the block's expert and live rows, its row tables after the pipeline's shared memory (block_rows).
  const MoeTables<BM> tables(shared + G::SHARED_BYTES);
  const MoeBlock block = block_rows<ROWS, BM, THREADS>(launch, moe, work.tile_m, work.rows_valid, tables);
  if (block.expert < 0) return;
  decltype(auto) p = ROWS::params(launch, moe, block.expert);
  const int m0 = work.m0, n0 = work.n0, rows_valid = block.live_rows, kt_begin = work.kt_begin;
  const int tile_count = work.kt_end - work.kt_begin;

  const u32 smem = (shared_address(shared) + 1023u) & ~1023u;
  const WgmmaLoadStrides<G> strides(p.k);

  // Token rows past M are never loaded: zero them once in every stage.
  if (rows_valid < BM) {
    const int missing = BM - rows_valid;
    for (int i = tid; i < T::STAGES * missing * CPR; i += THREADS) {
      const int stage = i / (missing * CPR);
      const int rest = i % (missing * CPR);
      const int row = rows_valid + rest / CPR;
      const int chunk = rest % CPR;
      st_shared_128(smem + stage * G::STAGE_BYTES + (chunk / 8) * G::A_SLAB_BYTES + row * 128 + (((chunk % 8) ^ (row & 7)) * 16), 0, 0,
                    0, 0);
    }
  }

  auto load_stage = [&](int stage, int kt) { wgmma_load_stage<G, IS_MOE>(smem, stage, kt, p, strides, m0, n0, rows_valid, tables.source); };

  // Per-channel vectors of this warp's strip (columns group and group + 8): loaded once.
  const StripVectors<F> channel = channel_vectors<F>(p, n0 + warp * 16 + group * 2);

  WgmmaAccumulators<G> registers;
  registers.clear();
  float (&acc)[G::ACCUMULATORS] = registers.acc;

  auto dequantize_stage = [&](int stage, u32 (&fragment)[G::KSTEPS][4]) { wgmma_dequantize_stage<G>(smem, stage, channel, fragment); };
  auto issue_stage = [&](int it, int stage, const u32 (&fragment)[G::KSTEPS][4]) {
    wgmma_issue_stage<G>(smem, stage, !G::starts_group(it, kt_begin), fragment, registers);
  };
  auto flush_groups = [&](int it, int stage) {
    if (G::SCALE_AFTER && G::ends_group(it, kt_begin, tile_count)) wgmma_flush_groups<G>(smem, stage, registers);
  };

  // ---- the pipeline ----
  // With IN_FLIGHT = 1 a stage's wgmmas run while the next stage is dequantized (see WgmmaGemm).
  constexpr int LOOKAHEAD = T::STAGES - 1 - G::IN_FLIGHT;
#pragma unroll
  for (int s = 0; s < LOOKAHEAD; ++s) {
    if (s < tile_count) load_stage(s, kt_begin + s);
    cp_async_commit();
  }
  u32 fragment_even[G::KSTEPS][4];
  [[maybe_unused]] u32 fragment_odd[G::KSTEPS][4];
  auto run_stage = [&](int it, u32 (&fragment)[G::KSTEPS][4]) {
    cp_async_wait<LOOKAHEAD - 1>();
    wgmma_widen_stage<G>(smem, it % T::STAGES, rows_valid);
    fence_proxy_async_shared();  // this thread's copies (and the zeroed rows), visible to wgmma before the barrier
    __syncthreads();             // also: every warpgroup's wgmmas of the slot refilled below have ended
    const int next = it + LOOKAHEAD;
    if (next < tile_count) load_stage(next % T::STAGES, kt_begin + next);
    cp_async_commit();
    dequantize_stage(it % T::STAGES, fragment);
    issue_stage(it, it % T::STAGES, fragment);
    wgmma_wait<G::IN_FLIGHT>();  // the older group's fragments and shared memory are reused next
    flush_groups(it, it % T::STAGES);
  };
  if constexpr (G::IN_FLIGHT == 0) {
    for (int it = 0; it < tile_count; ++it) run_stage(it, fragment_even);
  } else {
    // Two stages per trip, so that each register set is named at compile time. The odd last stage runs after the
    // loop: a conditional stage inside it makes ptxas serialize every wgmma (accumulators merged across the branch).
    int it = 0;
    for (; it + 1 < tile_count; it += 2) {
      run_stage(it, fragment_even);
      run_stage(it + 1, fragment_odd);
    }
    wgmma_wait<0>();
    if (it < tile_count) run_stage(it, fragment_even);
  }
  wgmma_wait<0>();
  cp_async_wait<0>();
#pragma unroll
  for (int i = 0; i < G::ACCUMULATORS; ++i) wgmma_fence_operand(acc[i]);

  // Accumulator acc[4 j + e] is D[column warp * 16 + group + 8 (e / 2)][token 8 j + 2 quad + e % 2].
  constexpr int OCTETS = BM / 8;
  // ---- split-K: partial tiles to the workspace; the last CTA of a tile adds them in split order ----
  if constexpr (T::SPLIT_K > 1) {
    // Token octets wholly past M carry nothing: they are neither written nor read back.
    if (!reduce_split_k<T::SPLIT_K, OCTETS>(reinterpret_cast<float*>(p.workspace), schedule.tiles, work.tile, work.split, BM * BN,
                                           warp * OCTETS, lane, true, tid == 0, last_split_flag,
                                           [&](int j) -> float* { return acc + 4 * j; }, [&](int j) { return j * 8 < rows_valid; },
                                           [] { __syncthreads(); })) {
      return;
    }
  }

  // ---- epilogue: channel scale, global scale, token scale, bias, convert, store (C is [M][N]: columns are
  // contiguous) ----
  const float global_scale = ld_global_f32(reinterpret_cast<const void*>(p.global_scale));
  const char* bias = reinterpret_cast<const char*>(p.bias);
  unsigned short* c_global = reinterpret_cast<unsigned short*>(p.c);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int column = n0 + warp * 16 + group + half * 8;
    const float scale = output_scale<F>(p, global_scale, column);
    const float bias_value = p.bias != 0 ? output_to_f32<F>(*reinterpret_cast<const unsigned short*>(bias + column * 2LL)) : 0.0f;
#pragma unroll
    for (int j = 0; j < OCTETS; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if constexpr (IS_MOE) {
          // Scattered output row, times the router weight (1 except token-indexed down); no bias.
          const int r = j * 8 + quad * 2 + e;
          if (r < rows_valid) {
            const float value = acc[4 * j + half * 2 + e] * scale * tables.weight[r] * activation_row_scale<F>(p, tables.source[r]);
            c_global[static_cast<long long>(tables.target[r]) * p.n + column] = static_cast<unsigned short>(pack_output<F>(value, 0.0f) & 0xFFFFu);
          }
          continue;
        }
        const int row = m0 + j * 8 + quad * 2 + e;
        if (row < p.m) {
          const float value = acc[4 * j + half * 2 + e] * scale * activation_row_scale<F>(p, row) + bias_value;
          c_global[static_cast<long long>(row) * p.n + column] = static_cast<unsigned short>(pack_output<F>(value, 0.0f) & 0xFFFFu);
        }
      }
    }
  }
}

}  // namespace device
}  // namespace qtune
