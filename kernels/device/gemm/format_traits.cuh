#pragma once
// Compile-time description of a quantized GEMM format as the mma kernel sees it, and the weight layout it implies.
//
// Prepacked weight layout (see kernels/prepack.cpp for the host side):
//   The weight matrix W[N][K] is cut into atoms of 16 columns (n) x ATOM_K = 4 mma k-steps. Atoms are stored
//   strip-major: atom (s, a) covering n in [16s, 16s+16) and k in [a*ATOM_K, (a+1)*ATOM_K) starts at byte
//   (s * (K / ATOM_K) + a) * ATOM_BYTES, so a CTA's tile is a few long contiguous runs, whatever its shape.
//   Inside an atom every lane of a warp owns THREAD_WORDS 32-bit words holding exactly the 16 tensor-core B registers
//   it needs for the atom's 8 mma tiles (2 n8 tiles x 4 k-steps); the words are stored slice-major (all lanes'
//   first SLICE_BYTES, then the next) so shared-memory reads are 4/8/16-byte loads without bank conflicts.
//   Register slot rho = (kstep * 2 + nsub) * 2 + r is B register r (0: k 0-7 of the step, 1: k 8-15 for f16) of the
//   n8 tile nsub. A W_BITS code is split into bit planes of widths 8/4/2/1 (largest first = least significant);
//   plane j of slot rho lives in word WB_j + rho / R_j at lane field s = rho % R_j, where each compute-type lane of
//   the word (16, 8 or 4 bits) holds the code bits at [s * P_j, s * P_j + P_j).
#include "gemm/abi.cuh"

namespace qtune {
namespace device {

__host__ __device__ constexpr int element_bits(int code) {
  return (code == kElementF16 || code == kElementBF16) ? 16 : (code == kElementS4 || code == kElementE2M1) ? 4 : 8;
}

__host__ __device__ constexpr int plane_count(int bits) { return (bits & 1) + ((bits >> 1) & 1) + ((bits >> 2) & 1) + ((bits >> 3) & 1); }
// Width of the j-th bit plane, widest first (8, 4, 2, 1).
__host__ __device__ constexpr int plane_width(int bits, int j) {
  int seen = 0;
  for (int width = 8; width >= 1; width >>= 1) {
    if (bits & width) {
      if (seen == j) return width;
      ++seen;
    }
  }
  return 0;
}
// Bit significance of the j-th plane within the code.
__host__ __device__ constexpr int plane_offset(int bits, int j) {
  int offset = 0;
  for (int i = 0; i < j; ++i) offset += plane_width(bits, i);
  return offset;
}

// First word (per lane, per atom) of the j-th plane: earlier planes hold values_per_register * width / 2 words each.
__host__ __device__ constexpr int plane_word_base(int bits, int j, int values_per_register) {
  int base = 0;
  for (int i = 0; i < j; ++i) base += values_per_register * plane_width(bits, i) / 2;
  return base;
}

template <int ACT, int COMPUTE, int W_KIND, int W_BITS, int W_EXP, int W_MAN, int SCALE_MODE, int GROUP_K,
          int ACT_SCALE, int ACT_GROUP_K, int OUT>
struct Format {
  static constexpr int ACTIVATION = ACT;
  static constexpr int COMPUTE_TYPE = COMPUTE;
  static constexpr int WEIGHT_KIND = W_KIND;
  static constexpr int WEIGHT_BITS = W_BITS;
  static constexpr int WEIGHT_EXPONENT_BITS = W_EXP;
  static constexpr int WEIGHT_MANTISSA_BITS = W_MAN;
  static constexpr int SCALES = SCALE_MODE;
  static constexpr int SCALE_GROUP_K = GROUP_K;  // 0: one scale per channel (no K groups)
  static constexpr int ACTIVATION_SCALES = ACT_SCALE;
  static constexpr int ACTIVATION_GROUP_K = ACT_GROUP_K;
  static constexpr int OUTPUT = OUT;

  static constexpr int ACT_BITS = element_bits(ACT);
  static constexpr int COMPUTE_BITS = element_bits(COMPUTE);
  static constexpr int KSTEP = 256 / COMPUTE_BITS;  // K elements of one mma.sync (32 bytes of each A row)
  static constexpr int ATOM_K = 4 * KSTEP;
  static constexpr int LANE_BITS = COMPUTE_BITS;     // bits of one value inside a tensor-core register
  static constexpr int VALUES_PER_REGISTER = 32 / COMPUTE_BITS;
  static constexpr int THREAD_WORDS = VALUES_PER_REGISTER * W_BITS / 2;  // 16 registers' worth of codes
  static constexpr int ATOM_BYTES = 32 * 4 * THREAD_WORDS;
  static constexpr int SLICE_BYTES = (THREAD_WORDS * 4) % 16 == 0 ? 16 : ((THREAD_WORDS * 4) % 8 == 0 ? 8 : 4);
  static constexpr int SLICES = THREAD_WORDS * 4 / SLICE_BYTES;
  static constexpr bool HAS_ZERO = W_KIND == kWeightIntZero || W_KIND == kWeightFloatZero;
  static constexpr bool IS_FLOAT = W_KIND == kWeightFloat;
  // Per-channel vectors are loaded once into registers; grouped ones are staged through shared memory per K tile.
  static constexpr bool STAGED_SCALES = SCALE_MODE != kScaleEpilogue && GROUP_K > 0;
  static constexpr bool STAGED_ZEROS = HAS_ZERO && GROUP_K > 0;

  static_assert(ACT == kElementF16 || ACT == kElementBF16, "this kernel version supports f16/bf16 activations only");
  static_assert(COMPUTE == ACT, "with f16/bf16 activations the tensor cores run in the activation type");
  static_assert(W_BITS >= 1 && W_BITS <= 8, "weights must have 1 to 8 bits");
  static_assert(W_KIND >= kWeightSignedInt && W_KIND <= kWeightFloat, "unknown weight kind");
  static_assert(!IS_FLOAT || (W_EXP >= 1 && W_EXP + W_MAN + 1 == W_BITS), "float weights: 1 + E + M must equal the bit width");
  static_assert(!IS_FLOAT || COMPUTE != kElementF16 || W_EXP <= 5, "float weights with more than 5 exponent bits need bf16 activations");
  static_assert(SCALE_MODE == kScaleEpilogue || SCALE_MODE == kScaleDequant, "f16/bf16 activations: scales in the epilogue or in the dequantization");
  static_assert(W_KIND != kWeightFloatZero || SCALE_MODE == kScaleDequant, "a floating-point zero point is applied with its scale in the dequantization");
  static_assert(GROUP_K == 0 || GROUP_K % KSTEP == 0, "the scale group must be a multiple of the mma k-step (16 for f16/bf16)");
  static_assert(OUT == kElementF16 || OUT == kElementBF16, "output must be f16 or bf16");
};

// Block tile, warp arrangement, pipeline depth, split-K and rasterization.
template <int BM, int BN, int BK, int WM, int WN, int WK, int STAGES_, int SPLIT, int RASTER_>
struct Tiles {
  static constexpr int BLOCK_M = BM, BLOCK_N = BN, BLOCK_K = BK;
  static constexpr int WARPS_M = WM, WARPS_N = WN, WARPS_K = WK;
  static constexpr int STAGES = STAGES_, SPLIT_K = SPLIT, RASTER = RASTER_;
  static constexpr int WARPS = WM * WN * WK;
  static constexpr int THREADS = 32 * WARPS;

  static_assert(WM >= 1 && WN >= 1 && WK >= 1, "WARPS_M, WARPS_N and WARPS_K must be at least 1");
  static_assert(THREADS <= 1024, "a block has at most 1024 threads (32 * WARPS_M * WARPS_N * WARPS_K)");
  static_assert(BM % 16 == 0, "BLOCK_M must be a multiple of 16 (one mma.sync m-tile)");
  static_assert(BM % (16 * WM) == 0, "BLOCK_M must be a multiple of 16 * WARPS_M (each warp owns whole m16 tiles)");
  static_assert(BN % (16 * WN) == 0, "BLOCK_N must be a multiple of 16 * WARPS_N (each warp owns whole 16-column weight atoms)");
  static_assert(BK % 16 == 0, "BLOCK_K must be a multiple of 16 (one mma.sync k-step)");
  static_assert(STAGES_ >= 2 && STAGES_ <= 8, "STAGES must be between 2 and 8 (cp.async pipeline depth)");
  static_assert(SPLIT >= 1 && SPLIT <= 64, "SPLIT_K must be between 1 and 64");
  static_assert(RASTER_ >= 0 && RASTER_ <= 5, "RASTER is 0 (N-fastest order) or log2 of the M-band width, at most 5");
};

}  // namespace device
}  // namespace qtune
