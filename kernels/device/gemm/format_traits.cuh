#pragma once
// Compile-time description of a quantized GEMM format as the mma kernel sees it, and the weight layout it implies.
//
// Prepacked weight layout (see kernels/families/mma_layout.cpp for the host side):
//   The weight matrix W[N][K] is cut into atoms of 16 columns (n) x ATOM_K = 4 mma k-steps. Atoms are stored
//   strip-major: atom (s, a) covering n in [16s, 16s+16) and k in [a*ATOM_K, (a+1)*ATOM_K) starts at byte
//   (s * (K / ATOM_K) + a) * ATOM_BYTES, so a CTA's tile is a few long contiguous runs, whatever its shape.
//   Inside an atom every lane of a warp owns THREAD_WORDS 32-bit words holding exactly the 16 tensor-core B registers
//   it needs for the atom's 8 mma tiles (2 n8 tiles x 4 k-steps); the words are stored slice-major (all lanes'
//   first SLICE_BYTES, then the next) so shared-memory reads are 4/8/16-byte loads without bank conflicts.
//   Register slot rho = (kstep * 2 + nsub) * 2 + r is B register r of the n8 tile nsub: the first or second 16 bytes
//   of the k-step's 32 bytes of a weight row (f16: k 0-7 / 8-15; 8-bit: k 0-15 / 16-31; 4-bit: k 0-31 / 32-63), the
//   lane's 4 bytes of them at 4 * (lane % 4), for the column n = lane / 4 of the tile (the same bytes for every
//   operand width). A W_BITS code is split into bit planes of widths 8/4/2/1 (largest first = least significant);
//   plane j of slot rho lives in word WB_j + rho / R_j at lane field s = rho % R_j, where each compute-type lane of
//   the word (16, 8 or 4 bits) holds the code bits at [s * P_j, s * P_j + P_j).
//   Raw 8-bit operands (CORE_MATRIX_ATOMS: W8A8 int8 and fp8) store word rho of all 32 lanes as one 128-byte core
//   matrix (8 columns x 16 K-bytes; lane 4 n + q at byte 4 lane) at ((nsub * 4 + ks) * 2 + r) * 128 instead, so
//   ldmatrix reads the registers and a wgmma shared-memory descriptor reads the atom as it is: 8-column groups 1024
//   bytes apart (SBO), the two K halves of a k-step 128 apart (LBO), k-steps 256 apart.
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

template <class A, class B, bool USE_A>
struct Choose {
  typedef A type;
};
template <class A, class B>
struct Choose<A, B, false> {
  typedef B type;
};

__host__ __device__ constexpr bool is_16bit_float(int code) { return code == kElementF16 || code == kElementBF16; }
__host__ __device__ constexpr bool is_fp8(int code) { return code == kElementE4M3 || code == kElementE5M2; }
__host__ __device__ constexpr bool is_integer_operand(int code) { return code == kElementS8 || code == kElementS4; }
__host__ __device__ constexpr int operand_exponent_bits(int code) { return code == kElementE4M3 ? 4 : code == kElementE5M2 ? 5 : 0; }
__host__ __device__ constexpr int operand_mantissa_bits(int code) { return code == kElementE4M3 ? 3 : code == kElementE5M2 ? 2 : 0; }

// ACT is the activation type (tensor-core A operand), COMPUTE the B operand type the weights become in registers.
//   f16/bf16 activations: COMPUTE == ACT; scales in the epilogue (per channel) or in the dequantization (groups).
//   quantized activations (s8, s4, e4m3, e5m2): the weights become ACT operands (int4 -> s8, e2m1 -> e4m3, ...), or
//   stay 8-bit floats of their own type (e4m3 x e5m2 MMA); the MMA accumulates K groups exactly (s32) or in f32, and
//   scales are applied to f32 partial sums: per channel / per token in the epilogue, per K group (kScaleAccumulator,
//   kActivationScaleGroup) whenever a group ends.
// SCALE_GROUP_N: weight columns sharing one scale (Gn of Gn x Gk blocks; 1: a scale per column, or none per group).
template <int ACT, int COMPUTE, int W_KIND, int W_BITS, int W_EXP, int W_MAN, int SCALE_MODE, int GROUP_K,
          int ACT_SCALE, int ACT_GROUP_K, int OUT, int SCALE_GROUP_N_ = 1>
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
  static constexpr int SCALE_GROUP_N = SCALE_GROUP_N_;

  static constexpr bool QUANTIZED_ACT = !is_16bit_float(ACT);
  static constexpr bool INTEGER_MMA = is_integer_operand(COMPUTE);
  static constexpr bool FP8_MMA = is_fp8(COMPUTE);
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
  // The stored code is the tensor-core operand as it is (int8 on s8, int4 on s4, 8-bit floats on fp8).
  static constexpr bool RAW_OPERAND = QUANTIZED_ACT && W_BITS == COMPUTE_BITS;
  static constexpr bool CORE_MATRIX_ATOMS = RAW_OPERAND && W_BITS == 8;
  // Signed integers are stored offset-binary (code + 2^(b-1)) unless they are the operand as they are.
  static constexpr bool OFFSET_CODES = W_KIND == kWeightSignedInt && !RAW_OPERAND;
  // Per-channel vectors are loaded once into registers; grouped ones are staged through shared memory per K tile.
  static constexpr bool STAGED_SCALES = SCALE_MODE != kScaleEpilogue && GROUP_K > 0;
  static constexpr bool STAGED_ZEROS = HAS_ZERO && GROUP_K > 0;
  static constexpr bool STAGED_ACT_SCALES = ACT_SCALE == kActivationScaleGroup;
  static constexpr int SCALE_BYTES = SCALE_MODE == kScaleAccumulator ? 4 : 2;  // f32 or compute type
  // K elements per row of staged vectors (weight scale / zero groups, or activation scale groups).
  static constexpr int STAGE_GROUP_K = (STAGED_SCALES || STAGED_ZEROS) ? GROUP_K : (STAGED_ACT_SCALES ? ACT_GROUP_K : 0);
  // K elements after which the MMA's partial sums are scaled and added to the f32 accumulator (0: only at the end).
  // fp8 MMAs are promoted every atom (128 K) even without groups: their internal accumulation is not full f32.
  static constexpr int FLUSH_K = (SCALE_MODE == kScaleAccumulator || STAGED_ACT_SCALES) ? STAGE_GROUP_K
                                 : FP8_MMA                                               ? ATOM_K
                                                                                         : 0;
  typedef typename Choose<int, float, INTEGER_MMA>::type Accumulator;

  static_assert(ACT >= kElementF16 && ACT <= kElementE2M1 && COMPUTE >= kElementF16 && COMPUTE <= kElementE2M1, "unknown element type");
  static_assert(W_BITS >= 1 && W_BITS <= 8, "weights must have 1 to 8 bits");
  static_assert(W_KIND >= kWeightSignedInt && W_KIND <= kWeightFloat, "unknown weight kind");
  static_assert(!IS_FLOAT || (W_EXP >= 1 && W_EXP + W_MAN + 1 == W_BITS), "float weights: 1 + E + M must equal the bit width");
  static_assert(OUT == kElementF16 || OUT == kElementBF16, "output must be f16 or bf16");
  static_assert(GROUP_K == 0 || GROUP_K % KSTEP == 0, "the scale group must be a multiple of the mma k-step (16 for f16/bf16, 32 for 8-bit, 64 for 4-bit operands)");
  // ---- f16 / bf16 activations ----
  static_assert(QUANTIZED_ACT || COMPUTE == ACT, "with f16/bf16 activations the tensor cores run in the activation type");
  static_assert(QUANTIZED_ACT || !IS_FLOAT || COMPUTE != kElementF16 || W_EXP <= 5, "float weights with more than 5 exponent bits need bf16 activations");
  static_assert(QUANTIZED_ACT || SCALE_MODE == kScaleEpilogue || SCALE_MODE == kScaleDequant, "f16/bf16 activations: scales in the epilogue or in the dequantization");
  static_assert(QUANTIZED_ACT || ACT_SCALE == kActivationScaleNone, "f16/bf16 activations take no activation scales");
  static_assert(W_KIND != kWeightFloatZero || SCALE_MODE == kScaleDequant, "a floating-point zero point is applied with its scale in the dequantization");
  // ---- quantized activations ----
  static_assert(ACT != kElementE2M1, "fp4 activations need the sm_100/sm_120 block-scaled MMA, which this kernel does not use");
  static_assert(!QUANTIZED_ACT || element_bits(ACT) == COMPUTE_BITS, "the weight operand must have the activation's width (8-bit or 4-bit MMA)");
  static_assert(!QUANTIZED_ACT || (is_integer_operand(ACT) == INTEGER_MMA), "integer activations need integer weight operands, fp8 activations fp8 ones");
  static_assert(!QUANTIZED_ACT || SCALE_MODE == kScaleEpilogue || SCALE_MODE == kScaleAccumulator, "quantized activations: weight scales go to the epilogue (per channel) or to the f32 partial sums (per K group)");
  static_assert(!QUANTIZED_ACT || !HAS_ZERO, "zero points are not implemented with quantized activations");
  static_assert(!QUANTIZED_ACT || W_BITS <= COMPUTE_BITS, "weights wider than the tensor-core operand");
  static_assert(!QUANTIZED_ACT || !INTEGER_MMA || W_KIND == kWeightSignedInt, "integer MMA takes signed integer weights");
  static_assert(!QUANTIZED_ACT || !IS_FLOAT || W_BITS == 8 || (W_EXP <= operand_exponent_bits(COMPUTE) && W_MAN <= operand_mantissa_bits(COMPUTE) &&
                                                               !(COMPUTE == kElementE5M2 && W_EXP == 5)),
                "float weights are moved bit for bit into the fp8 operand: at most its exponent and mantissa widths");
  static_assert(!QUANTIZED_ACT || !IS_FLOAT || W_BITS < 8 || (W_EXP == operand_exponent_bits(COMPUTE) && W_MAN == operand_mantissa_bits(COMPUTE)),
                "8-bit float weights are the fp8 operand of their own type (e4m3 or e5m2)");
  static_assert(!QUANTIZED_ACT || !IS_FLOAT || W_BITS < 8 || FP8_MMA, "8-bit float weights need an fp8 MMA");
  static_assert(!QUANTIZED_ACT || IS_FLOAT || COMPUTE == ACT, "integer weights become operands of the activation type");
  static_assert(!QUANTIZED_ACT || IS_FLOAT || !FP8_MMA || W_BITS <= (COMPUTE == kElementE4M3 ? 5 : 4),
                "integer weights on fp8 operands must be exact fp8 values (up to int5 in e4m3, int4 in e5m2)");
  static_assert(ACT_SCALE >= kActivationScaleNone && ACT_SCALE <= kActivationScaleGroup, "unknown activation scale mode");
  static_assert(ACT_SCALE != kActivationScaleGroup || (ACT_GROUP_K > 0 && ACT_GROUP_K % KSTEP == 0), "the activation scale group must be a multiple of the mma k-step");
  static_assert(!(STAGED_ACT_SCALES && (STAGED_SCALES || STAGED_ZEROS)) || ACT_GROUP_K == GROUP_K, "weight and activation scale groups along K must be equal");
  static_assert(SCALE_GROUP_N_ >= 1, "SCALE_GROUP_N counts the weight columns of one scale: at least 1");
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
