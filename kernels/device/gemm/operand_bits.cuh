#pragma once
// Bit formulas that turn weight codes into 8-bit or 4-bit tensor-core operands (quantized activations). Plain C++
// apart from the qualifiers, so host tests run the very same formulas on prepacked words; the device uses them in
// dequant.cuh (operand_slot). Each lane of a 32-bit register holds one value: 4 lanes of 8 bits or 8 lanes of 4 bits.
#if defined(__CUDACC__)
#define QTUNE_OPERAND_FUNCTION __host__ __device__ __forceinline__ constexpr
#else
#define QTUNE_OPERAND_FUNCTION inline constexpr
#endif

namespace qtune {
namespace device {
namespace operand_bits {

// 0x01010101 for 8-bit lanes, 0x11111111 for 4-bit lanes.
QTUNE_OPERAND_FUNCTION unsigned int lane_ones(int lane_bits) { return lane_bits == 8 ? 0x01010101u : 0x11111111u; }

// Offset-binary integer codes (code + 2^(bits-1)) in the low `bits` of each lane -> the signed lane value
// code * 2^(lane_bits - bits): the code moves to the top of the lane and its top bit flips back to two's complement.
QTUNE_OPERAND_FUNCTION unsigned int integer_operand(unsigned int codes, int lane_bits, int bits) {
  return (codes << (lane_bits - bits)) ^ (lane_ones(lane_bits) << (lane_bits - 1));
}

// Float codes (sign | exponent | mantissa, `bits` wide, `mantissa_bits` of mantissa) in the low bits of each 8-bit
// lane -> an fp8 lane with `operand_mantissa_bits` (3: e4m3, 2: e5m2): the sign moves to bit 7 and exponent|mantissa
// to the top of the fp8 mantissa, so the lane holds value * 2^(bias - fp8 bias) exactly (subnormals included).
QTUNE_OPERAND_FUNCTION unsigned int float_operand(unsigned int codes, int bits, int mantissa_bits, int operand_mantissa_bits) {
  const int shift = operand_mantissa_bits - mantissa_bits;
  const unsigned int magnitude_mask = (((1u << (bits - 1)) - 1u) << shift) * 0x01010101u;
  return ((codes << (8 - bits)) & 0x80808080u) | ((codes << shift) & magnitude_mask);
}

}  // namespace operand_bits
}  // namespace device
}  // namespace qtune
