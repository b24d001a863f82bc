#pragma once
// Weight codes -> tensor-core registers, in registers, with bit tricks (no lookup tables).
//   Integers: the code is OR-ed into the mantissa of a "magic" number (f16 1024.0 = 0x6400, bf16 128.0 = 0x4300) so
//   the register holds magic + code exactly; one packed subtract of (magic + zero) leaves code - zero for two values.
//   INT4 on f16 skips the shifts for odd fields: (w & 0x00F000F0) | 0x6400 is 1024 + 16 q, and one packed fma with
//   1/16 and -(64 + zero) gives q - zero.
//   Floats eXmY: sign and exponent|mantissa are moved into f16/bf16 position; the value read is the true one times
//   2^-(target bias - source bias), a power of two the host folds into the scales.
// Quantized activations (operand_slot): the weights become 8-bit or 4-bit operands of the MMA, unscaled.
//   Integers narrower than the operand move to the top of each lane (offset-binary code << (lane - bits), then the
//   lane's top bit flipped): the operand is code * 2^(lane - bits), exact; the host divides the scales by that.
//   Floats narrower than fp8 move bit for bit into e4m3/e5m2 like above (operand = value * 2^(bias_w - bias_fp8)).
//   Integers on fp8 become exact f16 with the magic number, then fp8 with one conversion per pair.
#include "gemm/format_traits.cuh"
#include "gemm/operand_bits.cuh"
#include "gemm/ptx.cuh"

namespace qtune {
namespace device {

template <int LANE_BITS>
struct LaneReplicate;
template <>
struct LaneReplicate<16> {
  static constexpr u32 value = 0x00010001u;
};
template <>
struct LaneReplicate<8> {
  static constexpr u32 value = 0x01010101u;
};
template <>
struct LaneReplicate<4> {
  static constexpr u32 value = 0x11111111u;
};

// The bits of plane J of register slot `rho`, moved to their significance within each lane. Slots are loop indices
// that become constants once the k-step loops are unrolled, so every shift and mask here folds to an immediate.
template <class F, int J>
__device__ __forceinline__ u32 gather_plane(const u32* words, int rho) {
  constexpr int width = plane_width(F::WEIGHT_BITS, J);
  constexpr int offset = plane_offset(F::WEIGHT_BITS, J);
  constexpr int word_base = plane_word_base(F::WEIGHT_BITS, J, F::VALUES_PER_REGISTER);
  constexpr int fields_per_lane = F::LANE_BITS / width;
  constexpr u32 mask = ((1u << width) - 1u) * LaneReplicate<F::LANE_BITS>::value << offset;
  const int word = word_base + rho / fields_per_lane;
  const int shift = (rho % fields_per_lane) * width - offset;
  return (shift >= 0 ? words[word] >> shift : words[word] << (-shift)) & mask;
}

// The full W_BITS code of register slot `rho`, one code per lane, in the low bits of each lane.
template <class F>
__device__ __forceinline__ u32 gather_code(const u32* words, int rho) {
  constexpr int planes = plane_count(F::WEIGHT_BITS);
  u32 code = gather_plane<F, 0>(words, rho);
  if constexpr (planes > 1) code |= gather_plane<F, 1>(words, rho);
  if constexpr (planes > 2) code |= gather_plane<F, 2>(words, rho);
  if constexpr (planes > 3) code |= gather_plane<F, 3>(words, rho);
  return code;
}

// What is subtracted from integer codes, per pair of lanes (the same column, so the same zero for both lanes).
struct ZeroTerm {
  u32 magic;     // magic + zero (f16: 1024 + z, bf16: 128 + z), for the packed subtract
  u32 high;      // f16 INT4 fast path: -(64 + z) for the odd fields
  float wide;    // bf16 8-bit integers: 2^23 + z, for the f32 path
};

template <class F>
__device__ __forceinline__ ZeroTerm constant_zero() {
  constexpr int zero = F::WEIGHT_KIND == kWeightSignedInt ? (1 << (F::WEIGHT_BITS - 1)) : 0;
  ZeroTerm term;
  if constexpr (F::COMPUTE_TYPE == kElementF16) {
    term.magic = (0x6400u + zero) * 0x00010001u;
    term.high = (0xD400u + 16u * zero) * 0x00010001u;
    term.wide = 0.0f;
  } else {
    term.magic = (0x4300u + zero) * 0x00010001u;
    term.high = 0;
    term.wide = 8388608.0f + zero;
  }
  return term;
}

// From a pair of zero points (compute type, both lanes the same value).
template <class F>
__device__ __forceinline__ ZeroTerm loaded_zero(u32 zero_pair) {
  ZeroTerm term;
  if constexpr (F::COMPUTE_TYPE == kElementF16) {
    term.magic = hadd2_f16(zero_pair, 0x64006400u);
    term.high = hfma2_f16(zero_pair, 0xBC00BC00u, 0xD400D400u);  // -z - 64
    term.wide = 0.0f;
  } else {
    term.magic = hadd2_bf16(zero_pair, 0x43004300u);
    term.high = 0;
    term.wide = 8388608.0f + bf16_to_f32(static_cast<unsigned short>(zero_pair & 0xFFFFu));
  }
  return term;
}

// Register slot `rho` as two compute-type values: integer code - zero, or the float code re-biased (see above).
// For kWeightFloatZero the result is the plain unsigned code; the zero is applied with the scale.
template <class F>
__device__ __forceinline__ u32 dequant_slot(const u32* words, int rho, const ZeroTerm& zero) {
  static_assert(F::LANE_BITS == 16, "dequant_slot produces f16/bf16 pairs");
  constexpr bool integer = !F::IS_FLOAT;
  constexpr bool float_zero = F::WEIGHT_KIND == kWeightFloatZero;
  if constexpr (F::COMPUTE_TYPE == kElementF16 && integer && F::WEIGHT_BITS == 4) {
    // One plane, four fields per lane: fields 0/2 need the mask only, 1/3 use the 16x magic and an fma.
    const int field = rho % 4;
    const u32 word = words[rho / 4];
    const u32 source = field >= 2 ? word >> 8 : word;
    if (field % 2 == 0) {
      const u32 biased = and_or(source, 0x000F000Fu, 0x64006400u);
      return hsub2_f16(biased, float_zero ? 0x64006400u : zero.magic);
    } else {
      const u32 biased = and_or(source, 0x00F000F0u, 0x64006400u);
      return hfma2_f16(biased, 0x2C002C00u, float_zero ? 0xD400D400u : zero.high);
    }
  } else if constexpr (integer) {
    const u32 code = gather_code<F>(words, rho);
    if constexpr (F::COMPUTE_TYPE == kElementF16) {
      return hsub2_f16(code | 0x64006400u, float_zero ? 0x64006400u : zero.magic);
    } else if constexpr (F::WEIGHT_BITS <= 7) {
      return hsub2_bf16(code | 0x43004300u, float_zero ? 0x43004300u : zero.magic);
    } else {
      // 8-bit codes do not fit bf16's 7-bit mantissa trick: go through f32 (exact: |code - zero| <= 255).
      const float wide = float_zero ? 8388608.0f : zero.wide;
      const float low = __uint_as_float((code & 0xFFu) | 0x4B000000u) - wide;
      const float high = __uint_as_float((code >> 16) | 0x4B000000u) - wide;
      return pack_bf16x2(low, high);
    }
  } else {
    const u32 code = gather_code<F>(words, rho);
    constexpr int bits = F::WEIGHT_BITS;
    constexpr int mantissa_position = (F::COMPUTE_TYPE == kElementF16 ? 10 : 7) - F::WEIGHT_MANTISSA_BITS;
    constexpr u32 magnitude_mask = (((1u << (bits - 1)) - 1u) << mantissa_position) * 0x00010001u;
    return ((code << (16 - bits)) & 0x80008000u) | ((code << mantissa_position) & magnitude_mask);
  }
}

// Scale (and floating zero point) applied to a dequantized pair, in the compute type.
template <class F>
__device__ __forceinline__ u32 apply_scale(u32 value, u32 scale_pair, u32 zero_pair) {
  if constexpr (F::WEIGHT_KIND == kWeightFloatZero) {
    // zero_pair holds -(zero * scale): value * scale - zero * scale.
    return F::COMPUTE_TYPE == kElementF16 ? hfma2_f16(value, scale_pair, zero_pair) : hfma2_bf16(value, scale_pair, zero_pair);
  } else {
    return F::COMPUTE_TYPE == kElementF16 ? hmul2_f16(value, scale_pair) : hmul2_bf16(value, scale_pair);
  }
}

// Integer codes of register slot `rho` in 8-bit lanes (offset-binary) as exact f16 pairs code - 2^(b-1): `even` holds
// lanes 0 and 2, `odd` lanes 1 and 3.
template <class F>
__device__ __forceinline__ void integer_lanes_as_f16(u32& even, u32& odd, const u32* words, int rho) {
  static_assert(F::OFFSET_CODES && F::LANE_BITS == 8, "integer weights on fp8 operands are offset-binary in 8-bit lanes");
  constexpr u32 magic = (0x6400u + (1u << (F::WEIGHT_BITS - 1))) * 0x00010001u;
  const u32 code = gather_code<F>(words, rho);
  even = hsub2_f16(and_or(code, 0x00FF00FFu, 0x64006400u), magic);
  odd = hsub2_f16(and_or(code >> 8, 0x00FF00FFu, 0x64006400u), magic);
}

// Register slot `rho` as one B register of the 8-bit or 4-bit tensor-core operand (quantized activations).
template <class F>
__device__ __forceinline__ u32 operand_slot(const u32* words, int rho) {
  static_assert(F::QUANTIZED_ACT, "operand_slot serves the 8-bit and 4-bit MMAs of quantized activations");
  if constexpr (F::RAW_OPERAND) {
    return words[rho];  // one plane as wide as the lane: word rho is the register
  } else if constexpr (F::INTEGER_MMA) {
    static_assert(F::OFFSET_CODES, "narrow integers are stored offset-binary");
    return operand_bits::integer_operand(gather_code<F>(words, rho), F::LANE_BITS, F::WEIGHT_BITS);
  } else if constexpr (F::IS_FLOAT) {
    return operand_bits::float_operand(gather_code<F>(words, rho), F::WEIGHT_BITS, F::WEIGHT_MANTISSA_BITS,
                                       operand_mantissa_bits(F::COMPUTE_TYPE));
  } else {
    // Lanes 0/2 and 1/3 as exact f16 pairs (code - 2^(b-1)), converted to fp8 pairs and interleaved back.
    u32 even, odd;
    integer_lanes_as_f16<F>(even, odd, words, rho);
    constexpr bool e5m2 = F::COMPUTE_TYPE == kElementE5M2;
    return prmt(f16x2_to_fp8x2<e5m2>(even), f16x2_to_fp8x2<e5m2>(odd), 0x5140);
  }
}

// fp8 activations widened to f16 (the wgmma family, gemm/wgmma_gemm.cuh): register slot `rho` of the fp8-operand
// layout as two exact f16 pairs, `even` = its lanes 0 and 2, `odd` = lanes 1 and 3 (the K order the activations are
// widened in). Integer codes through the magic number, float codes as their fp8 operand converted.
template <class F>
__device__ __forceinline__ void widened_slot(u32& even, u32& odd, const u32* words, int rho) {
  static_assert(F::QUANTIZED_ACT && F::FP8_MMA && F::LANE_BITS == 8, "widened_slot reads the fp8-operand layout");
  if constexpr (!F::IS_FLOAT && F::WEIGHT_BITS == 4) {
    // One plane, two fields per byte: the even slot's low nibbles need the mask only, the odd slot's high nibbles the
    // 16x magic and an fma (as dequant_slot's int4 on f16); both slots of a word share its shift by a byte.
    static_assert(F::OFFSET_CODES && F::VALUES_PER_REGISTER == 4, "int4 codes on fp8 operands are offset-binary, four per register");
    const u32 word = words[rho / 2];
    const u32 odd_bytes = word >> 8;
    if (rho % 2 == 0) {
      even = hsub2_f16(and_or(word, 0x000F000Fu, 0x64006400u), 0x64086408u);       // (1024 + q) - 1032
      odd = hsub2_f16(and_or(odd_bytes, 0x000F000Fu, 0x64006400u), 0x64086408u);
    } else {
      even = hfma2_f16(and_or(word, 0x00F000F0u, 0x64006400u), 0x2C002C00u, 0xD480D480u);  // (1024 + 16 q) / 16 - 72
      odd = hfma2_f16(and_or(odd_bytes, 0x00F000F0u, 0x64006400u), 0x2C002C00u, 0xD480D480u);
    }
  } else if constexpr (!F::IS_FLOAT) {
    integer_lanes_as_f16<F>(even, odd, words, rho);
  } else {
    const u32 operand = operand_slot<F>(words, rho);
    const u32 lanes = prmt(operand, operand, 0x3120);  // lanes 0, 2 low; 1, 3 high
    constexpr bool e5m2 = F::COMPUTE_TYPE == kElementE5M2;
    even = fp8x2_to_f16x2<e5m2>(static_cast<unsigned short>(lanes & 0xFFFFu));
    odd = fp8x2_to_f16x2<e5m2>(static_cast<unsigned short>(lanes >> 16));
  }
}

// Whether operand_pair converts int4 codes on fp8 operands with a byte-permutation lookup.
template <class F>
struct Int4Fp8Lookup {
  static constexpr bool value = F::QUANTIZED_ACT && F::FP8_MMA && !F::IS_FLOAT && F::WEIGHT_BITS == 4 && F::OFFSET_CODES &&
                                F::LANE_BITS == 8 && F::VALUES_PER_REGISTER == 4;
};

// Register slots `rho` and `rho + 1` (rho even) as two B registers of the 8-bit operand. Int4 codes on fp8 share one
// word and are looked up with prmt (operand_bits::int4_fp8_pair) instead of the f16 magic number and two conversions
// per register.
template <class F>
__device__ __forceinline__ void operand_pair(u32& r0, u32& r1, const u32* words, int rho) {
  if constexpr (Int4Fp8Lookup<F>::value) {
    auto permute = [](u32 a, u32 b, u32 selector) { return prmt(a, b, selector); };
    operand_bits::int4_fp8_pair(words[rho / 2], F::COMPUTE_TYPE == kElementE5M2, permute, r0, r1);
  } else {
    r0 = operand_slot<F>(words, rho);
    r1 = operand_slot<F>(words, rho + 1);
  }
}

// One mma.sync of the format's operand types into its partial accumulators.
template <class F>
__device__ __forceinline__ void mma_step(typename F::Accumulator (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
  if constexpr (F::COMPUTE_TYPE == kElementF16) {
    mma_f16(d, a, b0, b1);
  } else if constexpr (F::COMPUTE_TYPE == kElementBF16) {
    mma_bf16(d, a, b0, b1);
  } else if constexpr (F::COMPUTE_TYPE == kElementS8) {
    mma_s8(d, a, b0, b1);
  } else if constexpr (F::COMPUTE_TYPE == kElementS4) {
    mma_s4(d, a, b0, b1);
  } else {
    mma_fp8<F::ACTIVATION == kElementE5M2, F::COMPUTE_TYPE == kElementE5M2>(d, a, b0, b1);
  }
}

}  // namespace device
}  // namespace qtune
