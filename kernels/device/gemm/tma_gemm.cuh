#pragma once
// C[M,N] = A[M,K] * dequant(W[N,K])^T (+ bias) on Hopper (sm_90a): a TMA-fed, warp-specialized, persistent wgmma GEMM
// for every format of the prepacked weight layout, quantized activations (fp8, int8) included.
//
// Roles. The last warpgroup is the producer: one warp of it waits until a slot of the STAGES-deep shared-memory ring is
// free (its "empty" mbarrier), then fills it with the bulk copy engine and signals its "full" mbarrier through the
// transaction count: the activation tile through a TMA tensor map (128-byte swizzled K slabs, rows past M zero-filled),
// each 16-column weight strip as one contiguous cp.async.bulk (the prepacked layout keeps a strip's K range in one
// run), the tile's K-group scale rows likewise, activation group scales with cp.async. The other BLOCK_N / 64
// warpgroups are consumers: warp w of consumer warpgroup g owns weight strip 4 g + w, turns its words into wgmma's
// register A operand (dequantized f16/bf16, or 8-bit operands of the activation type: int4 -> s8 or fp8, e2m1 ->
// e4m3, raw 8-bit codes as they are) and multiplies the swizzled activation slabs as the shared-memory B operand
// (swap-AB: the tokens are wgmma's N). Registers move from the producer to the consumers (setmaxnreg).
//
// Accumulation follows mma_gemm.cuh: with K-group scales (weight groups or blocks, activation groups), and for fp8
// every PROMOTE K (the fp8 tensor cores do not accumulate in full f32; 128 as in mma_gemm.cuh, longer or never by
// choice), each group's partial sums (s32 or f32) are scaled and added to f32 accumulators once the group's wgmmas
// have completed. Weight blocks spanning the tile's columns are folded into the activation group scales by the
// producer warpgroup's second warp, or its second and third (SCALE_PRODUCTS). With OVERLAP the tile's tokens run as
// two wgmma groups, one scaled in while the other multiplies.
//
// Schedule. Work units (tile, K split) are numbered as in tile_schedule.cuh; a grid smaller than the unit count is
// persistent: each CTA (each cluster) walks units with the grid's stride, and the ring runs on across units, so the
// producer loads the next tile while the consumers store this one. Split-K partial tiles meet in the workspace
// (split_k.cuh). With CLUSTER = 2 or 4 the CTAs of a cluster take neighbouring tiles that share one operand, loaded
// once for all of them with the copy engine's multicast (each CTA issues its share of the copies): the activations
// (MULTICAST = 1, tiles side by side along N) or the weights (MULTICAST = 2, along M). A slot is then free only when
// the consumers of every CTA of the cluster have released it.
//
// The same kernel serves the MoE GEMM (gemm/tma_moe.cuh): with ROWS = MoeRows<...> the activation rows are a MoE
// layout's rows in layout order (grouped layouts as they are, token-indexed rows gathered first), a unit's BLOCK_M rows
// are one block of it (gemm/moe_block.cuh), which the producer and every consumer warp find alone (moe_block_of_warp):
// a block with no live rows is skipped by all of them alike, a live one reads its expert's weights, scales and global
// scale, and its live rows are stored to their target rows. With DenseUnits every MoE branch is compiled out.
#include "gemm/async_ptx.cuh"
#include "gemm/epilogue.cuh"
#include "gemm/moe_block.cuh"
#include "gemm/split_k.cuh"
#include "gemm/swizzled_operand.cuh"
#include "gemm/tile_schedule.cuh"
#include "gemm/weight_vectors.cuh"
#include "gemm/wgmma_ptx.cuh"

namespace qtune {
namespace device {

// Named barriers of the consumers: 1 for the split-K reduction, 2 + g for consumer warpgroup g's turn (PINGPONG),
// 4 + c for the K groups of column group c meeting at a tile's end (KGROUPS).
constexpr int kTurnBarrier = 2;
constexpr int kKGroupBarrier = 4;

enum MulticastMode : int {
  kMulticastNone = 0,
  kMulticastActivations = 1,  // cluster along N: the CTAs share the activation tile
  kMulticastWeights = 2,      // cluster along M: the CTAs share the weight strips
};

// Block tile, pipeline depth, split-K, rasterization and clusters of the tma family. Persistence is not a template
// parameter: the same kernel runs one unit per CTA or persistently, as the launch grid decides.
template <int BM, int BN, int BK, int STAGES_, int SPLIT, int RASTER_, int CLUSTER_, int MULTICAST_, int OVERLAP_ = 0,
          int PROMOTE_ = 128, int PINGPONG_ = 0, int KGROUPS_ = 1, int SS_ = 0>
struct TmaTiles {
  static constexpr int BLOCK_M = BM, BLOCK_N = BN, BLOCK_K = BK;
  static constexpr int STAGES = STAGES_, SPLIT_K = SPLIT, RASTER = RASTER_, CLUSTER = CLUSTER_, MULTICAST = MULTICAST_;
  // 1: the wgmmas of one slot run while the consumers convert the next slot's weights (two fragment register sets).
  static constexpr bool OVERLAP = OVERLAP_ != 0;
  // K elements between promotions of fp8 partial sums into the f32 accumulators where only the fp8 tensor cores'
  // narrower accumulation asks for them (no K-group scales); 0: never, the wgmma accumulators are the result.
  static constexpr int PROMOTE = PROMOTE_;
  // 1: the two consumer warpgroups take turns on the tensor cores, batch by batch: one issues its wgmmas only once the
  // other's have completed, so each one's flush (and conversion) runs under the other's wgmmas. Slower on the H200
  // wherever timed (3-18%, docs/perf.md 2026-12-02 H5): kept as a searchable choice, off by default.
  static constexpr bool PINGPONG = PINGPONG_ != 0;
  // 2: two consumer warpgroups per 64 weight columns take the tile's K slots in turn (even and odd), so one converts
  // while the other's wgmmas run; their sums meet in shared memory once per tile. A 64-token tile with one consumer
  // warpgroup left 64% of issue cycles without an eligible warp (Nsight Compute, H200, W4A8 M = 64, 2026-12-03).
  static constexpr int KGROUPS = KGROUPS_;
  // 1: the wgmmas read the weights from the slot through a descriptor, as the bulk copies left them (core-matrix
  // atoms: raw 8-bit weights), so the consumers load and convert nothing; 0: the weights are register operands.
  static constexpr bool SS = SS_ != 0;
  static constexpr int COLUMN_GROUPS = BN / 64;          // one per 64 weight columns
  static constexpr int CONSUMERS = COLUMN_GROUPS * KGROUPS;  // consumer warpgroups
  static constexpr int THREADS = 128 * (CONSUMERS + 1);  // and the producer warpgroup
  static constexpr int CLUSTER_M = MULTICAST == kMulticastWeights ? CLUSTER : 1;  // tiles of a cluster along M
  static constexpr int CLUSTER_N = MULTICAST == kMulticastWeights ? 1 : CLUSTER;  // and along N

  static_assert(BM == 16 || BM == 32 || BM == 64 || BM == 128 || BM == 192 || BM == 256,
                "BLOCK_M (wgmma N, the tokens) must be 16, 32, 64, 128, 192 or 256");
  static_assert(BN == 64 || BN == 128, "BLOCK_N must be 64 or 128: one consumer warpgroup per 64 weight columns, at most two");
  static_assert(BK % 64 == 0, "BLOCK_K must be a multiple of 64");
  static_assert(STAGES_ >= 2 && STAGES_ <= 8, "STAGES must be between 2 and 8 (slots of the shared-memory ring)");
  static_assert(SPLIT >= 1 && SPLIT <= 64, "SPLIT_K must be between 1 and 64");
  static_assert(RASTER_ >= 0 && RASTER_ <= 5, "RASTER is 0 (N-fastest order) or log2 of the M-band width, at most 5");
  static_assert(CLUSTER_ == 1 || CLUSTER_ == 2 || CLUSTER_ == 4, "CLUSTER must be 1, 2 or 4 CTAs");
  static_assert(MULTICAST_ >= kMulticastNone && MULTICAST_ <= kMulticastWeights, "MULTICAST is 0 (none), 1 (activations) or 2 (weights)");
  static_assert((CLUSTER_ == 1) == (MULTICAST_ == kMulticastNone), "a cluster shares one operand by multicast, and multicast needs the cluster");
  static_assert(OVERLAP_ == 0 || OVERLAP_ == 1, "OVERLAP (a wgmma group in flight while the next slot is converted) is 0 or 1");
  static_assert(PROMOTE_ == 0 || PROMOTE_ == 128 || PROMOTE_ == 256 || PROMOTE_ == 512, "PROMOTE is 128, 256 or 512 K between fp8 promotions, or 0 (none)");
  static_assert(PINGPONG_ == 0 || PINGPONG_ == 1, "PINGPONG (consumer warpgroups take turns on the tensor cores) is 0 or 1");
  static_assert(!PINGPONG || BN == 128, "PINGPONG needs two consumer warpgroups to take turns: BLOCK_N = 128");
  static_assert(!(PINGPONG && OVERLAP), "PINGPONG and OVERLAP are two ways to hide the same work: choose one");
  static_assert(KGROUPS_ == 1 || KGROUPS_ == 2, "KGROUPS (consumer warpgroups per 64 columns, taking K slots in turn) is 1 or 2");
  static_assert(KGROUPS_ == 1 || BN == 64, "KGROUPS = 2 takes BLOCK_N = 64: four consumer warpgroups would leave too few registers");
  static_assert(KGROUPS_ == 1 || (!OVERLAP && !PINGPONG), "KGROUPS = 2 hides one warpgroup's conversion under the other's wgmmas: not with OVERLAP or PINGPONG");
  static_assert(SS_ == 0 || SS_ == 1, "SS (wgmma reads the weights from shared memory) is 0 or 1");
  static_assert(KGROUPS_ == 1 || STAGES_ % 2 == 0, "KGROUPS = 2 needs an even ring: with an odd one a slot's fills alternate between the K groups, and a group could take a fill two phases old for the one it waits for");
};

template <class F, class T>
struct TmaGemm {
  static constexpr int BM = T::BLOCK_M, BN = T::BLOCK_N, BK = T::BLOCK_K;
  static constexpr int THREADS = T::THREADS;
  static constexpr int STRIPS = BN / 16;               // 16-column weight strips: one per consumer warp
  static constexpr int ACT_BYTES = F::ACT_BITS / 8;    // bytes per activation element
  static constexpr int SLAB_K = 128 / ACT_BYTES;       // K elements in one 128-byte swizzled row
  static constexpr int SLABS = BK / SLAB_K;
  static constexpr int STEPS_PER_SLAB = SLAB_K / F::KSTEP;  // wgmma k-steps per slab (4: 32 bytes each)
  static constexpr int A_SLAB_BYTES = BM * 128;
  static constexpr int A_STAGE_BYTES = SLABS * A_SLAB_BYTES;
  static constexpr int KA = BK / F::ATOM_K;            // weight atoms along K per stage
  static constexpr int W_STRIP_BYTES = KA * F::ATOM_BYTES;
  static constexpr int W_STAGE_BYTES = STRIPS * W_STRIP_BYTES;
  // Bulk copies of a slot's weights: one per strip (its KA atoms are one run in the prepacked layout), or with SS one
  // per atom, placed atom-major ([atom][strip]) so that a k-step's 64 rows (4 strips x 2 core-matrix groups) are
  // 8-row groups 1024 bytes apart, as one descriptor reads them.
  static constexpr int W_COPIES = T::SS ? STRIPS * KA : STRIPS;
  static constexpr int W_COPY_BYTES = T::SS ? F::ATOM_BYTES : W_STRIP_BYTES;
  static constexpr int GROUP_K = F::STAGE_GROUP_K;     // K elements per row of the staged vectors (0: none)
  static constexpr int GROUP_ROWS = GROUP_K > 0 ? (GROUP_K < BK ? BK / GROUP_K : 1) : 0;
  static constexpr int S_ROW_BYTES = BN * F::SCALE_BYTES;
  static constexpr int Z_ROW_BYTES = BN * 2;
  // Block scales whose blocks span the tile's columns (Gn a multiple of BLOCK_N) are folded into the activation group
  // scales before the consumers flush: the producer warpgroup's second warp stages each token's scale times the tile's
  // weight block scale, so a flush is one 16-byte load per two token octets and the FMAs (the column scales are not
  // staged). Products are stored quad-major, [lane % 4][token octet][2], 16 bytes of padding per quad against bank
  // conflicts: a thread's tokens 8 j + 2 (lane % 4) + {0, 1} are contiguous.
  static constexpr bool SCALE_PRODUCTS = F::STAGED_ACT_SCALES && F::SCALES == kScaleAccumulator && F::SCALE_GROUP_N % BN == 0;
  static constexpr int PRODUCT_QUAD_FLOATS = BM / 4 + 4;
  static constexpr int SA_ROW_BYTES = SCALE_PRODUCTS ? 4 * PRODUCT_QUAD_FLOATS * 4 : BM * 4;
  static constexpr bool STAGED_WEIGHT_SCALES = F::STAGED_SCALES && !SCALE_PRODUCTS;
  static constexpr int S_STAGE_BYTES = STAGED_WEIGHT_SCALES ? GROUP_ROWS * S_ROW_BYTES : 0;
  static constexpr int Z_STAGE_BYTES = F::STAGED_ZEROS ? GROUP_ROWS * Z_ROW_BYTES : 0;
  static constexpr int SA_STAGE_BYTES = F::STAGED_ACT_SCALES ? GROUP_ROWS * SA_ROW_BYTES : 0;
  // Every slot starts 1024-byte aligned: the 128-byte swizzle is a function of the shared address.
  static constexpr int STAGE_BYTES =
      (A_STAGE_BYTES + W_STAGE_BYTES + S_STAGE_BYTES + Z_STAGE_BYTES + SA_STAGE_BYTES + 1023) / 1024 * 1024;
  static constexpr int ALIGNMENT_SLACK = 1024;  // the dynamic shared window is aligned up to 1024 bytes at run time
  static constexpr int ACCUMULATORS = BM / 2;  // m64 x nBM per warpgroup: BM / 2 per thread
  // KGROUPS = 2: the odd K group's f32 sums of a tile, [accumulator / 4][thread][4] per column group, after the ring.
  static constexpr int EXCHANGE_BYTES = T::KGROUPS > 1 ? T::COLUMN_GROUPS * 128 * ACCUMULATORS * 4 : 0;
  static constexpr int SHARED_BYTES = T::STAGES * STAGE_BYTES + EXCHANGE_BYTES + ALIGNMENT_SLACK;
  // What the copy engine delivers to each CTA per slot (activation group scales come by cp.async, counted as arrivals).
  static constexpr int STAGE_TX_BYTES = A_STAGE_BYTES + W_STAGE_BYTES + S_STAGE_BYTES + Z_STAGE_BYTES;
  // The format flushes only to promote fp8 partial sums (no K-group scales): how often is the tiles' PROMOTE.
  static constexpr bool PROMOTION_ONLY = F::FP8_MMA && F::SCALES != kScaleAccumulator && !F::STAGED_ACT_SCALES;
  static constexpr int FLUSH_K = PROMOTION_ONLY ? T::PROMOTE : F::FLUSH_K;
  static constexpr bool FLUSHES = FLUSH_K > 0;
  // K elements multiplied per wgmma batch: a flush group when it is shorter than the slot, else the whole slot.
  static constexpr int CHUNK_K = FLUSHES && FLUSH_K < BK ? FLUSH_K : BK;
  static constexpr int CHUNKS = BK / CHUNK_K;
  static constexpr int CHUNK_STEPS = CHUNK_K / F::KSTEP;
  // The "full" barrier of a slot: the producer's arrival with the transaction count, and with staged activation scales
  // one cp.async arrival per producer lane, or with scale products one arrival of their warp; the "empty" one: every
  // consumer warp of every CTA of the cluster that reads the slot (one K group's).
  // Scale products of more than 128 tokens are staged by three warps, a third of the tokens each: one warp holding a
  // slot's and the next slot's six scales per lane spills under the producer's 40 registers (192-token tiles), and
  // two still do with the persistent, rasterized schedule (NVRTC 13.0, sm_90a).
  static constexpr int PRODUCT_WARPS = SCALE_PRODUCTS && BM > 128 ? 3 : 1;
  static constexpr int FULL_ARRIVALS = 1 + (SCALE_PRODUCTS ? PRODUCT_WARPS : F::STAGED_ACT_SCALES ? 32 : 0);
  static constexpr int EMPTY_ARRIVALS = T::COLUMN_GROUPS * 4 * T::CLUSTER;
  // 192-token tiles with flushed partial sums hold 192 accumulators per consumer thread: their producer warpgroup
  // gives up 16 more registers so two consumer warpgroups get 232 (the split CUTLASS's cooperative kernels use).
  static constexpr bool WIDE_FLUSHED = FLUSHES && ACCUMULATORS > 64;
  static constexpr int PRODUCER_REGISTERS = WIDE_FLUSHED ? 40 : 56;
  static constexpr int CONSUMER_REGISTERS = T::CONSUMERS == 1 ? 240 : WIDE_FLUSHED ? 232 : 224;
  static constexpr int CONSUMER_THREADS = T::CONSUMERS * 128;
  static constexpr int EPILOGUE_THREADS = T::COLUMN_GROUPS * 128;  // K group 0, which reduces split-K and stores

  static_assert(!T::SS || F::CORE_MATRIX_ATOMS, "SS reads the stored weights as wgmma operands: raw 8-bit weights (core-matrix atoms) only");
  static_assert(F::LANE_BITS == 16 || F::LANE_BITS == 8, "the tma family runs f16/bf16 and 8-bit tensor-core operands (wgmma has no 4-bit ones)");
  static_assert(BK % F::ATOM_K == 0, "BLOCK_K must be a multiple of the weight atom (64 K for f16/bf16, 128 K for 8-bit operands)");
  static_assert(BK % SLAB_K == 0, "BLOCK_K must be whole 128-byte activation slabs (64 K of f16/bf16, 128 K of 8-bit activations)");
  static_assert(STEPS_PER_SLAB == 4, "a wgmma k-step reads 32 bytes of each activation row");
  static_assert(GROUP_K == 0 || GROUP_K % BK == 0 || BK % GROUP_K == 0, "BLOCK_K must divide the scale group size or be a multiple of it");
  static_assert(PROMOTION_ONLY || T::PROMOTE == 128, "PROMOTE applies to fp8 without K-group scales; other formats flush as they must (leave it 128)");
  static_assert(!FLUSHES || FLUSH_K % BK == 0 || BK % FLUSH_K == 0, "BLOCK_K must divide the flush group or be a multiple of it");
  static_assert(CHUNK_K % F::KSTEP == 0, "a flush group is whole wgmma k-steps");
  static_assert(ACCUMULATORS * (FLUSHES ? 2 : 1) <= 192, "too many accumulators per consumer thread: BLOCK_M <= 192 when partial sums are flushed, <= 256 otherwise");
  static_assert(BM * 4 % 16 == 0, "activation scale rows are whole 16-byte chunks");
  static_assert(T::KGROUPS == 1 || !FLUSHES || FLUSH_K <= BK, "KGROUPS = 2: each K group flushes within its own slots (a flush interval of at most BLOCK_K)");
  static_assert(CONSUMER_THREADS * CONSUMER_REGISTERS + 128 * PRODUCER_REGISTERS <= 65536, "the register file holds the consumers' and the producer's registers");
};


// Calls body(work, m0, n0) for the work units first, first + stride, ... of the schedule, with the tile of CTA `rank`
// of each unit's cluster (CLUSTER_M or CLUSTER_N tiles side by side).
template <class T, int BM, int BN, class Schedule, class Body>
__device__ __forceinline__ void for_each_cluster_unit(const GemmParams& p, const Schedule& schedule, int first, int stride, u32 rank,
                                                      const Body& body) {
  for (int unit = first; unit < schedule.units(); unit += stride) {
    const TileWork work = schedule.work(p, unit);
    const int m0 = work.m0 + (T::CLUSTER_M > 1 ? static_cast<int>(rank) * BM : 0);
    const int n0 = work.n0 + (T::CLUSTER_N > 1 ? static_cast<int>(rank) * BN : 0);
    body(work, m0, n0);
  }
}

// Adds partial sums of the tile's token octets first_octet, ... (accumulator 4 j + e holds octet j: see the epilogue)
// to the f32 accumulators, scaled by the column and token scales of staged group row `row` of the slot at `base`;
// `column` is the thread's first weight column in the tile (its second is 8 further).
template <class F, class G, class Partial, int SUMS>
__device__ __forceinline__ void add_scaled_partials(float (&acc)[G::ACCUMULATORS], const Partial (&sums)[SUMS], int first_octet, u32 base,
                                                    int row, int column, int quad) {
  static_assert(SUMS % 4 == 0 && SUMS <= G::ACCUMULATORS, "partial sums come in whole token octets of the tile");
  if constexpr (G::SCALE_PRODUCTS) {
    static_assert(SUMS % 8 == 0, "scale products are read two token octets at a time");
    const u32 products = base + G::A_STAGE_BYTES + G::W_STAGE_BYTES + G::Z_STAGE_BYTES + row * G::SA_ROW_BYTES +
                         quad * G::PRODUCT_QUAD_FLOATS * 4;
#pragma unroll
    for (int o = 0; o < SUMS / 4; o += 2) {
      const int j = first_octet + o;
      float scale[4];  // tokens 8 j + 2 quad + {0, 1}, then the same of octet j + 1
      ld_shared_f32x4(scale, products + j * 8);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[4 * j + e] = __fmaf_rn(static_cast<float>(sums[4 * o + e]), scale[(e / 4) * 2 + e % 2], acc[4 * j + e]);
    }
    return;
  }
  [[maybe_unused]] const u32 s_smem = base + G::A_STAGE_BYTES + G::W_STAGE_BYTES;
  [[maybe_unused]] const u32 sa_smem = s_smem + G::S_STAGE_BYTES + G::Z_STAGE_BYTES;
  [[maybe_unused]] float column_scale[2] = {1.0f, 1.0f};
  if constexpr (F::SCALES == kScaleAccumulator) {
    column_scale[0] = ld_shared_f32(s_smem + row * G::S_ROW_BYTES + column * 4);
    column_scale[1] = ld_shared_f32(s_smem + row * G::S_ROW_BYTES + (column + 8) * 4);
  }
#pragma unroll
  for (int o = 0; o < SUMS / 4; ++o) {
    const int j = first_octet + o;
    [[maybe_unused]] float token_scale[2] = {1.0f, 1.0f};
    if constexpr (F::STAGED_ACT_SCALES) ld_shared_f32x2(token_scale, sa_smem + row * G::SA_ROW_BYTES + (j * 8 + quad * 2) * 4);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float sum = static_cast<float>(sums[4 * o + e]);
      if constexpr (F::SCALES == kScaleAccumulator || F::STAGED_ACT_SCALES) {
        acc[4 * j + e] = __fmaf_rn(sum, token_scale[e % 2] * column_scale[e / 2], acc[4 * j + e]);
      } else {
        acc[4 * j + e] += sum;
      }
    }
  }
}

// The wgmma of N tokens: the weights through a descriptor (SS) or from registers.
template <class F, class T, int N>
using TmaWgmma = typename Choose<WgmmaSs<N, F::COMPUTE_TYPE, F::ACTIVATION>, WgmmaRs<N, F::COMPUTE_TYPE, F::ACTIVATION>, T::SS>::type;

// ROWS: DenseUnits, or MoeRows with `moe` its layout's tables.
template <class F, class T, class ROWS = DenseUnits>
__device__ __forceinline__ void tma_gemm(const GemmParams& p, const TensorMap& activation_map, const MoeParams* moe = nullptr) {
  using G = TmaGemm<F, T>;
  constexpr bool IS_MOE = ROWS::LAYOUT != 0;
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  static_assert(sizeof(F) == 0, "the tma family needs sm_90a (wgmma and setmaxnreg are architecture-specific)");
#endif
  using Mma = TmaWgmma<F, T, G::BM>;
  using Partial = typename Mma::Accumulator;
  static_assert(Mma::K == F::KSTEP, "the wgmma k-step is the format's k-step");
  constexpr int BM = G::BM, BN = G::BN, BK = G::BK;
  constexpr int CLUSTER = T::CLUSTER;

  extern __shared__ __align__(1024) unsigned char shared[];
  __shared__ __align__(8) u64 full_barriers[T::STAGES];
  __shared__ __align__(8) u64 empty_barriers[T::STAGES];
  __shared__ int last_split_flag;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warpgroup = __shfl_sync(0xFFFFFFFFu, tid / 128, 0);
  const int warp_in_group = (tid / 32) % 4;
  const u32 smem = (shared_address(shared) + 1023u) & ~1023u;
  const u32 full0 = shared_address(&full_barriers[0]);
  const u32 empty0 = shared_address(&empty_barriers[0]);
  const u32 rank = CLUSTER > 1 ? cluster_rank() : 0;

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < T::STAGES; ++s) {
      mbarrier_init(full0 + s * 8, G::FULL_ARRIVALS);
      mbarrier_init(empty0 + s * 8, G::EMPTY_ARRIVALS);
    }
    fence_barrier_init();
  }
  if constexpr (CLUSTER > 1) {
    cluster_sync();  // the peer's barriers are initialised before anyone arrives on them
  } else {
    __syncthreads();
  }

  // Super tiles: the CLUSTER tiles of a cluster; this CTA takes tile `rank` of each.
  const TileSchedule<BM * T::CLUSTER_M, BN * T::CLUSTER_N, BK, T::RASTER, T::SPLIT_K> schedule(p);
  const int clusters = gridDim.x / CLUSTER;
  const int first_unit = blockIdx.x / CLUSTER;

  if (warpgroup == T::CONSUMERS) {
    // ---------------- producer ----------------
    release_registers<G::PRODUCER_REGISTERS>();
    if (warp_in_group == 0) {
      if (lane == 0) prefetch_tensor_map(activation_map);
      const char* w_global = reinterpret_cast<const char*>(p.weights);
      const char* s_global = reinterpret_cast<const char*>(p.scales);
      const char* z_global = reinterpret_cast<const char*>(p.zeros);
      const char* sa_global = reinterpret_cast<const char*>(p.a_scales);
      const long long atoms_per_strip = p.k / F::ATOM_K;
      constexpr unsigned short cluster_mask = (1u << CLUSTER) - 1u;
      int stage = 0;
      u32 phase = 0;
      for_each_cluster_unit<T, BM, BN>(p, schedule, first_unit, clusters, rank, [&](const TileWork& work, int m0, int n0) {
        // MoE: the block's expert's weights, scales and zero points; a block with no live rows loads nothing.
        const char* w_unit = w_global;
        const char* s_unit = s_global;
        const char* z_unit = z_global;
        int moe_live_rows = 0;
        if constexpr (IS_MOE) {
          const MoeBlock block = moe_block_of_warp<ROWS::LAYOUT, BM>(p, *moe, m0 / BM);
          if (block.expert < 0) return;
          w_unit += static_cast<long long>(block.expert) * moe->expert_weight_bytes;
          s_unit += static_cast<long long>(block.expert) * moe->expert_scale_bytes;
          z_unit += static_cast<long long>(block.expert) * moe->expert_zero_bytes;
          moe_live_rows = block.live_rows;
        }
        for (int kt = work.kt_begin; kt < work.kt_end; ++kt) {
          const u32 full = full0 + stage * 8;
          mbarrier_wait(empty0 + stage * 8, phase ^ 1);
          if (lane == 0) mbarrier_arrive_expect_tx(full, G::STAGE_TX_BYTES);
          __syncwarp();
          const u32 a_dst = smem + stage * G::STAGE_BYTES;
          const u32 w_dst = a_dst + G::A_STAGE_BYTES;
          const u32 s_dst = w_dst + G::W_STAGE_BYTES;
          const u32 z_dst = s_dst + G::S_STAGE_BYTES;
          const u32 sa_dst = z_dst + G::Z_STAGE_BYTES;
          // Weight copies on lanes 0.., activation slabs after them; a shared operand is issued by one CTA per copy.
          for (int i = lane; i < G::W_COPIES; i += 32) {
            const int strip = i % G::STRIPS;
            const int atom = T::SS ? i / G::STRIPS : 0;  // with SS copy i is atom i / STRIPS of strip i % STRIPS
            const char* source =
                w_unit + ((n0 / 16 + strip) * atoms_per_strip + static_cast<long long>(kt) * G::KA + atom) * F::ATOM_BYTES;
            if constexpr (T::MULTICAST == kMulticastWeights) {
              if (i % CLUSTER == static_cast<int>(rank)) bulk_copy_multicast(w_dst + i * G::W_COPY_BYTES, source, G::W_COPY_BYTES, full, cluster_mask);
            } else {
              bulk_copy(w_dst + i * G::W_COPY_BYTES, source, G::W_COPY_BYTES, full);
            }
          }
          for (int i = (lane - G::W_COPIES % 32 + 32) % 32; i < G::SLABS; i += 32) {
            const int x = kt * BK + i * G::SLAB_K;
            if constexpr (T::MULTICAST == kMulticastActivations) {
              if (i % CLUSTER == static_cast<int>(rank)) {
                tensor_copy_2d_multicast(a_dst + i * G::A_SLAB_BYTES, activation_map, x, m0, full, cluster_mask);
              }
            } else {
              tensor_copy_2d(a_dst + i * G::A_SLAB_BYTES, activation_map, x, m0, full);
            }
          }
          const int first_group = G::GROUP_K > 0 ? kt * BK / G::GROUP_K : 0;
          if constexpr (G::STAGED_WEIGHT_SCALES) {
            for (int r = lane; r < G::GROUP_ROWS; r += 32) {
              bulk_copy(s_dst + r * G::S_ROW_BYTES, s_unit + (static_cast<long long>(first_group + r) * p.n + n0) * F::SCALE_BYTES,
                        G::S_ROW_BYTES, full);
            }
          }
          if constexpr (F::STAGED_ZEROS) {
            for (int r = lane; r < G::GROUP_ROWS; r += 32) {
              bulk_copy(z_dst + r * G::Z_ROW_BYTES, z_unit + (static_cast<long long>(first_group + r) * p.n + n0) * 2, G::Z_ROW_BYTES,
                        full);
            }
          }
          if constexpr (F::STAGED_ACT_SCALES && !G::SCALE_PRODUCTS) {
            // Rows past M (MoE: past the block's live rows) read nothing and stage 0: their partial sums are not stored.
            const int rows_valid = IS_MOE ? moe_live_rows : min(BM, p.m - m0);
            for (int i = lane; i < G::GROUP_ROWS * BM; i += 32) {
              const int row = i % BM;
              const int source_row = max(0, min(m0 + row, p.m - 1));
              cp_async_4_zfill(sa_dst + i * 4, sa_global + (static_cast<long long>(first_group + i / BM) * p.m + source_row) * 4,
                               row < rows_valid);
            }
            cp_async_mbarrier_arrive(full);
          }
          if (++stage == T::STAGES) {
            stage = 0;
            phase ^= 1;
          }
        }
      });
    }
    if constexpr (G::SCALE_PRODUCTS) {
      if (warp_in_group >= 1 && warp_in_group <= G::PRODUCT_WARPS) {
        // ---- the scale products of every slot: token scale x the tile's weight block scale (see SCALE_PRODUCTS); ----
        // ---- with three such warps, each stages a third of the tile's tokens and arrives once per slot ----
        // Rows past M (MoE: past the block's live rows) stage 0: their partial sums are not stored.
        constexpr int WARP_ROWS = BM / G::PRODUCT_WARPS;  // this warp's tokens: first_row, ... + WARP_ROWS - 1
        constexpr int ROWS_PER_LANE = (WARP_ROWS + 31) / 32;
        const int first_row = (warp_in_group - 1) * WARP_ROWS;
        const char* s_global = reinterpret_cast<const char*>(p.scales);
        const char* sa_global = reinterpret_cast<const char*>(p.a_scales);
        int stage = 0;
        u32 phase = 0;
        for_each_cluster_unit<T, BM, BN>(p, schedule, first_unit, clusters, rank, [&](const TileWork& work, int m0, int n0) {
          const char* s_unit = s_global;
          int rows_valid = min(BM, p.m - m0);
          if constexpr (IS_MOE) {
            const MoeBlock block = moe_block_of_warp<ROWS::LAYOUT, BM>(p, *moe, m0 / BM);
            if (block.expert < 0) return;
            s_unit += static_cast<long long>(block.expert) * moe->expert_scale_bytes;
            rows_valid = block.live_rows;
          }
          // The scales of slot kt + 1 are loaded while slot kt waits for its consumers and is written: one load
          // latency per unit, not per slot (a slot of 128-token tiles lasts about as long as an L2 round trip).
          float token_scale[G::GROUP_ROWS][ROWS_PER_LANE];
          float block_scale[G::GROUP_ROWS];
          auto load = [&](int kt) {
            const int first_group = kt * BK / G::GROUP_K;
#pragma unroll
            for (int r = 0; r < G::GROUP_ROWS; ++r) {
              block_scale[r] = ld_global_f32(s_unit + (static_cast<long long>(first_group + r) * p.n + n0) * 4);
#pragma unroll
              for (int i = 0; i < ROWS_PER_LANE; ++i) {
                const int row = first_row + lane + 32 * i;
                token_scale[r][i] =
                    row < rows_valid ? ld_global_f32(sa_global + (static_cast<long long>(first_group + r) * p.m + m0 + row) * 4) : 0.0f;
              }
            }
          };
          load(work.kt_begin);
          for (int kt = work.kt_begin; kt < work.kt_end; ++kt) {
            float product[G::GROUP_ROWS][ROWS_PER_LANE];
#pragma unroll
            for (int r = 0; r < G::GROUP_ROWS; ++r)
#pragma unroll
              for (int i = 0; i < ROWS_PER_LANE; ++i) product[r][i] = token_scale[r][i] * block_scale[r];
            if (kt + 1 < work.kt_end) load(kt + 1);
            mbarrier_wait(empty0 + stage * 8, phase ^ 1);
            const u32 products = smem + stage * G::STAGE_BYTES + G::A_STAGE_BYTES + G::W_STAGE_BYTES + G::Z_STAGE_BYTES;
#pragma unroll
            for (int r = 0; r < G::GROUP_ROWS; ++r) {
#pragma unroll
              for (int i = 0; i < ROWS_PER_LANE; ++i) {
                const int row = first_row + lane + 32 * i;
                if (lane + 32 * i < WARP_ROWS) {
                  const int position = (row % 8 / 2) * G::PRODUCT_QUAD_FLOATS + row / 8 * 2 + row % 2;
                  st_shared_f32(products + r * G::SA_ROW_BYTES + position * 4, product[r][i]);
                }
              }
            }
            __syncwarp();  // every lane's products are written before the warp's one arrival releases them
            if (lane == 0) mbarrier_arrive(full0 + stage * 8);
            if (++stage == T::STAGES) {
              stage = 0;
              phase ^= 1;
            }
          }
        });
      }
    }
  } else {
    // ---------------- consumers ----------------
    claim_registers<G::CONSUMER_REGISTERS>();
    const int column_group = T::KGROUPS > 1 ? warpgroup % T::COLUMN_GROUPS : warpgroup;
    const int k_group = T::KGROUPS > 1 ? warpgroup / T::COLUMN_GROUPS : 0;  // takes the unit's K tiles k_group, + KGROUPS, ...
    const int strip = column_group * 4 + warp_in_group;  // this warp's 16 weight columns
    const int group = lane >> 2;
    const int quad = lane & 3;
    Partial part[G::ACCUMULATORS];
    float acc[G::ACCUMULATORS];
#pragma unroll
    for (int i = 0; i < G::ACCUMULATORS; ++i) {
      part[i] = 0;
      acc[i] = 0.0f;
    }
    const float global_scale = ld_global_f32(reinterpret_cast<const void*>(p.global_scale));
    // Turns: warpgroup 0 goes first (warpgroup 1 hands it the first turn); each batch ends by handing the turn over.
    if constexpr (T::PINGPONG) {
      if (warpgroup == 1) named_barrier_arrive(kTurnBarrier, G::CONSUMER_THREADS);
    }
    int stage = 0;
    u32 phase = 0;
    for_each_cluster_unit<T, BM, BN>(p, schedule, first_unit, clusters, rank, [&](const TileWork& work, int m0, int n0) {
      // MoE: the block's live rows and expert (every warp finds them alone); a block with no live rows is skipped.
      MoeBlock block{0, min(BM, p.m - m0)};
      if constexpr (IS_MOE) {
        block = moe_block_of_warp<ROWS::LAYOUT, BM>(p, *moe, m0 / BM);
        if (block.expert < 0) return;
      }
      decltype(auto) q = ROWS::params(p, moe, block.expert);  // the expert's weights, scales and global scale
      const int rows_valid = block.live_rows;
      const StripVectors<F> channel = channel_vectors<F>(q, n0 + strip * 16 + group * 2);
      // ---- one batch of wgmmas: the k-steps of a chunk of one slot (a flush group, or the whole slot) ----
      // This warp's A fragments of the chunk's k-steps, from the slot at `base`.
      auto build = [&](u32 base, int chunk, u32 (&fragment)[G::CHUNK_STEPS][4]) {
        if constexpr (T::SS) return;  // the wgmmas read the weights from the slot
        const u32 w_smem = base + G::A_STAGE_BYTES;
        const u32 s_smem = w_smem + G::W_STAGE_BYTES;
        const u32 z_smem = s_smem + G::S_STAGE_BYTES;
        u32 words[F::THREAD_WORDS];
        StripVectors<F> vectors = channel;
#pragma unroll
        for (int i = 0; i < G::CHUNK_STEPS; ++i) {
          const int step = chunk * G::CHUNK_STEPS + i;  // k-step within the slot
          const int atom = step / 4, ks = step % 4;
          if (i == 0 || ks == 0) {
            load_atom_words<F>(words, w_smem + (strip * G::KA + atom) * F::ATOM_BYTES, lane);
            vectors = channel;
          }
          if constexpr (F::SCALES == kScaleDequant && G::GROUP_ROWS > 0) {
            const bool reload = i == 0 || ks == 0 || (G::GROUP_K < F::ATOM_K && (ks * F::KSTEP) % G::GROUP_K == 0);
            if (reload) {
              const int row = G::GROUP_K >= BK ? 0 : (step * F::KSTEP) / G::GROUP_K;
              load_staged_vectors<F, G::S_ROW_BYTES, G::Z_ROW_BYTES>(vectors, s_smem, z_smem, row, (strip * 16 + group * 2) * 2);
            }
          }
          u32 b[2][2];  // [n8 half of the strip = fragment row half][register]
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int slot = (ks * 2 + half) * 2;
            if constexpr (F::QUANTIZED_ACT) {
              operand_pair<F>(b[half][0], b[half][1], words, slot);
            } else {
              dequant_pair<F>(b[half][0], b[half][1], words, slot, vectors, half);
            }
          }
          fragment[i][0] = b[0][0];
          fragment[i][1] = b[1][0];
          fragment[i][2] = b[0][1];
          fragment[i][3] = b[1][1];
        }
        // The fragments are complete here, not sunk past the next wgmma fence (ptxas then injects fences, C7519).
#pragma unroll
        for (int i = 0; i < G::CHUNK_STEPS; ++i)
#pragma unroll
          for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(fragment[i][r])::"memory");
      };
      // With SS, k-step s of this warpgroup's 64 weight columns: atom s / 4 of its four strips (atom-major in the
      // slot), k-step s % 4 of the atom.
      [[maybe_unused]] const CoreMatrixOperand weights(smem + G::A_STAGE_BYTES + column_group * 4 * F::ATOM_BYTES);
      auto weight_step = [&](u32 base, int step) {
        return weights.at(base - smem + (step / 4) * G::STRIPS * F::ATOM_BYTES + (step % 4) * 256);
      };
      // Issues the chunk's wgmmas as one group: k-step s reads 32 bytes at (s % 4) * 32 of every row of slab s / 4.
      auto issue = [&](u32 base, int chunk, const u32 (&fragment)[G::CHUNK_STEPS][4], bool fresh) {
#pragma unroll
        for (int i = 0; i < G::ACCUMULATORS; ++i) wgmma_fence_operand(part[i]);
        wgmma_fence();
        const SwizzledOperand tokens(base);
#pragma unroll
        for (int i = 0; i < G::CHUNK_STEPS; ++i) {
          const int step = chunk * G::CHUNK_STEPS + i;
          const u64 descriptor = tokens.at((step / 4) * G::A_SLAB_BYTES + (step % 4) * 32);
          if constexpr (T::SS) {
            Mma::run(part, weight_step(base, step), descriptor, i == 0 && fresh ? 0 : 1);
          } else {
            Mma::run(part, fragment[i], descriptor, i == 0 && fresh ? 0 : 1);
          }
        }
        wgmma_commit();
#pragma unroll
        for (int i = 0; i < G::ACCUMULATORS; ++i) wgmma_fence_operand(part[i]);
      };
      // Waits for the group in flight; where a flush group ends (or the unit's K range) scales its partial sums into
      // the f32 accumulators. Returns whether the next group starts a new partial sum.
      auto complete = [&](u32 base, int chunk, int kt) {
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < G::ACCUMULATORS; ++i) wgmma_fence_operand(part[i]);
        if constexpr (T::PINGPONG) named_barrier_arrive(kTurnBarrier + (warpgroup ^ 1), G::CONSUMER_THREADS);  // its turn
        if constexpr (G::FLUSHES) {
          const bool ends = G::FLUSH_K <= BK || (kt + 1) * BK % G::FLUSH_K == 0 || kt == work.kt_end - 1;
          if (ends) {
            add_scaled_partials<F, G>(acc, part, 0, base, G::GROUP_K > 0 && G::GROUP_K < BK ? chunk * G::CHUNK_K / G::GROUP_K : 0,
                                      strip * 16 + group, quad);
            return true;
          }
        }
        return false;
      };
      // The slot is read (weights, scales, and by the completed wgmmas the activations): release it to the producer of
      // every CTA that writes into it.
      auto release = [&](int slot) {
        __syncwarp();
        if (lane < CLUSTER) {
          if constexpr (CLUSTER > 1) {
            mbarrier_arrive_cluster(empty0 + slot * 8, lane);
          } else {
            mbarrier_arrive(empty0 + slot * 8);
          }
        }
      };
      auto next_slot = [](int& slot, u32& parity) {
        if (++slot == T::STAGES) {
          slot = 0;
          parity ^= 1;
        }
      };
      // One slot without a group in flight: wait for it, run its chunks (build, issue, complete), release it.
      auto run_slot = [&](int slot, u32 slot_phase, int kt, bool& fresh) {
        mbarrier_wait(full0 + slot * 8, slot_phase);
        const u32 base = smem + slot * G::STAGE_BYTES;
#pragma unroll
        for (int chunk = 0; chunk < G::CHUNKS; ++chunk) {
          u32 fragment[G::CHUNK_STEPS][4];
          build(base, chunk, fragment);
          if constexpr (T::PINGPONG) named_barrier_sync(kTurnBarrier + warpgroup, G::CONSUMER_THREADS);  // my turn
          issue(base, chunk, fragment, fresh);
          fresh = complete(base, chunk, kt);
        }
        release(slot);
      };
      // With a group in flight: waits for the slot of the group built next, builds its fragments, moves on.
      [[maybe_unused]] int read = stage;
      [[maybe_unused]] u32 read_phase = phase;
      [[maybe_unused]] auto build_next = [&](u32 (&fragment)[G::CHUNK_STEPS][4]) {
        mbarrier_wait(full0 + read * 8, read_phase);
        const u32 base = smem + read * G::STAGE_BYTES;
        build(base, 0, fragment);
        next_slot(read, read_phase);
        return base;
      };
      if constexpr (T::KGROUPS > 1) {
        // This K group's tiles; the ring positions of the other group's are skipped, then the unit's all at once.
        int slot = stage;
        u32 slot_phase = phase;
        if (k_group > 0) next_slot(slot, slot_phase);
        bool fresh = true;
        for (int kt = work.kt_begin + k_group; kt < work.kt_end; kt += T::KGROUPS) {
          run_slot(slot, slot_phase, kt, fresh);
#pragma unroll
          for (int i = 0; i < T::KGROUPS; ++i) next_slot(slot, slot_phase);
        }
        for (int kt = work.kt_begin; kt < work.kt_end; ++kt) next_slot(stage, phase);
        if constexpr (!G::FLUSHES) {
          // A group with no tile in this unit (a one-tile split) holds an earlier unit's sums: it adds nothing.
          if (work.kt_begin + k_group >= work.kt_end) {
#pragma unroll
            for (int i = 0; i < G::ACCUMULATORS; ++i) part[i] = 0;
          }
        }
      } else if constexpr (T::OVERLAP && G::FLUSHES) {
        // A group in flight with flushed partial sums: the tile's tokens in two halves, each its own wgmma group into
        // its own partial sums, so one half is scaled into the accumulators while the other's wgmmas run, and the next
        // slot's fragments are built while both run. Every slot is one flush group (FLUSH_K = BLOCK_K, the family's
        // rule); the unit's K tiles are an even count (taken in pairs).
        static_assert(G::FLUSH_K == BK, "a group in flight with flushes takes one flush group per slot (bk = the flush interval)");
        static_assert(BM >= 32, "a group in flight with flushes splits the tile's tokens into halves of at least 16 (bm >= 32)");
        using HalfMma = TmaWgmma<F, T, BM / 2>;
        constexpr int HALF = G::ACCUMULATORS / 2;
        Partial low[HALF], high[HALF];  // tokens [0, BM / 2) and [BM / 2, BM) of the tile
        u32 fragment_even[G::CHUNK_STEPS][4];
        u32 fragment_odd[G::CHUNK_STEPS][4];
        // Half h of the slot at `base`: its tokens start h * BM / 2 rows into every slab (a multiple of the 1024-byte
        // swizzle period), each k-step a fresh partial sum at its first step.
        auto issue_half = [&](u32 base, const u32 (&fragment)[G::CHUNK_STEPS][4], Partial (&sums)[HALF], int h) {
#pragma unroll
          for (int i = 0; i < HALF; ++i) wgmma_fence_operand(sums[i]);
          wgmma_fence();
          const SwizzledOperand tokens(base);
#pragma unroll
          for (int i = 0; i < G::CHUNK_STEPS; ++i) {
            const u64 descriptor = tokens.at((i / 4) * G::A_SLAB_BYTES + h * (BM / 2) * 128 + (i % 4) * 32);
            if constexpr (T::SS) {
              HalfMma::run(sums, weight_step(base, i), descriptor, i == 0 ? 0 : 1);
            } else {
              HalfMma::run(sums, fragment[i], descriptor, i == 0 ? 0 : 1);
            }
          }
          wgmma_commit();
#pragma unroll
          for (int i = 0; i < HALF; ++i) wgmma_fence_operand(sums[i]);
        };
        auto retire_half = [&](u32 base, Partial (&sums)[HALF], int h) {  // its group has completed
#pragma unroll
          for (int i = 0; i < HALF; ++i) wgmma_fence_operand(sums[i]);
          add_scaled_partials<F, G>(acc, sums, h * (BM / 16), base, 0, strip * 16 + group, quad);
        };
        // Two slots per trip, nothing in flight between trips: ptxas serializes every wgmma when a group in flight
        // crosses the loop's back edge while other partial sums are read (C7514, sm_90a, CUDA 13.0).
        for (int kt = work.kt_begin; kt < work.kt_end; kt += 2) {
          const u32 base_even = build_next(fragment_even);
          issue_half(base_even, fragment_even, low, 0);
          issue_half(base_even, fragment_even, high, 1);
          const u32 base_odd = build_next(fragment_odd);
          wgmma_wait<1>();
          retire_half(base_even, low, 0);
          issue_half(base_odd, fragment_odd, low, 0);
          wgmma_wait<1>();
          retire_half(base_even, high, 1);
          release(stage);
          next_slot(stage, phase);
          issue_half(base_odd, fragment_odd, high, 1);
          wgmma_wait<1>();
          retire_half(base_odd, low, 0);
          wgmma_wait<0>();
          retire_half(base_odd, high, 1);
          release(stage);
          next_slot(stage, phase);
        }
      } else if constexpr (!T::OVERLAP) {
        bool fresh = true;  // the next wgmma starts a new partial sum
        for (int kt = work.kt_begin; kt < work.kt_end; ++kt) {
          run_slot(stage, phase, kt, fresh);
          next_slot(stage, phase);
        }
      } else {
        // One group in flight: slot kt + 1 is converted while the wgmmas of slot kt run. Two slots per trip name the
        // two fragment sets at compile time. The unit's K tiles are an even count (the family's rule), so no branch
        // merges the accumulators; a conditional issue, or a flush reading the partial sums inside the loop, makes
        // ptxas serialize every wgmma (C7514, sm_90a, CUDA 13.0).
        static_assert(!G::FLUSHES, "flushed partial sums with a group in flight take the token halves above");
        u32 fragment_even[G::CHUNK_STEPS][4];
        u32 fragment_odd[G::CHUNK_STEPS][4];
        auto retire = [&](u32 base, int kt) {  // the group of slot `stage` (tile kt) has run: flush, release
          const bool fresh = complete(base, 0, kt);
          release(stage);
          next_slot(stage, phase);
          return fresh;
        };
        const int pairs = (work.kt_end - work.kt_begin) / 2;
        int kt = work.kt_begin;
        u32 base_even = build_next(fragment_even);
        issue(base_even, 0, fragment_even, true);
        for (int pair = 1; pair < pairs; ++pair, kt += 2) {
          const u32 base_odd = build_next(fragment_odd);
          bool fresh = retire(base_even, kt);
          issue(base_odd, 0, fragment_odd, fresh);
          base_even = build_next(fragment_even);
          fresh = retire(base_odd, kt + 1);
          issue(base_even, 0, fragment_even, fresh);
        }
        const u32 base_odd = build_next(fragment_odd);
        const bool fresh = retire(base_even, kt);
        issue(base_odd, 0, fragment_odd, fresh);
        retire(base_odd, kt + 1);
      }
      if constexpr (!G::FLUSHES) {
#pragma unroll
        for (int i = 0; i < G::ACCUMULATORS; ++i) acc[i] = static_cast<float>(part[i]);
      }

      if constexpr (T::KGROUPS > 1) {
        // The odd K group hands its sums to the even one through shared memory; the even one reduces split-K and stores.
        const u32 exchange = smem + T::STAGES * G::STAGE_BYTES + column_group * (128 * G::ACCUMULATORS * 4) + (tid % 128) * 16;
        if (k_group == 1) {
#pragma unroll
          for (int i = 0; i < G::ACCUMULATORS; i += 4) st_shared_f32x4(exchange + i * 128 * 4, acc + i);
        }
        named_barrier_sync(kKGroupBarrier + column_group, 256);
        if (k_group == 0) {
#pragma unroll
          for (int i = 0; i < G::ACCUMULATORS; i += 4) {
            float other[4];
            ld_shared_f32x4(other, exchange + i * 128 * 4);
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i + e] += other[e];
          }
        }
        named_barrier_sync(kKGroupBarrier + column_group, 256);  // the exchange is free for the next unit
        if (k_group == 1) {
          if constexpr (G::FLUSHES) {
#pragma unroll
            for (int i = 0; i < G::ACCUMULATORS; ++i) acc[i] = 0.0f;
          }
          return;
        }
      }

      // Accumulator acc[4 j + e] is D[column strip * 16 + group + 8 (e / 2)][token 8 j + 2 quad + e % 2].
      constexpr int OCTETS = BM / 8;
      bool holds_sum = true;
      if constexpr (T::SPLIT_K > 1) {
        holds_sum = reduce_split_k<T::SPLIT_K, OCTETS>(
            reinterpret_cast<float*>(p.workspace), schedule.tiles * CLUSTER, work.tile * CLUSTER + static_cast<int>(rank), work.split,
            BM * BN, strip * OCTETS, lane, true, tid == 0, last_split_flag, [&](int j) -> float* { return acc + 4 * j; },
            [&](int j) { return j * 8 < rows_valid; }, [] { named_barrier_sync(1, G::EPILOGUE_THREADS); });
      }
      if (holds_sum) {
        // ---- epilogue: channel, token and global scales, bias, convert, store (C is [M][N]) ----
        if constexpr (IS_MOE) {
          const float expert_scale = ld_global_f32(reinterpret_cast<const void*>(q.global_scale));
          store_swap_ab_moe_tile<F, OCTETS, ROWS::LAYOUT, ROWS::PROJECTION>(q, *moe, acc, m0, rows_valid, n0 + strip * 16 + group, quad,
                                                                            expert_scale);
        } else {
          store_swap_ab_tile<F, OCTETS>(p, acc, m0, n0 + strip * 16 + group, quad, global_scale);
        }
      }
      if constexpr (G::FLUSHES) {
#pragma unroll
        for (int i = 0; i < G::ACCUMULATORS; ++i) acc[i] = 0.0f;
      }
    });
  }
  if constexpr (T::PINGPONG) {
    if (warpgroup == 0) named_barrier_sync(kTurnBarrier, G::CONSUMER_THREADS);  // the last turn warpgroup 1 handed over
  }
  // No CTA leaves while its peer may still multicast into it or arrive on its barriers.
  if constexpr (CLUSTER > 1) cluster_sync();
}

}  // namespace device
}  // namespace qtune
