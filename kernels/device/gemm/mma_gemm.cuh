#pragma once
// C[M,N] = A[M,K] * dequant(W[N,K])^T (+ bias) on mma.sync tensor cores, with a cp.async multi-stage pipeline (on sm_75,
// which has no cp.async and no m16n8k16/k32/k64 MMA, stages are copied through registers and each MMA is built from
// Turing's m16n8k8 / m8n8k16 / m8n8k32: gemm/ptx.cuh),
// ldmatrix for activations and register dequantization of prepacked weights (layout: gemm/format_traits.cuh).
// One pipeline serves every format: f16/bf16 activations (m16n8k16, weights dequantized to f16/bf16) and quantized
// activations (int8 and fp8: m16n8k32; int4: m16n8k64), whose weights become operands of the same width. The A tile
// is the same bytes for every width: a k-step is 32 bytes of each activation row.
//
// Accumulation: the MMA adds into partial sums (s32 for integer MMAs, f32 otherwise). When the format scales K groups
// (weight groups or blocks, activation groups) the partial sums of each group are multiplied by the group's scales and
// added to the f32 accumulator as the group ends ("flush"); fp8 partial sums are flushed every atom (128 K) as well,
// because the fp8 MMA does not accumulate in full f32. Channel, token, tensor and global scales go to the epilogue.
// SCALE_AFTER (0 or 1; config gscale), for f16/bf16 activations with K-group weight scales and no zero points: the
// weights enter the MMA unscaled and their K group's scale multiplies the group's f32 partial sums as the group ends
// (one FMA per accumulator and group) instead of every dequantized pair (one packed multiply per two weights): decode
// tiles are bound by the dequantization's issue rate (the wgmma family's gscale, 3-7% on the H200).
//
// A CTA computes a BLOCK_M x BLOCK_N tile over a K range (its split). Warps form WARPS_M x WARPS_N x WARPS_K: each
// owns a (BLOCK_M/WARPS_M) x (BLOCK_N/WARPS_N) sub-tile and a 1/WARPS_K share of every K tile's weight atoms; the
// WARPS_K partial sums are added in shared memory in warp order, and SPLIT_K partial tiles go through a global
// workspace where the last CTA to arrive adds them in split order, so results are bit-identical run to run.
//
// The same tiles serve the MoE GEMM (gemm/mma_moe.cuh): with ROWS = MoeRows<...> a CTA's BLOCK_M rows are one block of
// a MoE layout (gemm/moe_rows.cuh): activation rows gathered through a row table, the block's expert's weights, and
// output rows scattered. With DenseRows every MoE branch is compiled out.
#include "gemm/epilogue.cuh"
#include "gemm/moe_rows.cuh"
#include "gemm/split_k.cuh"
#include "gemm/tile_schedule.cuh"
#include "gemm/weight_vectors.cuh"

namespace qtune {
namespace device {

template <class F, class T, int SCALE_AFTER_ = 0>
struct MmaGemm {
  static constexpr int BM = T::BLOCK_M, BN = T::BLOCK_N, BK = T::BLOCK_K;
  static constexpr int THREADS = T::THREADS;
  static constexpr int WTM = BM / T::WARPS_M;  // warp tile
  static constexpr int WTN = BN / T::WARPS_N;
  static constexpr int MT = WTM / 16;  // m16 tiles per warp
  static constexpr int NT = WTN / 8;   // n8 tiles per warp
  static constexpr int SPW = WTN / 16; // 16-column weight strips per warp
  static constexpr int KA = BK / F::ATOM_K;  // weight atoms along K per tile
  static constexpr int KAW = KA / T::WARPS_K;
  static constexpr int A_ROW_BYTES = BK * F::ACT_BITS / 8;
  static constexpr int A_CHUNKS_PER_ROW = A_ROW_BYTES / 16;
  static constexpr int A_STAGE_BYTES = BM * A_ROW_BYTES;
  static constexpr int W_STRIP_BYTES = KA * F::ATOM_BYTES;
  static constexpr int W_STAGE_BYTES = (BN / 16) * W_STRIP_BYTES;
  static constexpr int GROUP_K = F::STAGE_GROUP_K;  // K elements per row of the staged vectors (0: none staged)
  static constexpr int GROUP_ROWS = GROUP_K > 0 ? (GROUP_K < BK ? BK / GROUP_K : 1) : 0;
  static constexpr int S_ROW_BYTES = BN * F::SCALE_BYTES;  // one weight scale per column (compute type or f32)
  static constexpr int Z_ROW_BYTES = BN * 2;               // one compute-type zero point per column
  static constexpr int SA_ROW_BYTES = BM * 4;              // one f32 activation scale per row of the tile
  static constexpr int S_STAGE_BYTES = F::STAGED_SCALES ? GROUP_ROWS * S_ROW_BYTES : 0;
  static constexpr int Z_STAGE_BYTES = F::STAGED_ZEROS ? GROUP_ROWS * Z_ROW_BYTES : 0;
  static constexpr int SA_STAGE_BYTES = F::STAGED_ACT_SCALES ? GROUP_ROWS * SA_ROW_BYTES : 0;
  static constexpr int STAGE_BYTES = A_STAGE_BYTES + W_STAGE_BYTES + S_STAGE_BYTES + Z_STAGE_BYTES + SA_STAGE_BYTES;
  static constexpr bool SCALE_AFTER = SCALE_AFTER_ != 0;
  // K elements after which partial sums are flushed: the format's (FLUSH_K), or SCALE_AFTER's weight scale group.
  static constexpr int FLUSH_K = SCALE_AFTER ? GROUP_K : F::FLUSH_K;
  static constexpr bool FLUSHES = FLUSH_K > 0;
  // With at most 8 live rows the weights can be the m16 operand and the tokens the n8 one (swap-AB): half the MMAs of
  // padding M to 16. The format's flushes scale partial sums per fragment element, so swapping is kept to formats
  // without (SCALE_AFTER's flush reads the swapped layout: one scale per weight column).
  static constexpr bool CAN_SWAP = BM == 16 && T::WARPS_M == 1 && F::FLUSH_K == 0;
  // f32 partial-sum accumulators live next to the main ones when partial sums are flushed.
  static constexpr int ACCUMULATORS = MT * NT * 4 * (FLUSHES ? 2 : 1);
  static constexpr int PIPELINE_BYTES = T::STAGES * STAGE_BYTES;
  static constexpr int REDUCE_BYTES = (T::WARPS_K - 1) * BM * BN * 4;
  static constexpr int SHARED_BYTES = PIPELINE_BYTES > REDUCE_BYTES ? PIPELINE_BYTES : REDUCE_BYTES;
  // A MoE GEMM keeps its row tables after them: source row, target row (int) and router weight (f32) per tile row.
  static constexpr int MOE_TABLE_BYTES = BM * 12;

  static_assert(BK % F::ATOM_K == 0, "BLOCK_K must be a multiple of the weight atom (4 mma k-steps: 64 for f16/bf16, 128 for 8-bit, 256 for 4-bit operands)");
  static_assert(KA % T::WARPS_K == 0, "BLOCK_K / ATOM_K must be divisible by WARPS_K (each warp takes whole weight atoms)");
  static_assert(A_CHUNKS_PER_ROW % 8 == 0, "an activation tile row must be a multiple of 128 bytes (XOR swizzle over 8 chunks)");
  static_assert(GROUP_K == 0 || GROUP_K % BK == 0 || BK % GROUP_K == 0, "BLOCK_K must divide the scale group size or be a multiple of it");
  static_assert(F::FLUSH_K == 0 || F::FLUSH_K % BK == 0 || BK % F::FLUSH_K == 0, "BLOCK_K must divide the flush group or be a multiple of it");
  static_assert(ACCUMULATORS <= 128, "warp tile too large: more than 128 accumulators (partial sums included) per thread");
  static_assert(SCALE_AFTER_ == 0 || SCALE_AFTER_ == 1, "SCALE_AFTER (group scales on the partial sums) must be 0 or 1");
  static_assert(!SCALE_AFTER || (F::SCALES == kScaleDequant && F::STAGED_SCALES && !F::HAS_ZERO),
                "SCALE_AFTER needs K-group weight scales and no zero points (a zero point is subtracted before the scale)");
};

// SWAP: at most 8 live rows (M <= 8), weights become the m16 operand and tokens the n8 one (see CAN_SWAP).
// ROWS: DenseRows, or MoeRows with `moe` its layout's tables.
// SCALE_AFTER: see MmaGemm.
template <class F, class T, bool SWAP, class ROWS = DenseRows, int SCALE_AFTER = 0>
__device__ __forceinline__ void mma_gemm_tiles(const GemmParams& launch, const MoeParams* moe = nullptr) {
  using G = MmaGemm<F, T, SCALE_AFTER>;
  constexpr bool IS_MOE = ROWS::LAYOUT != 0;
  using Accumulator = typename F::Accumulator;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
  static_assert(!is_fp8(F::ACTIVATION) && !F::FP8_MMA, "fp8 tensor-core MMA needs sm_89 or later");
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  static_assert(F::COMPUTE_TYPE != kElementBF16 && F::OUTPUT != kElementBF16, "bf16 MMA and conversions need sm_80 or later");
#endif
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  static_assert(F::COMPUTE_TYPE != kElementS4, "int4 tensor-core MMA (W4A4) is unsupported on sm_90 and later");
#endif
  constexpr int BM = G::BM, BN = G::BN, BK = G::BK, THREADS = G::THREADS;
  constexpr int MT = G::MT, NT = G::NT, SPW = G::SPW;
  constexpr int WARPS_MN = T::WARPS_M * T::WARPS_N;
  constexpr int CPR = G::A_CHUNKS_PER_ROW;
  constexpr int GROUP_K = G::GROUP_K;
  constexpr bool SINGLE_M_TILE = BM == 16;  // one m16 tile per CTA: small-M kernels
  static_assert(!SWAP || G::CAN_SWAP, "swap-AB needs BLOCK_M = 16, WARPS_M = 1 and a format without flushes of its own");
  // cp.async chunk c of a thread is chunk tid + c * THREADS of the stage; when the run lengths and THREADS divide each
  // other, every chunk's address is a per-thread base plus a compile-time offset (no per-chunk index arithmetic).
  constexpr int W_CHUNKS = G::W_STAGE_BYTES / 16;
  constexpr int STRIP_CHUNKS = G::W_STRIP_BYTES / 16;
  constexpr bool W_REGULAR = RegularWeightChunks<W_CHUNKS, STRIP_CHUNKS, THREADS>::value;
  constexpr bool A_REGULAR = (BM * CPR) % THREADS == 0 && THREADS % CPR == 0;

  extern __shared__ __align__(128) unsigned char shared[];
  __shared__ int last_split_flag;

  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int warp_k = warp / WARPS_MN;
  const int warp_mn = warp % WARPS_MN;
  const int warp_m = warp_mn / T::WARPS_N;
  const int warp_n = warp_mn % T::WARPS_N;
  const int group = lane >> 2;   // mma fragment row / column owner
  const int quad = lane & 3;     // position within the group

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

  const u32 smem = shared_address(shared);
  const char* a_global = reinterpret_cast<const char*>(p.a);
  const char* w_global = reinterpret_cast<const char*>(p.weights);
  const char* sa_global = reinterpret_cast<const char*>(p.a_scales);
  const long long w_strip_stride = static_cast<long long>(p.k / F::ATOM_K) * F::ATOM_BYTES;
  const u64 stream_policy = copy_stream_policy();
  // Per-thread bases of the regular cp.async patterns (see W_REGULAR and A_REGULAR).
  const long long w_thread_offset =
      STRIP_CHUNKS >= THREADS ? tid * 16LL : (tid / STRIP_CHUNKS) * w_strip_stride + (tid % STRIP_CHUNKS) * 16LL;
  const int a_row0 = tid / CPR;
  const int a_chunk = tid % CPR;
  const long long a_row_bytes = static_cast<long long>(p.k) * F::ACT_BITS / 8;
  const char* a_thread = a_global + (m0 + a_row0) * a_row_bytes + a_chunk * 16;
  const long long a_pass_stride = (THREADS / CPR) * a_row_bytes;

  // Activation rows past M are never loaded: zero them once in every stage.
  if (rows_valid < BM) {
    const int missing = BM - rows_valid;
    for (int i = tid; i < T::STAGES * missing * CPR; i += THREADS) {
      const int stage = i / (missing * CPR);
      const int rest = i % (missing * CPR);
      const int row = rows_valid + rest / CPR;
      st_shared_128(smem + stage * G::STAGE_BYTES + row * G::A_ROW_BYTES + (rest % CPR) * 16, 0, 0, 0, 0);
    }
  }

  auto load_stage = [&](int stage, int kt) {
    const u32 base = smem + stage * G::STAGE_BYTES;
    const int k0 = kt * BK;
    // Activations: row-major, 16-byte chunk c of row r stored at chunk c ^ (r % 8) (conflict-free ldmatrix).
    if constexpr (A_REGULAR) {
      constexpr int ROWS_PER_PASS = THREADS / CPR;
      const char* a_source = a_thread + static_cast<long long>(k0) * F::ACT_BITS / 8;
#pragma unroll
      for (int c = 0; c < BM * CPR / THREADS; ++c) {
        const int row = a_row0 + c * ROWS_PER_PASS;
        if (row < rows_valid) {
          if constexpr (IS_MOE) {
            copy_16(base + row * G::A_ROW_BYTES + ((a_chunk ^ (row & 7)) * 16),
                        a_global + tables.source[row] * a_row_bytes + a_chunk * 16 + static_cast<long long>(k0) * F::ACT_BITS / 8);
          } else {
            copy_16(base + row * G::A_ROW_BYTES + ((a_chunk ^ (row & 7)) * 16), a_source + c * a_pass_stride);
          }
        }
      }
    } else {
      for (int i = tid; i < BM * CPR; i += THREADS) {
        const int row = i / CPR;
        const int chunk = i % CPR;
        if (row < rows_valid) {
          const int a_row = IS_MOE ? tables.source[row] : m0 + row;
          copy_16(base + row * G::A_ROW_BYTES + ((chunk ^ (row & 7)) * 16),
                      a_global + (static_cast<long long>(a_row) * p.k + k0) * F::ACT_BITS / 8 + chunk * 16);
        }
      }
    }
    // Weights: BLOCK_N / 16 contiguous strip runs.
    const char* w_tile = w_global + (static_cast<long long>(n0 / 16) * (p.k / F::ATOM_K) + k0 / F::ATOM_K) * F::ATOM_BYTES;
    if constexpr (W_REGULAR) {
      copy_weight_strips<W_CHUNKS, STRIP_CHUNKS, THREADS>(base + G::A_STAGE_BYTES, w_tile + w_thread_offset, w_strip_stride, tid);
    } else {
#pragma unroll 4
      for (int i = tid; i < W_CHUNKS; i += THREADS) {
        copy_16_stream(base + G::A_STAGE_BYTES + i * 16,
                           w_tile + (i / STRIP_CHUNKS) * w_strip_stride + (i % STRIP_CHUNKS) * 16, stream_policy);
      }
    }
    // Vectors of the tile's K groups: weight scales and zero points [group][n], activation scales [group][m].
    const int first_group = GROUP_K > 0 ? k0 / GROUP_K : 0;
    const u32 s_base = base + G::A_STAGE_BYTES + G::W_STAGE_BYTES;
    stage_weight_vectors<F, BN, G::GROUP_ROWS, THREADS>(s_base, s_base + G::S_STAGE_BYTES, p, first_group, n0, tid);
    if constexpr (F::STAGED_ACT_SCALES) {
      // Rows past M read nothing and stage 0: their activations are zero, so their partial sums are too.
      for (int i = tid; i < G::GROUP_ROWS * BM; i += THREADS) {
        const int row = i % BM;
        int source_row, scale_rows;  // MoE: the gathered row of the activations' [k/G][input rows] grid
        if constexpr (IS_MOE) {
          source_row = row < rows_valid ? tables.source[row] : 0;
          scale_rows = moe->input_rows;
        } else {
          source_row = min(m0 + row, p.m - 1);
          scale_rows = p.m;
        }
        copy_4_zfill(s_base + G::S_STAGE_BYTES + G::Z_STAGE_BYTES + i * 4,
                         sa_global + (static_cast<long long>(first_group + i / BM) * scale_rows + source_row) * 4, row < rows_valid);
      }
    }
  };

  // Per-channel vectors (one K group): loaded once, for columns g and g + 8 of each of the warp's strips.
  StripVectors<F> channel[SPW];
#pragma unroll
  for (int j = 0; j < SPW; ++j) channel[j] = channel_vectors<F>(p, n0 + warp_n * G::WTN + j * 16 + group * 2);

  // part: what the MMAs add to (s32 or f32); acc: the f32 result. Without flushes part becomes acc after the K loop.
  Accumulator part[MT][NT][4];
  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        part[mt][nt][e] = 0;
        acc[mt][nt][e] = 0.0f;
      }

  // Adds the partial sums, scaled by group row `row` of the staged vectors, to acc and clears them.
  auto flush = [&](u32 s_smem, u32 sa_smem, int row) {
    float column_scale[NT][2];
    float row_scale[MT][2];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      column_scale[nt][0] = column_scale[nt][1] = 1.0f;
      if constexpr (F::SCALES == kScaleAccumulator) {
        ld_shared_f32x2(column_scale[nt], s_smem + row * G::S_ROW_BYTES + (warp_n * G::WTN + nt * 8 + quad * 2) * 4);
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        row_scale[mt][half] = 1.0f;
        if constexpr (F::STAGED_ACT_SCALES) {
          row_scale[mt][half] = ld_shared_f32(sa_smem + row * G::SA_ROW_BYTES + (warp_m * G::WTM + mt * 16 + half * 8 + group) * 4);
        }
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float sum = static_cast<float>(part[mt][nt][e]);
          if constexpr (F::SCALES == kScaleAccumulator || F::STAGED_ACT_SCALES) {
            acc[mt][nt][e] = __fmaf_rn(sum, row_scale[mt][e / 2] * column_scale[nt][e % 2], acc[mt][nt][e]);
          } else {
            acc[mt][nt][e] += sum;
          }
          part[mt][nt][e] = 0;
        }
  };

  // SCALE_AFTER: adds the partial sums, times their columns' compute-type scales (staged group row `row`), to acc and
  // clears them.
  auto flush_group_scales = [&](u32 s_smem, int row) {
    auto compute_to_f32 = [](u32 half_bits) {
      const unsigned short bits = static_cast<unsigned short>(half_bits);
      return F::COMPUTE_TYPE == kElementF16 ? f16_to_f32(bits) : bf16_to_f32(bits);
    };
    const u32 s_row = s_smem + row * G::S_ROW_BYTES + warp_n * G::WTN * 2;
#pragma unroll
    for (int j = 0; j < SPW; ++j) {
      if constexpr (SWAP) {
        // part[0][2j][e] is D[strip column group + 8 (e / 2)][token]: the lane's scale pair at 2 * group.
        u32 word;
        ld_shared_32(&word, s_row + (j * 16 + group * 2) * 2);
        const float scale[2] = {compute_to_f32(word & 0xFFFFu), compute_to_f32(word >> 16)};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          acc[0][j * 2][e] = __fmaf_rn(part[0][j * 2][e], scale[e / 2], acc[0][j * 2][e]);
          part[0][j * 2][e] = 0;
        }
      } else {
        // part[mt][2j + nsub][e] is strip column nsub * 8 + quad * 2 + e % 2, stored at 4 quad + 2 (e % 2) + nsub.
        u32 words[2];
        ld_shared_64(words, s_row + (j * 16 + quad * 4) * 2);
        const float scale[2][2] = {{compute_to_f32(words[0] & 0xFFFFu), compute_to_f32(words[1] & 0xFFFFu)},
                                   {compute_to_f32(words[0] >> 16), compute_to_f32(words[1] >> 16)}};  // [nsub][e % 2]
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nsub = 0; nsub < 2; ++nsub)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              acc[mt][j * 2 + nsub][e] = __fmaf_rn(part[mt][j * 2 + nsub][e], scale[nsub][e % 2], acc[mt][j * 2 + nsub][e]);
              part[mt][j * 2 + nsub][e] = 0;
            }
      }
    }
  };

  auto compute_stage = [&](int stage, int kt, bool last_tile) {
    const u32 a_smem = smem + stage * G::STAGE_BYTES;
    const u32 w_smem = a_smem + G::A_STAGE_BYTES;
    const u32 s_smem = w_smem + G::W_STAGE_BYTES;
    const u32 z_smem = s_smem + G::S_STAGE_BYTES;
    [[maybe_unused]] const u32 sa_smem = z_smem + G::Z_STAGE_BYTES;
#pragma unroll
    for (int i = 0; i < G::KAW; ++i) {
      const int atom = warp_k * G::KAW + i;  // atom index within the K tile
      u32 words[SPW][F::THREAD_WORDS];
#pragma unroll
      for (int j = 0; j < SPW; ++j) load_atom_words<F>(words[j], w_smem + ((warp_n * SPW + j) * G::KA + atom) * F::ATOM_BYTES, lane);
      StripVectors<F> vectors[SPW];
#pragma unroll
      for (int j = 0; j < SPW; ++j) vectors[j] = channel[j];
#pragma unroll
      for (int ks = 0; ks < 4; ++ks) {
        // New scale group: fetch this warp's compute-type scales (and zeros) for the group.
        if constexpr (F::SCALES == kScaleDequant && G::GROUP_ROWS > 0 && !G::SCALE_AFTER) {
          const bool reload = ks == 0 || (GROUP_K < F::ATOM_K && (ks * F::KSTEP) % GROUP_K == 0);
          if (reload) {
            const int row = GROUP_K >= BK ? 0 : (atom * F::ATOM_K + ks * F::KSTEP) / GROUP_K;
#pragma unroll
            for (int j = 0; j < SPW; ++j) {
              load_staged_vectors<F, G::S_ROW_BYTES, G::Z_ROW_BYTES>(vectors[j], s_smem, z_smem, row,
                                                                    (warp_n * G::WTN + j * 16 + group * 2) * 2);
            }
          }
        }
        // Activation fragments: ldmatrix.x4 of rows 0-15 and the two 16-byte halves of this k-step; with at most
        // 8 live rows only rows 0-7 are read (half the shared-memory traffic) and rows 8-15 are zero.
        u32 a[MT][4];
        if (SWAP || (SINGLE_M_TILE && rows_valid <= 8)) {
          const int row = lane & 7;
          const int chunk = (atom * 4 + ks) * 2 + ((lane >> 3) & 1);
          ldmatrix_x2(a[0][0], a[0][2], a_smem + row * G::A_ROW_BYTES + ((chunk ^ row) * 16));
          a[0][1] = 0;
          a[0][3] = 0;
        } else {
          const int chunk = (atom * 4 + ks) * 2 + (lane >> 4);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            const int row = warp_m * G::WTM + mt * 16 + (lane & 15);
            ldmatrix_x4(a[mt], a_smem + row * G::A_ROW_BYTES + ((chunk ^ (row & 7)) * 16));
          }
        }
#pragma unroll
        for (int j = 0; j < SPW; ++j) {
          u32 b[2][2];  // [n8 tile][B register] of the strip's 16 columns
#pragma unroll
          for (int nsub = 0; nsub < 2; ++nsub) {
            const int slot = (ks * 2 + nsub) * 2;  // a constant once the loops are unrolled
            if constexpr (F::QUANTIZED_ACT) {
              b[nsub][0] = operand_slot<F>(words[j], slot);
              b[nsub][1] = operand_slot<F>(words[j], slot + 1);
            } else {
              dequant_pair<F, !G::SCALE_AFTER>(b[nsub][0], b[nsub][1], words[j], slot, vectors[j], nsub);
            }
          }
          if constexpr (SWAP) {
            // The strip's four B registers are the A fragment of its 16 columns (rows g and g + 8, k halves 0 and 1);
            // the activation rows are the B fragment of tokens 0-7. part[0][2j] holds D[column][token].
            const u32 strip_operand[4] = {b[0][0], b[1][0], b[0][1], b[1][1]};
            mma_step<F>(part[0][j * 2], strip_operand, a[0][0], a[0][2]);
          } else {
#pragma unroll
            for (int nsub = 0; nsub < 2; ++nsub)
#pragma unroll
              for (int mt = 0; mt < MT; ++mt) mma_step<F>(part[mt][j * 2 + nsub], a[mt], b[nsub][0], b[nsub][1]);
          }
        }
        // A K group ends (or this warp's share of it in this tile, or the CTA's K range): flush its partial sums.
        if constexpr (G::FLUSHES) {
          constexpr int FLUSH_K = G::FLUSH_K;
          const bool chunk_end = i == G::KAW - 1 && ks == 3;
          bool ends;
          int row = 0;
          if constexpr (FLUSH_K <= BK) {
            const int k_in_tile = atom * F::ATOM_K + ks * F::KSTEP;
            ends = chunk_end || (k_in_tile + F::KSTEP) % FLUSH_K == 0;
            if constexpr (GROUP_K > 0 && GROUP_K < BK) row = k_in_tile / GROUP_K;
          } else {
            ends = chunk_end && ((kt + 1) * BK % FLUSH_K == 0 || last_tile);
          }
          if (ends) {
            if constexpr (G::SCALE_AFTER) {
              flush_group_scales(s_smem, row);
            } else {
              flush(s_smem, sa_smem, row);
            }
          }
        }
      }
    }
  };

  // ---- the pipeline ----
#pragma unroll
  for (int s = 0; s < T::STAGES - 1; ++s) {
    if (s < tile_count) load_stage(s, kt_begin + s);
    copy_commit();
  }
  for (int it = 0; it < tile_count; ++it) {
    copy_wait<T::STAGES - 2>();
    __syncthreads();
    const int next = it + T::STAGES - 1;
    if (next < tile_count) load_stage(next % T::STAGES, kt_begin + next);
    copy_commit();
    compute_stage(it % T::STAGES, kt_begin + it, it == tile_count - 1);
  }
  copy_wait<0>();
  if constexpr (SWAP && G::SCALE_AFTER) {
    // The flushed sums are in acc's swapped fragments: transposed through part like the unflushed ones.
#pragma unroll
    for (int j = 0; j < SPW; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) part[0][j * 2][e] = acc[0][j * 2][e];
  }
  if constexpr (SWAP) {
    // Back to the normal fragment layout: element e of n8 tile nsub is D[column nsub * 8 + 2 * quad + e][token group],
    // held by lane (2 * quad + e) * 4 + group / 2 as its element 2 * nsub + group % 2. Rows 8-15 are dead.
#pragma unroll
    for (int j = 0; j < SPW; ++j) {
      Accumulator d[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) d[e] = part[0][j * 2][e];
#pragma unroll
      for (int nsub = 0; nsub < 2; ++nsub)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int source = (2 * quad + e) * 4 + group / 2;
          const Accumulator even = __shfl_sync(0xFFFFFFFFu, d[2 * nsub], source);
          const Accumulator odd = __shfl_sync(0xFFFFFFFFu, d[2 * nsub + 1], source);
          part[0][j * 2 + nsub][e] = (group & 1) ? odd : even;
          part[0][j * 2 + nsub][e + 2] = 0;
        }
    }
  }
  if constexpr (!G::FLUSHES || (SWAP && G::SCALE_AFTER)) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[mt][nt][e] = static_cast<float>(part[mt][nt][e]);
  }

  // ---- WARPS_K partial sums, added in warp order ----
  if constexpr (T::WARPS_K > 1) {
    __syncthreads();
    auto reduce_address = [&](int slot, int mt, int nt) {
      return smem + (((slot * WARPS_MN + warp_mn) * MT + mt) * NT + nt) * 512 + lane * 16;
    };
    if (warp_k > 0) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          st_shared_128(reduce_address(warp_k - 1, mt, nt), __float_as_uint(acc[mt][nt][0]), __float_as_uint(acc[mt][nt][1]),
                        __float_as_uint(acc[mt][nt][2]), __float_as_uint(acc[mt][nt][3]));
    }
    __syncthreads();
    if (warp_k == 0) {
      for (int slot = 0; slot < T::WARPS_K - 1; ++slot) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            u32 r[4];
            ld_shared_128(r, reduce_address(slot, mt, nt));
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nt][e] += __uint_as_float(r[e]);
          }
      }
    }
  }

  // ---- split-K: partial tiles to the workspace; the last CTA of a tile adds them in split order ----
  if constexpr (T::SPLIT_K > 1) {
    // Fragments whose rows all lie past M carry nothing: they are neither written nor read back.
    auto fragment = [&](int f) -> float* { return acc[f / NT][f % NT]; };
    auto live = [&](int f) { return warp_m * G::WTM + (f / NT) * 16 + group < rows_valid; };
    if (!reduce_split_k<T::SPLIT_K, MT * NT>(reinterpret_cast<float*>(p.workspace), schedule.tiles, work.tile, work.split, BM * BN,
                                            warp_mn * MT * NT, lane, warp_k == 0, tid == 0, last_split_flag, fragment, live,
                                            [] { __syncthreads(); })) {
      return;
    }
  }

  // ---- epilogue: channel scale, token scale, global scale, bias, convert, store ----
  if (warp_k != 0) return;
  const float global_scale = ld_global_f32(reinterpret_cast<const void*>(p.global_scale));
  const char* bias = reinterpret_cast<const char*>(p.bias);
  char* c_global = reinterpret_cast<char*>(p.c);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int column = n0 + warp_n * G::WTN + nt * 8 + quad * 2;
    const float scale0 = output_scale<F>(p, global_scale, column), scale1 = output_scale<F>(p, global_scale, column + 1);
    float bias0 = 0.0f, bias1 = 0.0f;
    if (p.bias != 0) {
      const u32 pair = ld_global_32(bias + column * 2);
      bias0 = output_to_f32<F>(static_cast<unsigned short>(pair & 0xFFFFu));
      bias1 = output_to_f32<F>(static_cast<unsigned short>(pair >> 16));
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if constexpr (IS_MOE) {
          // Gathered activation scale, scattered output row, router weight (1 except token-indexed down).
          const int r = warp_m * G::WTM + mt * 16 + group + half * 8;
          if (r < rows_valid) {
            float row_scale = tables.weight[r];
            if constexpr (F::ACTIVATION_SCALES == kActivationScaleToken) row_scale *= ld_global_f32(sa_global + tables.source[r] * 4LL);
            const float v0 = acc[mt][nt][half * 2] * scale0 * row_scale;
            const float v1 = acc[mt][nt][half * 2 + 1] * scale1 * row_scale;
            st_global_32(c_global + (static_cast<long long>(tables.target[r]) * p.n + column) * 2, pack_output<F>(v0, v1));
          }
          continue;
        }
        const int row = m0 + warp_m * G::WTM + mt * 16 + group + half * 8;
        if (row < p.m) {
          float row_scale = 1.0f;
          if constexpr (F::ACTIVATION_SCALES == kActivationScaleToken) row_scale = ld_global_f32(sa_global + row * 4);
          const float v0 = acc[mt][nt][half * 2] * scale0 * row_scale + bias0;
          const float v1 = acc[mt][nt][half * 2 + 1] * scale1 * row_scale + bias1;
          st_global_32(c_global + (static_cast<long long>(row) * p.n + column) * 2, pack_output<F>(v0, v1));
        }
      }
    }
  }
}

template <class F, class T, int SCALE_AFTER = 0>
__device__ __forceinline__ void mma_gemm(const GemmParams& p) {
  if constexpr (MmaGemm<F, T, SCALE_AFTER>::CAN_SWAP) {
    if (p.m <= 8) {
      mma_gemm_tiles<F, T, true, DenseRows, SCALE_AFTER>(p);
      return;
    }
  }
  mma_gemm_tiles<F, T, false, DenseRows, SCALE_AFTER>(p);
}

}  // namespace device
}  // namespace qtune
